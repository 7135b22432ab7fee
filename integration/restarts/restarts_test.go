package restarts

import (
	"fmt"
	"testing"
	"time"

	"github.com/policyflow/policyflow/topology"
)

// components are n component ids, c000 on.
func components(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("c%03d", i)
	}
	return out
}

// The consul-writer is stopped while three updates are published and
// reach the executor; started again, it brings Consul to the newest
// version, each component is notified of what it got, and nothing goes
// backwards.
func TestConsulWriterStoppedWhileThreeUpdatesArePublished(t *testing.T) {
	s := newStack(t)
	const pid = "RS.Config_writer"
	comps := components(10)
	watch := s.watchConsul(comps, pid)
	s.register(comps, []string{pid}, s.webhook)
	s.publish(pid, 1)
	s.waitConsul(comps, pid, 1)
	s.waitNotified(comps, pid, 1)

	s.stop(topology.StageConsulWriter)
	for v := 2; v <= 4; v++ {
		s.publish(pid, v)
	}
	s.waitExecuted(comps, pid, 4)
	took := s.restart(topology.StageConsulWriter)
	t.Logf("the consul-writer held its partitions again %s after it was started", took)

	s.waitConsul(comps, pid, 4)
	s.waitNotified(comps, pid, 4)
	s.noProblems(watch)
}

// The executor is killed (SIGKILL) after it took in an update of 200
// components and before every one of them has it in Consul; started
// again, it brings every component to the newest version, and no
// component is notified of a generation twice or goes backwards.
func TestExecutorKilledMidBatch(t *testing.T) {
	s := newStack(t)
	const pid = "RS.Config_executor"
	comps := components(200)
	watch := s.watchConsul(comps, pid)
	s.register(comps, []string{pid}, s.webhook)
	s.publish(pid, 1)
	s.waitConsul(comps, pid, 1)
	s.waitNotified(comps, pid, 1)

	// The kill comes as soon as the executor counts the update's first
	// record in: unless it has done the whole update by then, it is in
	// the middle of it. A kill that came too late is tried again with
	// the next version.
	v := 1
	for attempt := 1; ; attempt++ {
		v++
		before := s.metric(topology.StageExecutor, "policyflow_records_in_total", `stage="executor"`, "policy.segments")
		s.publish(pid, v)
		// Polled without a pause: the executor takes well under a
		// second over the whole update.
		deadline := time.Now().Add(settle)
		for s.metric(topology.StageExecutor, "policyflow_records_in_total", `stage="executor"`, "policy.segments") <= before {
			if time.Now().After(deadline) {
				t.Fatalf("the executor took no record of version %d in within %s", v, settle)
			}
		}
		s.kill(topology.StageExecutor)
		held := 0
		for _, got := range s.inConsul(comps, pid) {
			if got == v {
				held++
			}
		}
		t.Logf("attempt %d: executor killed with %d of %d components holding version %d in Consul", attempt, held, len(comps), v)
		took := s.restart(topology.StageExecutor)
		t.Logf("the executor held its partitions again %s after it was started", took)
		if held < len(comps) {
			break
		}
		if attempt == 5 {
			t.Fatalf("the executor finished every update before it was killed, %d times: no kill came mid-batch", attempt)
		}
	}
	began := time.Now()
	s.waitConsul(comps, pid, v)
	t.Logf("every component holds version %d in Consul %s after the restart", v, time.Since(began))
	s.waitNotified(comps, pid, v)
	s.noProblems(watch)
}
