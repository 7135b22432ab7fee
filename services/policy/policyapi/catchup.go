package policyapi

import (
	"net/http"
	"regexp"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// progressView is catchup.progress: per catch-up request, what each
// stage reported per partition (the latest report of a partition counts).
type progressView struct {
	*runtime.TableOf[*events.CatchupProgress, progressOf]
}

// progressOf is what the stages reported of one request, by stage then
// partition.
type progressOf map[string]map[int32]*events.CatchupProgress

func followProgress(env runtime.Env) (*progressView, error) {
	t, err := runtime.FollowTableOf(env, topology.CatchupProgress, func(m runtime.Msg[*events.CatchupProgress], prev progressOf, _ bool) (progressOf, error) {
		p := m.Value
		next := make(progressOf, len(prev)+1)
		for stage, parts := range prev {
			next[stage] = parts
		}
		parts := make(map[int32]*events.CatchupProgress, len(prev[p.Stage])+1)
		for part, q := range prev[p.Stage] {
			parts[part] = q
		}
		parts[p.Partition] = p
		next[p.Stage] = parts
		return next, nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return &progressView{t}, nil
}

func (v *progressView) status(id string, partitions int) api.CatchupStatus {
	byStage, _ := v.Value(id)
	st := api.CatchupStatus{RequestID: id, Partitions: partitions}
	sum := func(stage string) api.StageProgress {
		var sp api.StageProgress
		for _, p := range byStage[stage] {
			sp.PartitionsDone++
			sp.Compared += p.Compared
			sp.Differed += p.Differed
			sp.KeysWritten += p.KeysWritten
		}
		return sp
	}
	st.Matcher, st.ConsulWriter, st.AgentNotifier = sum(events.ProgressMatcher), sum(events.ProgressConsulWriter), sum(events.ProgressAgentNotifier)
	for _, p := range byStage[events.ProgressPDPIngest] {
		st.PDPIngest = &api.CatalogProgress{Listed: p.Compared, Differed: p.Differed, Removed: p.Removed}
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
func (s *API) CatchupStatus(w http.ResponseWriter, r *http.Request) *web.Error {
	id := r.PathValue("request_id")
	if err := CheckID("request_id", id); err != nil {
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	if e := s.Views.Need(topology.CatchupProgress); e != nil {
		return e
	}
	n, err := runtime.PartitionCount(r.Context(), s.Admin(), s.Env.Kafka.Topic(topology.CatchupRequests))
	if err != nil {
		return web.Errorf(http.StatusServiceUnavailable, "%v; check the brokers %v and run `policyctl topology apply`", err, s.Env.Kafka.Brokers)
	}
	st := s.progress.status(id, int(n))
	if st.Matcher.PartitionsDone == 0 && st.ConsulWriter.PartitionsDone == 0 && st.PDPIngest == nil && !issuedCatchupID.MatchString(id) {
		return web.Errorf(http.StatusNotFound, "no catch-up has request_id %q: give the request_id POST /v1/catchup or GET /catch_up answered (32 hex digits), or a periodic catch-up's pdp-ingest-<n> from pdp-ingest's log", id)
	}
	web.WriteJSON(w, http.StatusOK, st)
	return nil
}

// issuedCatchupID matches the ids catch-ups are given: the North API's
// (newID) and pdp-ingest's periodic ones. Such an id no stage reported on
// yet is a catch-up just asked for; any other is none.
var issuedCatchupID = regexp.MustCompile(`^([0-9a-f]{32}|pdp-ingest-[0-9]+)$`)
