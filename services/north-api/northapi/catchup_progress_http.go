package northapi

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// progressView is catchup.progress: per catch-up request, what each
// stage reported per partition (the latest report of a partition counts).
type progressView struct {
	codec *events.Codec
	mu    sync.RWMutex
	byID  map[string]map[string]map[int32]*events.CatchupProgress // request -> stage -> partition
}

func newProgressView(codec *events.Codec) *progressView {
	return &progressView{codec: codec, byID: map[string]map[string]map[int32]*events.CatchupProgress{}}
}

func (v *progressView) apply(ctx context.Context, rec *kgo.Record) error {
	if rec.Value == nil {
		return nil
	}
	var p events.CatchupProgress
	if err := v.codec.DecodeInto(ctx, rec.Value, &p); err != nil {
		return fmt.Errorf("catch-up progress view: decode record %q: %w", rec.Key, err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	stages := v.byID[p.RequestID]
	if stages == nil {
		stages = map[string]map[int32]*events.CatchupProgress{}
		v.byID[p.RequestID] = stages
	}
	if stages[p.Stage] == nil {
		stages[p.Stage] = map[int32]*events.CatchupProgress{}
	}
	stages[p.Stage][p.Partition] = &p
	return nil
}

// StageProgress is what one stage reported of a catch-up: partitions done
// of all, and the sums of their counts.
type StageProgress struct {
	PartitionsDone int   `json:"partitions_done"`
	Compared       int64 `json:"compared"`
	Differed       int64 `json:"differed"`
	KeysWritten    int64 `json:"keys_written,omitempty"`
}

// CatalogProgress is what pdp-ingest's catch-up found comparing the
// catalog with the PDP's full listing: policy_ids listed, policies read
// again because they differed, policies the PDP no longer lists sent to be
// removed everywhere, and, when it removed none of those, why
// (removal_withheld: an empty listing, or more than
// --catchup-max-removal-share of the catalog's policies from the PDP).
type CatalogProgress struct {
	Listed          int64  `json:"listed"`
	Differed        int64  `json:"differed"`
	Removed         int64  `json:"removed"`
	RemovalWithheld string `json:"removal_withheld,omitempty"`
}

// CatchupStatus is the answer of GET /v1/catchup/{request_id}. A
// catch-up pdp-ingest runs (pdp-ingest-<n>) first compares the catalog
// with the PDP (pdp_ingest, see CatalogProgress). The
// matcher compares components with what they should have (differed:
// components sent a catch-up delta, each written to Consul and notified
// as any update); the consul-writer compares Consul folders with their
// collections (differed: folders written back, with keys_written keys);
// the agent-notifier looks at the components' last notifications
// (differed: notifications run again, the failed ones and a renotify's).
// Done once the matcher and the consul-writer reported from every
// partition.
type CatchupStatus struct {
	RequestID     string        `json:"request_id"`
	Partitions    int           `json:"partitions"`
	Matcher       StageProgress `json:"matcher"`
	ConsulWriter  StageProgress `json:"consul_writer"`
	AgentNotifier StageProgress `json:"agent_notifier"`
	// PDPIngest is absent for catch-ups asked through the API, which
	// compare components only.
	PDPIngest *CatalogProgress `json:"pdp_ingest,omitempty"`
	Done      bool             `json:"done"`
}

func (v *progressView) status(id string, partitions int) CatchupStatus {
	v.mu.RLock()
	defer v.mu.RUnlock()
	st := CatchupStatus{RequestID: id, Partitions: partitions}
	sum := func(stage string) StageProgress {
		var sp StageProgress
		for _, p := range v.byID[id][stage] {
			sp.PartitionsDone++
			sp.Compared += p.Compared
			sp.Differed += p.Differed
			sp.KeysWritten += p.KeysWritten
		}
		return sp
	}
	st.Matcher, st.ConsulWriter, st.AgentNotifier = sum(events.ProgressMatcher), sum(events.ProgressConsulWriter), sum(events.ProgressAgentNotifier)
	for _, p := range v.byID[id][events.ProgressPDPIngest] {
		st.PDPIngest = &CatalogProgress{Listed: p.Compared, Differed: p.Differed, Removed: p.Removed}
		if p.RemovalWithheld != nil {
			st.PDPIngest.RemovalWithheld = *p.RemovalWithheld
		}
	}
	st.Done = partitions > 0 && st.Matcher.PartitionsDone >= partitions && st.ConsulWriter.PartitionsDone >= partitions
	return st
}

// catchupStatus answers GET /v1/catchup/{request_id}: how far the
// catch-up went. A request no stage has reported on yet has nothing done
// when its id is one a catch-up could have been given (just asked), and is
// 404 otherwise.
func (s *Server) catchupStatus(w http.ResponseWriter, r *http.Request) *httpError {
	id := r.PathValue("request_id")
	if err := CheckID("request_id", id); err != nil {
		return errorf(http.StatusBadRequest, "%v", err)
	}
	if e := s.needViews(topology.CatchupProgress); e != nil {
		return e
	}
	n, err := runtime.PartitionCount(r.Context(), kadm.NewClient(s.cl), s.env.Kafka.Topic(topology.CatchupRequests))
	if err != nil {
		return errorf(http.StatusServiceUnavailable, "%v; check the brokers %v and run `policyctl topology apply`", err, s.env.Kafka.Brokers)
	}
	st := s.progress.status(id, int(n))
	if st.Matcher.PartitionsDone == 0 && st.ConsulWriter.PartitionsDone == 0 && st.PDPIngest == nil && !issuedCatchupID.MatchString(id) {
		return errorf(http.StatusNotFound, "no catch-up has request_id %q: give the request_id POST /v1/catchup or GET /catch_up answered (32 hex digits), or a periodic catch-up's pdp-ingest-<n> from pdp-ingest's log", id)
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// issuedCatchupID matches the ids catch-ups are given: the North API's
// (newID) and pdp-ingest's periodic ones. Such an id no stage reported on
// yet is a catch-up just asked for; any other is none.
var issuedCatchupID = regexp.MustCompile(`^([0-9a-f]{32}|pdp-ingest-[0-9]+)$`)
