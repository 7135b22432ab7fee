package runtime

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/topology"
)

// Headers carrying a record's origin: when and by which topic the change
// it stems from entered the pipeline. The runtime copies them from each
// input to the outputs it causes, so a stage at the end of the pipeline
// can time the whole way (Metrics.Reached).
const (
	HeaderOriginTime  = "pf.origin_time"  // Unix nanoseconds, decimal
	HeaderOriginTopic = "pf.origin_topic" // base topic name
)

// Origins are the topics by which changes enter the pipeline: a record
// read from one of them without origin headers is an origin itself, at
// its timestamp.
var Origins = []string{topology.PDPNotifications, topology.DeployComponents, topology.CatchupRequests}

// OriginInfo is where and when a change entered the pipeline.
type OriginInfo struct {
	Topic string
	At    time.Time
}

// Origin reads the origin headers.
func Origin(headers []kgo.RecordHeader) (OriginInfo, bool) {
	var o OriginInfo
	var haveTime bool
	for _, h := range headers {
		switch h.Key {
		case HeaderOriginTime:
			ns, err := strconv.ParseInt(string(h.Value), 10, 64)
			if err != nil {
				return OriginInfo{}, false
			}
			o.At, haveTime = time.Unix(0, ns), true
		case HeaderOriginTopic:
			o.Topic = string(h.Value)
		}
	}
	return o, haveTime && o.Topic != ""
}

// originOf is the origin of an input: its headers', or the input itself
// when it was read from an origin topic without them.
func originOf(in Input) (OriginInfo, bool) {
	if o, ok := Origin(in.Headers); ok {
		return o, true
	}
	for _, t := range Origins {
		if in.Topic == t && !in.Timestamp.IsZero() {
			return OriginInfo{Topic: t, At: in.Timestamp}, true
		}
	}
	return OriginInfo{}, false
}

// OriginHeaders are the headers that carry o.
func OriginHeaders(o OriginInfo) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: HeaderOriginTime, Value: []byte(strconv.FormatInt(o.At.UnixNano(), 10))},
		{Key: HeaderOriginTopic, Value: []byte(o.Topic)},
	}
}

// withOrigin adds the origin headers of in to rec, unless the handler set
// its own.
func withOrigin(rec *kgo.Record, in Input) {
	o, ok := originOf(in)
	if !ok {
		return
	}
	if _, has := Origin(rec.Headers); has {
		return
	}
	rec.Headers = append(rec.Headers, OriginHeaders(o)...)
}

// InputOrigin is the origin of a handler's input (see Origin), for a stage
// that reaches a milestone later than its handler returns.
func InputOrigin(in Input) (OriginInfo, bool) { return originOf(in) }

// ReachedAt records a milestone for a change of origin o, now.
func (m *Metrics) ReachedAt(milestone string, o OriginInfo) {
	d := time.Since(o.At)
	if d < 0 {
		d = 0
	}
	m.EndToEnd.WithLabelValues(milestone, o.Topic).Observe(d.Seconds())
}
