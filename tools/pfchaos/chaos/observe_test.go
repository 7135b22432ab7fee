package chaos

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/agent-notifier/agentnotifier"
	"github.com/policyflow/policyflow/services/consulkv"
)

// notify delivers to o's webhook what the agent-notifier would: component
// c's generation gen holding version v of policy P.
func notify(t *testing.T, o *observer, c string, gen, v int) {
	t.Helper()
	body := `{"policies":[{"policyName":"P.` + strconv.Itoa(v) + `.xml","policyVersion":"` + strconv.Itoa(v) + `"}],"updated_policies":[],"removed_policies":[]}`
	req := httptest.NewRequest(http.MethodPost, "/hook/"+c, strings.NewReader(body))
	req.Header.Set(agentnotifier.HeaderGeneration, strconv.Itoa(gen))
	w := httptest.NewRecorder()
	o.webhook(w, req)
	if w.Code != http.StatusNoContent {
		t.Fatalf("webhook answered %d %s", w.Code, w.Body)
	}
}

// The observer counts what the matrix promises to count: a generation
// delivered twice, a generation or a version older than one delivered
// before, and a Consul item going back to an older version; a newer
// generation holding the same version (the notifier builds it from
// Consul when it delivers) is neither.
func TestObserverCounts(t *testing.T) {
	o := newObserver(map[string]string{"a": "P", "b": "P"})
	notify(t, o, "a", 1, 1)
	notify(t, o, "a", 2, 3)
	notify(t, o, "a", 3, 3) // generation 2 was delivered with 3 already
	if dup, back, ev := o.counts(); dup != 0 || back != 0 {
		t.Fatalf("in-order deliveries counted dup %d backwards %d: %v", dup, back, ev)
	}
	notify(t, o, "a", 3, 3)
	if dup, back, _ := o.counts(); dup != 1 || back != 0 {
		t.Fatalf("generation 3 again: dup %d backwards %d, want 1 and 0", dup, back)
	}
	notify(t, o, "b", 5, 4)
	notify(t, o, "b", 4, 4)
	notify(t, o, "b", 6, 2)
	if dup, back, _ := o.counts(); dup != 1 || back != 2 {
		t.Fatalf("generation 4 after 5, version 2 after 4: dup %d backwards %d, want 1 and 2", dup, back)
	}
	if got := o.lastNotified("b"); got != 2 {
		t.Fatalf("last notified version of b: %d, want 2", got)
	}

	o.reset()
	item := func(c string, v int) *consulapi.KVPair {
		return &consulapi.KVPair{Key: consulkv.ItemKey(c, "P"), Value: []byte(`{"policyVersion":"` + strconv.Itoa(v) + `"}`)}
	}
	o.sawConsul(consulapi.KVPairs{item("a", 3), item("b", 4), {Key: "other:policies/items/P", Value: []byte(`{"policyVersion":"1"}`)}})
	o.sawConsul(consulapi.KVPairs{item("a", 3), item("b", 5)})
	if _, back, ev := o.counts(); back != 0 {
		t.Fatalf("Consul values going forward counted %d backwards: %v", back, ev)
	}
	o.sawConsul(consulapi.KVPairs{item("a", 2), item("b", 5)})
	if _, back, _ := o.counts(); back != 1 {
		t.Fatalf("Consul item of a from 3 to 2: %d backwards, want 1", back)
	}
}

func TestMatrixFailed(t *testing.T) {
	ok := Matrix{{Fault: "kill-matcher"}, {Fault: "consul-down"}}
	if ok.Failed() {
		t.Fatal("a matrix of zeros failed")
	}
	for _, r := range []Row{{Lost: 1}, {Dup: 1}, {Backwards: 1}, {Err: "not run"}} {
		if !append(ok, r).Failed() {
			t.Errorf("a matrix with %+v did not fail", r)
		}
	}
	var b strings.Builder
	append(ok, Row{Fault: "broker-restart", Dup: 2, Details: []string{"a notified of generation 3 again"}}).Print(&b)
	if out := b.String(); !strings.Contains(out, "broker-restart") || !strings.Contains(out, "a notified of generation 3 again") {
		t.Fatalf("the printed matrix does not show the failed row and its details:\n%s", out)
	}
}

// A generation delivered again because the fault cut the notifier off
// between its delivery and the record of its outcome is at least once, as
// promised, and not a duplicate; delivered again with no fault in
// between, it is.
func TestObserverExcusesRedeliveryAcrossTheFault(t *testing.T) {
	o := newObserver(map[string]string{"a": "P"})
	notify(t, o, "a", 1, 1)
	o.mu.Lock()
	o.gens["a"][1] = time.Now().Add(-time.Minute) // long before the fault
	o.mu.Unlock()
	notify(t, o, "a", 2, 2) // just before the fault
	o.faultStarts()
	o.faultEnds()
	notify(t, o, "a", 2, 2) // run again after the kill
	if dup, _, ev := o.counts(); dup != 0 || o.redelivered != 1 {
		t.Fatalf("redelivery across the fault: dup %d redelivered %d: %v", dup, o.redelivered, ev)
	}
	notify(t, o, "a", 1, 2) // delivered long before the fault: a duplicate
	if dup, _, _ := o.counts(); dup != 1 {
		t.Fatalf("generation 1 again: dup %d, want 1", dup)
	}
	notify(t, o, "a", 3, 3)
	notify(t, o, "a", 3, 3) // both after the fault ended
	if dup, _, _ := o.counts(); dup != 2 {
		t.Fatalf("generation 3 twice after the fault: dup %d, want 2", dup)
	}
}
