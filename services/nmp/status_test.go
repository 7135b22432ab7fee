package nmp

import (
	"fmt"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
)

// TestNodeStatesPerNMP folds reports of one node about several NMPs and
// checks what each NMP's status shows for the node and how its rollout
// counts it.
func TestNodeStatesPerNMP(t *testing.T) {
	const (
		a  = `{"enabled":true,"constraints":["a == 1"],"agentUpgradePolicy":{"atLeastVersion":"1.1.0"},"failureThreshold":{"count":1}}`
		b  = `{"enabled":true,"constraints":["a == 1"],"agentUpgradePolicy":{"atLeastVersion":"1.2.0"}}`
		c  = `{"enabled":true,"constraints":["a == 1"],"agentUpgradePolicy":{"atLeastVersion":"1.1.0"}}`
		aD = `{"enabled":false,"constraints":["a == 1"],"agentUpgradePolicy":{"atLeastVersion":"1.1.0"},"failureThreshold":{"count":1}}`
	)
	type report struct{ policy, state, version string }
	cases := []struct {
		name     string
		policies map[string]string // name -> document; "b" and "c" are newer than "a"
		reports  []report
		query    string
		want     NodeState
		rollout  Rollout
	}{
		{name: "a second NMP's report keeps the first's state",
			policies: map[string]string{"a": aD, "b": b},
			reports:  []report{{"a", StateSuccessful, "1.1.0"}, {"b", StateDownloaded, "1.1.0"}},
			query:    "a", want: NodeState{Status: StateSuccessful, Version: "1.1.0"}, rollout: Rollout{Started: 1}},
		{name: "and the second's own",
			policies: map[string]string{"a": aD, "b": b},
			reports:  []report{{"a", StateSuccessful, "1.1.0"}, {"b", StateDownloaded, "1.1.0"}},
			query:    "b", want: NodeState{Status: StateDownloaded, Version: "1.1.0"}, rollout: Rollout{Started: 1}},
		{name: "a failure still counts after another NMP reports",
			policies: map[string]string{"a": aD, "b": b},
			reports:  []report{{"a", StateFailed, "1.0.0"}, {"b", StateSuccessful, "1.2.0"}},
			query:    "a", want: NodeState{Status: StateFailed, Version: "1.0.0"},
			rollout: Rollout{Started: 1, Failed: 1, Paused: true, Reason: "rollout paused: 1 nodes failed, the threshold is 1; resume with policyctl nmp resume a"}},
		{name: "ignored where another NMP is enacted",
			policies: map[string]string{"a": a, "b": b},
			reports:  []report{{"a", StateSuccessful, "1.1.0"}},
			query:    "b", want: NodeState{Status: "ignored (conflict with o/a)"}},
		{name: "ignored where the newer NMP is chosen",
			policies: map[string]string{"a": a, "b": b},
			query:    "a", want: NodeState{Status: "ignored (conflict with o/b)"}},
		{name: "the same intent shows the enacted NMP's state",
			policies: map[string]string{"a": a, "c": c},
			reports:  []report{{"a", StateSuccessful, "1.1.0"}},
			query:    "c", want: NodeState{Status: StateSuccessful, Version: "1.1.0"}},
		{name: "waiting before any report",
			policies: map[string]string{"a": a},
			query:    "a", want: NodeState{Status: StateWaiting}},
		{name: "rolled back on order, with the version it went back to, is no failure",
			policies: map[string]string{"a": a},
			reports:  []report{{"a", StateSuccessful, "1.1.0"}, {"a", StateRolledBack, "1.0.0"}},
			query:    "a", want: NodeState{Status: StateRolledBack, Version: "1.0.0"}, rollout: Rollout{Started: 1}},
		{name: "precheck failed counts apart and does not pause",
			policies: map[string]string{"a": a},
			reports:  []report{{"a", StatePrecheckFailed, "1.0.0"}},
			query:    "a", want: NodeState{Status: StatePrecheckFailed, Version: "1.0.0"}, rollout: Rollout{PrecheckFailed: 1}},
		{name: "a rejected signature is shown as such and counts as a failure",
			policies: map[string]string{"a": aD},
			reports:  []report{{"a", StateSignatureRejected, "1.0.0"}},
			query:    "a", want: NodeState{Status: StateSignatureRejected, Version: "1.0.0"},
			rollout: Rollout{Started: 1, Failed: 1, Paused: true, Reason: "rollout paused: 1 nodes failed, the threshold is 1; resume with policyctl nmp resume a"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWorld()
			n := node(t, "o", "n1", "", `[{"name":"a","value":1}]`, nil, "1.0.0")
			w.SetNode(n.Key, n)
			for name, doc := range tc.policies {
				ev := build(t, "o", name, doc)
				if name != "a" {
					ev.LastUpdated = ev.LastUpdated.Add(time.Second)
				}
				w.SetPolicy(Key("o", name), compile(t, ev))
			}
			for i, r := range tc.reports {
				w.SetStatus(n.Key, &events.AgentStatus{Org: "o", Node: "n1", Policy: Key("o", r.policy), Status: r.state,
					SoftwareVersion: r.version, ReportedAt: t0.Add(time.Duration(i) * time.Second)})
			}
			p := w.Policy(Key("o", tc.query))
			got := w.NodeStates(p)
			tc.want.Node = "n1"
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("states of %s: got %+v, want %+v", tc.query, got, tc.want)
			}
			if r := w.Rollout(p.Key); r != tc.rollout {
				t.Fatalf("rollout of %s: got %+v, want %+v", tc.query, r, tc.rollout)
			}
		})
	}
}

// TestRemovedNodeForgetsEveryReport: removing the node's status forgets
// its reports about every NMP, and their counts.
func TestRemovedNodeForgetsEveryReport(t *testing.T) {
	w := NewWorld()
	for _, name := range []string{"a", "b"} {
		w.SetPolicy(Key("o", name), compile(t, build(t, "o", name, `{"enabled":true,"agentUpgradePolicy":{},"confirmAllNodes":true}`)))
	}
	for i, name := range []string{"a", "b"} {
		w.SetStatus("o/n1", &events.AgentStatus{Org: "o", Node: "n1", Policy: Key("o", name), Status: StateFailed, ReportedAt: t0.Add(time.Duration(i))})
	}
	w.SetStatus("o/n1", nil)
	for _, name := range []string{"a", "b"} {
		if r := w.Rollout(Key("o", name)); r.Started != 0 || r.Failed != 0 {
			t.Errorf("%s: %s", name, fmt.Sprint(r))
		}
	}
}
