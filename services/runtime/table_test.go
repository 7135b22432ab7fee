package runtime_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
)

func TestTableRebuildsFollowsAndDeletes(t *testing.T) {
	c := newCluster(t)
	junk := c.Record(t, "in", "k5", nil)
	junk.Value = []byte("definitely not avro")
	c.ProduceRecords(t,
		c.Record(t, "in", "k1", req("a")),
		c.Record(t, "in", "k2", req("b")),
		c.Record(t, "in", "k1", req("a2")),
		c.Record(t, "in", "k3", req("c")),
		c.Record(t, "in", "k3", nil),
		c.Record(t, "in", "k4", req("d")),
		c.Record(t, "in", "k4", &events.PolicyChange{ChangeID: "c1", Action: events.ActionRemoved, ChangedAt: time.UnixMilli(1).UTC()}),
		junk,
	)
	var mu sync.Mutex
	changes := map[string][]string{}
	table, err := runtime.FollowTable(stagetest.Env(c.Kafka), "in", func(m runtime.Msg[*events.CatchupRequest]) {
		mu.Lock()
		defer mu.Unlock()
		v := "deleted"
		if m.Value != nil {
			v = m.Value.RequestID
		}
		changes[string(m.Key)] = append(changes[string(m.Key)], v)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := table.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	get := func(key string) string {
		v, found := table.Get(key)
		switch {
		case !found:
			return "unknown"
		case v == nil:
			return "deleted"
		}
		return v.RequestID
	}
	want := map[string]string{"k1": "a2", "k2": "b", "k3": "deleted", "k4": "d", "k5": "unknown", "k6": "unknown"}
	for key, w := range want {
		if g := get(key); g != w {
			t.Errorf("after the rebuild %s is %s, want %s", key, g, w)
		}
	}
	if n := table.Len(); n != 3 {
		t.Errorf("the table holds %d values, want 3", n)
	}
	mu.Lock()
	if got := fmt.Sprint(changes["k1"], changes["k3"], changes["k4"]); got != "[a a2] [c deleted] [d]" {
		t.Errorf("changes told of k1, k3, k4: %s, want [a a2] [c deleted] [d]", got)
	}
	mu.Unlock()

	// Kept current: what is committed later is there once caught up.
	c.ProduceCommitted(t, c.Record(t, "in", "k2", nil), c.Record(t, "in", "k6", req("e")), c.Record(t, "in", "k3", req("c2")))
	if err := table.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"k1": "a2", "k2": "deleted", "k3": "c2", "k6": "e"}
	for key, w := range want {
		if g := get(key); g != w {
			t.Errorf("after catching up %s is %s, want %s", key, g, w)
		}
	}
}

// A TableOf keeps what its Build makes of each key's records, folded over
// the key's previous value; a record the Build refuses leaves the key as
// it was; Sorted lists by key; WaitFor returns once one's own write is in.
func TestTableOfBuildsSortsAndWaitsForOwnWrite(t *testing.T) {
	c := newCluster(t)
	c.ProduceRecords(t,
		c.Record(t, "in", "k2", req("b")),
		c.Record(t, "in", "k1", req("a")),
		c.Record(t, "in", "k1", req("bad")),
		c.Record(t, "in", "k1", req("a2")),
		c.Record(t, "in", "k3", req("c")),
		c.Record(t, "in", "k3", nil),
	)
	// Each key's value is the request ids it had since it was (re)written.
	build := func(m runtime.Msg[*events.CatchupRequest], prev []string, had bool) ([]string, error) {
		v := m.Value
		if v.RequestID == "bad" {
			return nil, fmt.Errorf("request %s of %s refused", v.RequestID, m.Key)
		}
		if !had {
			prev = nil
		}
		return append(slices.Clone(prev), v.RequestID), nil
	}
	table, err := runtime.FollowTableOf(stagetest.Env(c.Kafka), "in", build, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := table.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(table.Sorted()); got != "[[a a2] [b]]" {
		t.Errorf("sorted: %s, want [[a a2] [b]] (k1 folded without the refused record, k3 deleted)", got)
	}
	if v, ok := table.Value("k3"); ok {
		t.Errorf("k3 was deleted but has value %v", v)
	}
	if v, found := table.Get("k3"); !found || v != nil {
		t.Errorf("Get(k3) = %v, %v; want nil, true (a tombstone)", v, found)
	}
	if k, ok := table.Find(func(v []string) bool { return slices.Contains(v, "b") }); !ok || k != "k2" {
		t.Errorf("Find(b) = %q, %v; want k2", k, ok)
	}

	// Read-your-write: once WaitFor returns, the record is in.
	own := c.Record(t, "in", "k3", req("c2"))
	c.ProduceRecords(t, own)
	if err := table.WaitFor(ctx, own.Partition, own.Offset); err != nil {
		t.Fatal(err)
	}
	if v, ok := table.Value("k3"); !ok || fmt.Sprint(v) != "[c2]" {
		t.Errorf("after WaitFor k3 is %v (%v), want [c2]: a deleted key starts anew", v, ok)
	}
	if table.Base() != "in" {
		t.Errorf("Base() = %q, want in", table.Base())
	}
}

// WaitCaughtUpAsOf lists the topic's ends once for every caller whose time
// comes before a listing (the inputs of one poll), and again for a later
// one, which then sees what was committed before its time.
func TestTableWaitsAsOfOneListingPerPoll(t *testing.T) {
	c := newCluster(t)
	c.ProduceCommitted(t, c.Record(t, "in", "k1", req("a")))
	counter := runtime.NewRequestCounter()
	env := stagetest.Env(c.Kafka)
	env.Kafka.Hooks = []kgo.Hook{counter}
	table, err := runtime.FollowTable[*events.CatchupRequest](env, "in", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	polled := time.Now()
	if err := table.WaitCaughtUpAsOf(ctx, polled); err != nil {
		t.Fatal(err)
	}
	before := counter.Counts()
	for range 99 {
		if err := table.WaitCaughtUpAsOf(ctx, polled); err != nil {
			t.Fatal(err)
		}
	}
	if n := counter.Counts().Since(before).Work(); n != 0 {
		t.Errorf("99 more waits as of the same time sent %d requests, want none: %s", n, counter.Counts().Since(before))
	}
	if v, _ := table.Value("k1"); v == nil || v.RequestID != "a" {
		t.Fatalf("k1 is %v after the wait, want a", v)
	}

	c.ProduceCommitted(t, c.Record(t, "in", "k1", req("b")))
	before = counter.Counts()
	if err := table.WaitCaughtUpAsOf(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if n := counter.Counts().Since(before).Of(kmsg.ListOffsets); n == 0 {
		t.Errorf("a wait as of a time after the last listing sent no ListOffsets request")
	}
	if v, _ := table.Value("k1"); v == nil || v.RequestID != "b" {
		t.Fatalf("k1 is %v after waiting as of a time after its write, want b", v)
	}
}
