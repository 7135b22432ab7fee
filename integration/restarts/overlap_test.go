package restarts

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/topology"
)

// ledgerRun is one run of a ledger script: when it wrote its first and
// its last line, and whether it ran to its end.
type ledgerRun struct {
	update, pid string
	first, last int64
	ended       bool
}

// newLedgerScript writes a component's script that runs for about
// seconds: it appends "start|tick|end <update id> <pid> <unix ns>" lines
// to its ledger, a tick every 100 ms.
func (s *stack) newLedgerScript(component string, seconds int) (path, ledger string) {
	s.t.Helper()
	path, ledger = filepath.Join(s.scripts, component+".sh"), filepath.Join(s.scripts, component+".ledger")
	line := func(kind string) string {
		return fmt.Sprintf(`echo "%s $POLICYFLOW_UPDATE_ID $$ $(date +%%s%%N)" >> %s`, kind, ledger)
	}
	body := fmt.Sprintf("#!/bin/sh\n%s\ni=0\nwhile [ $i -lt %d ]; do sleep 0.1; %s; i=$((i+1)); done\n%s\n", line("start"), seconds*10, line("tick"), line("end"))
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		s.t.Fatal(err)
	}
	return path, ledger
}

// ledgerRuns reads a ledger into its runs, in the order they started.
func ledgerRuns(t *testing.T, ledger string) []*ledgerRun {
	t.Helper()
	data, err := os.ReadFile(ledger)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []*ledgerRun
	byPID := map[string]*ledgerRun{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 {
			t.Fatalf("%s: line %q", ledger, sc.Text())
		}
		at, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			t.Fatalf("%s: line %q: %v", ledger, sc.Text(), err)
		}
		if f[0] == "start" {
			byPID[f[2]] = &ledgerRun{update: f[1], pid: f[2], first: at}
			out = append(out, byPID[f[2]])
		}
		r := byPID[f[2]]
		if r == nil {
			t.Fatalf("%s: line %q of a run that never started", ledger, sc.Text())
		}
		r.last, r.ended = at, r.ended || f[0] == "end"
	}
	return out
}

// The agent-notifier is killed (SIGKILL) half a second into a component's
// script, which takes seconds, and started again with the same
// --instance-id. The script's ledger shows that no two runs overlapped
// (the killed notifier's run was stopped before the update ran again),
// that the update ran to its end once, and that it did not run again
// after it had.
func TestNotifierKilledMidRunNeverRunsTwoAtOnce(t *testing.T) {
	s := newStack(t)
	const pid = "RS.Config_overlap"
	const comp = "c-overlap"
	script, ledger := s.newLedgerScript(comp, 5)
	s.publish(pid, 1)
	s.register([]string{comp}, []string{pid}, func(string) events.NotifyTarget {
		return events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: script, TimeoutMs: 60000}
	})
	// The kill comes half a second into the run.
	s.eventually("the script ran half a second", func() error {
		if runs := ledgerRuns(t, ledger); len(runs) == 0 || time.Duration(runs[0].last-runs[0].first) < 500*time.Millisecond {
			return fmt.Errorf("runs in %s: %v", ledger, runs)
		}
		return nil
	})
	s.kill(topology.StageAgentNotifier)
	s.restart(topology.StageAgentNotifier)
	var cl *consulkv.Claim
	s.eventually("the update notified to its end", func() error {
		cl = s.claim(comp)
		if cl == nil || cl.Outcome != consulkv.OutcomeOK {
			return fmt.Errorf("claim %+v", cl)
		}
		return nil
	})
	// Then the next update, so that a run of the first one again would
	// be seen before it.
	s.publish(pid, 2)
	s.eventually("version 2 notified", func() error {
		if c := s.claim(comp); c == nil || c.Generation <= cl.Generation || c.Outcome != consulkv.OutcomeOK {
			return fmt.Errorf("claim %+v", c)
		}
		return nil
	})
	runs := ledgerRuns(t, ledger)
	ended := map[string]int{}
	for k, r := range runs {
		t.Logf("run %d: update %s pid %s, %s long, ended %v", k+1, r.update, r.pid, time.Duration(r.last-r.first).Round(time.Millisecond), r.ended)
		if k > 0 && r.first <= runs[k-1].last {
			t.Errorf("run %d (pid %s, update %s) started %s before run %d (pid %s) wrote its last line: they overlapped",
				k+1, r.pid, r.update, time.Duration(runs[k-1].last-r.first), k, runs[k-1].pid)
		}
		if ended[r.update] > 0 {
			t.Errorf("update %s ran again (pid %s) after a run of it had finished", r.update, r.pid)
		}
		if r.ended {
			ended[r.update]++
		}
	}
	if len(runs) < 3 || runs[0].ended || len(ended) != 2 {
		t.Errorf("%d runs, %d updates run to their end; want the first run cut short by the kill, the update run again to its end, then the next update", len(runs), len(ended))
	}
}
