package runtime

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// RequestCounter counts the requests written to the brokers by the
// clients it hooks (Kafka.Hooks), by API key. What a unit of work costs in
// requests is deterministic where its time is not, so a stage's budget of
// requests per record is a test that fails on any machine: a round trip
// per record shows as one more request per record, however fast the
// broker answers.
type RequestCounter struct {
	mu sync.Mutex
	n  map[int16]int64
}

var _ kgo.HookBrokerWrite = (*RequestCounter)(nil)

// NewRequestCounter returns a counter at zero.
func NewRequestCounter() *RequestCounter { return &RequestCounter{n: map[int16]int64{}} }

// OnBrokerWrite counts one request (kgo.HookBrokerWrite), written or not.
func (c *RequestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	c.mu.Lock()
	c.n[key]++
	c.mu.Unlock()
}

// Counts returns the requests counted so far.
func (c *RequestCounter) Counts() RequestCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(RequestCounts, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// RequestCounts are requests by API key (kmsg.Key).
type RequestCounts map[int16]int64

// Since is what was counted after before was taken.
func (a RequestCounts) Since(before RequestCounts) RequestCounts {
	out := RequestCounts{}
	for k, v := range a {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// PacedByTime are the requests a client sends as time passes, whatever
// work it does: fetches (long polls that come back empty when there is
// nothing to read) and group heartbeats. A budget of requests per unit of
// work leaves them out (Work).
var PacedByTime = []kmsg.Key{kmsg.Fetch, kmsg.Heartbeat}

// Work is the total of the requests that are not PacedByTime.
func (a RequestCounts) Work() int64 {
	var n int64
	for k, v := range a {
		if !slices.Contains(PacedByTime, kmsg.Key(k)) {
			n += v
		}
	}
	return n
}

// Of is the count of one API.
func (a RequestCounts) Of(key kmsg.Key) int64 { return a[int16(key)] }

// String lists the counts by API name, most first.
func (a RequestCounts) String() string {
	keys := make([]int16, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y int16) int {
		if a[x] != a[y] {
			return int(a[y] - a[x])
		}
		return int(x - y)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", kmsg.NameForKey(k), a[k])
	}
	return strings.Join(parts, ", ")
}
