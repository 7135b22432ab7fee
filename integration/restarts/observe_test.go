package restarts

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/agent-notifier/agentnotifier"
	"github.com/policyflow/policyflow/topology"
)

// note is one notification a component received.
type note struct {
	gen      int            // its generation (webhooks only)
	versions map[string]int // policy id -> version, of "policies"
	updated  map[string]int // policy id -> version, of "updated_policies"
}

// parseNote reads a notification's JSON.
func parseNote(body []byte) (note, error) {
	var p struct {
		Policies        []json.RawMessage `json:"policies"`
		UpdatedPolicies []json.RawMessage `json:"updated_policies"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return note{}, fmt.Errorf("notification %q: %w", body, err)
	}
	n := note{versions: map[string]int{}, updated: map[string]int{}}
	for _, b := range p.Policies {
		n.versions[policyIDOf(b)] = versionOf(b)
	}
	for _, b := range p.UpdatedPolicies {
		n.updated[policyIDOf(b)] = versionOf(b)
	}
	return n, nil
}

// problems lists what is wrong with a component's notifications, in the
// order received, each compared with the one before (the component's
// last successful notification): a generation that repeats or goes back,
// a policy's version that goes back, and a policy whose version changed
// since the one before but is missing from updated_policies.
func problems(component string, notes []note) []string {
	var out []string
	for k := 1; k < len(notes); k++ {
		prev, cur := notes[k-1], notes[k]
		if cur.gen != 0 && cur.gen <= prev.gen {
			out = append(out, fmt.Sprintf("%s: notification %d has generation %d after %d", component, k, cur.gen, prev.gen))
		}
		for id, v := range cur.versions {
			if v < prev.versions[id] {
				out = append(out, fmt.Sprintf("%s: notification %d has version %d of %s after %d", component, k, v, id, prev.versions[id]))
			}
			if v != prev.versions[id] && cur.updated[id] != v {
				out = append(out, fmt.Sprintf("%s: notification %d has version %d of %s (the one before: %d) but not in updated_policies %v",
					component, k, v, id, prev.versions[id], cur.updated))
			}
		}
	}
	return out
}

// hooks records the notifications the components' webhooks receive.
type hooks struct {
	mu    sync.Mutex
	got   map[string][]note
	wrong []string
	// failing components' webhooks answer 503; refused are the
	// notifications they refused.
	failing map[string]bool
	refused map[string][]note
}

func newHooks() *hooks {
	return &hooks{got: map[string][]note{}, failing: map[string]bool{}, refused: map[string][]note{}}
}

// fail makes a component's webhook answer 503 (on) or 204 (off).
func (h *hooks) fail(c string, on bool) {
	h.mu.Lock()
	h.failing[c] = on
	h.mu.Unlock()
}

// refusedOf returns the notifications a component's webhook refused.
func (h *hooks) refusedOf(c string) []note {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.refused[c])
}

// serve receives POST /hook/<component>.
func (h *hooks) serve(w http.ResponseWriter, r *http.Request) {
	c := strings.TrimPrefix(r.URL.Path, "/hook/")
	body, err := io.ReadAll(r.Body)
	var n note
	if err == nil {
		n, err = parseNote(body)
	}
	if err == nil {
		n.gen, err = strconv.Atoi(r.Header.Get(agentnotifier.HeaderGeneration))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.wrong = append(h.wrong, fmt.Sprintf("%s: %v", c, err))
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if h.failing[c] {
		h.refused[c] = append(h.refused[c], n)
		http.Error(w, "failing on purpose", http.StatusServiceUnavailable)
		return
	}
	h.got[c] = append(h.got[c], n)
	w.WriteHeader(http.StatusNoContent)
}

// of returns the notifications a component received.
func (h *hooks) of(c string) []note {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got[c])
}

// problems lists what is wrong with every component's notifications.
func (h *hooks) problems() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := slices.Clone(h.wrong)
	for _, c := range slices.Sorted(maps.Keys(h.got)) {
		out = append(out, problems(c, h.got[c])...)
	}
	return out
}

// waitNotified waits until every component's latest notification has
// version v of pid.
func (s *stack) waitNotified(components []string, pid string, v int) {
	s.t.Helper()
	s.eventually(fmt.Sprintf("%d components notified of version %d of %s", len(components), v, pid), func() error {
		var behind []string
		for _, c := range components {
			notes := s.hooks.of(c)
			if len(notes) == 0 || notes[len(notes)-1].versions[pid] != v {
				behind = append(behind, c)
			}
		}
		if len(behind) > 0 {
			return fmt.Errorf("%d behind: %v", len(behind), behind[:min(len(behind), 5)])
		}
		return nil
	})
}

// noProblems fails the test when a component's notifications or Consul
// item went wrong.
func (s *stack) noProblems(w *consulWatch) {
	s.t.Helper()
	if p := s.hooks.problems(); len(p) > 0 {
		for _, c := range slices.Sorted(maps.Keys(s.hooks.got)) {
			if notes := s.hooks.of(c); len(notes) <= 20 && slices.ContainsFunc(p, func(x string) bool { return strings.HasPrefix(x, c+":") }) {
				for k, n := range notes {
					s.t.Logf("%s notification %d: generation %d, policies %v, updated_policies %v", c, k, n.gen, n.versions, n.updated)
				}
			}
		}
		s.t.Fatalf("%d problems with the notifications:\n%s", len(p), strings.Join(p[:min(len(p), 20)], "\n"))
	}
	if w != nil {
		if b := w.wentBack(); len(b) > 0 {
			s.t.Fatalf("Consul items went back:\n%s", strings.Join(b[:min(len(b), 20)], "\n"))
		}
	}
}

// waitExecuted waits until the executor has written, for every component,
// a collection on component.policies with version v of pid (read
// committed: what the consul-writer will read).
func (s *stack) waitExecuted(components []string, pid string, v int) {
	s.t.Helper()
	opts, err := s.kafka.ClientOpts()
	if err != nil {
		s.t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(s.kafka.Topic(topology.ComponentPolicies)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		s.t.Fatal(err)
	}
	defer cl.Close()
	want := map[string]bool{}
	for _, c := range components {
		want[c] = true
	}
	codec := events.Default()
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	for len(want) > 0 {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			s.t.Fatalf("the executor wrote no collection with version %d of %s for %d of %d components within %s", v, pid, len(want), len(components), settle)
		}
		f.EachRecord(func(r *kgo.Record) {
			ev, err := codec.Decode(ctx, r.Value)
			cp, ok := ev.(*events.ComponentPolicies)
			if err != nil || !ok {
				return
			}
			for _, p := range cp.Policies {
				if p.PolicyID == pid && p.PolicyVersion == strconv.Itoa(v) {
					delete(want, cp.ComponentID)
				}
			}
		})
	}
}

// script is a component's reconfigure script that takes a while: it
// appends "start <notification>" to its log, sleeps, then appends "done
// <notification>".
type script struct {
	path, log string
}

// newScript writes a component's script in the stack's script directory.
func (s *stack) newScript(component string, sleep time.Duration) script {
	s.t.Helper()
	sc := script{path: filepath.Join(s.scripts, component+".sh"), log: filepath.Join(s.scripts, component+".log")}
	body := fmt.Sprintf("#!/bin/sh\nprintf 'start %%s\\n' \"$2\" >> %s\nsleep %g\nprintf 'done %%s\\n' \"$2\" >> %s\n", sc.log, sleep.Seconds(), sc.log)
	if err := os.WriteFile(sc.path, []byte(body), 0o755); err != nil {
		s.t.Fatal(err)
	}
	return sc
}

// run is one line of a script's log.
type run struct {
	done bool // "done"; else "start"
	note note
	raw  string
}

// runs reads a script's log.
func (sc script) runs(t *testing.T) []run {
	t.Helper()
	data, err := os.ReadFile(sc.log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []run
	sn := bufio.NewScanner(bytes.NewReader(data))
	sn.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sn.Scan() {
		kind, payload, ok := strings.Cut(sn.Text(), " ")
		if !ok || (kind != "start" && kind != "done") {
			t.Fatalf("%s: line %q", sc.log, sn.Text())
		}
		n, err := parseNote([]byte(payload))
		if err != nil {
			t.Fatalf("%s: %v", sc.log, err)
		}
		out = append(out, run{done: kind == "done", note: n, raw: payload})
	}
	return out
}

// waitRun waits until a script's log shows a run finished with version v
// of pid.
func (s *stack) waitRun(scripts map[string]script, pid string, v int) {
	s.t.Helper()
	s.eventually(fmt.Sprintf("%d scripts ran with version %d of %s", len(scripts), v, pid), func() error {
		var behind []string
		for c, sc := range scripts {
			if !slices.ContainsFunc(sc.runs(s.t), func(r run) bool { return r.done && r.note.versions[pid] == v }) {
				behind = append(behind, c)
			}
		}
		if len(behind) > 0 {
			return fmt.Errorf("%d not yet: %v", len(behind), behind[:min(len(behind), 5)])
		}
		return nil
	})
}

// sleepy is how long the scripts of the notifier tests take: long enough
// that a kill finds some running and some waiting for a slot.
const sleepy = 2 * time.Second
