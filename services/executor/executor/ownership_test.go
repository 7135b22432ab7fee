package executor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// deploymentsOn returns two deployment names whose updates go to
// different partitions of policy.segments (of 3).
func deploymentsOn(t *testing.T) (a, b string, pa, pb int32) {
	t.Helper()
	a, pa = "dep-a", runtime.KeyPartition("dep-a", 3)
	for i := 0; i < 100; i++ {
		b = fmt.Sprintf("dep-b%d", i)
		if pb = runtime.KeyPartition(b, 3); pb != pa {
			return a, b, pa, pb
		}
	}
	t.Fatal("no deployment name on another partition")
	return
}

// TestExecutorKeepsTheCollectionsOfItsPartitionsOnly checks what keeps the
// executor's memory a share of the whole when it runs as several members:
// it keeps the collections of the deployments on the policy.segments
// partitions it holds, gives them up with the partitions, reads them when
// it gains partitions, and reads the collection of a component that moved
// to one of its deployments when the component is next updated.
func TestExecutorKeepsTheCollectionsOfItsPartitionsOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newCluster(t)
	depA, depB, pa, pb := deploymentsOn(t)
	reg := func(id, dep string) *events.Component {
		comp := component(id, "scn-"+id)
		comp.DeploymentID = dep
		return comp
	}
	coll := func(id, dep string, gen int64) *events.ComponentPolicies {
		return &events.ComponentPolicies{ComponentID: id, DeploymentID: dep, ServiceComponentName: "scn-" + id, UpdateID: "u0",
			Generation: gen, Policies: []events.Policy{vmMemory()}, UpdatedPolicies: []events.Policy{}, RemovedPolicies: []events.Policy{},
			Notify: events.NotifyTarget{Kind: events.NotifyNone}}
	}
	c.Produce(t, topology.DeployComponents, "ca", reg("ca", depA))
	c.Produce(t, topology.DeployComponents, "cb", reg("cb", depB))
	c.Produce(t, topology.ComponentPolicies, "ca", coll("ca", depA, 4))
	c.Produce(t, topology.ComponentPolicies, "cb", coll("cb", depB, 7))

	env := testEnv(c)
	e := &executor{cfg: DefaultConfig()}
	e.self = runtime.Stage{Name: topology.StageExecutor}
	_, closeFn, err := e.setup(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	held := func() (kept, other []string) {
		e.cols.mu.Lock()
		defer e.cols.mu.Unlock()
		for k := range e.cols.committed {
			kept = append(kept, k)
		}
		for k := range e.cols.elsewhere {
			other = append(other, k)
		}
		return kept, other
	}
	segs := func(ps ...int32) map[string][]int32 { return map[string][]int32{topology.PolicySegments: ps} }

	hold := func(p int32) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.hold(ctx, []int32{p})
	}
	if err := hold(pa); err != nil {
		t.Fatal(err)
	}
	if kept, other := held(); fmt.Sprint(kept) != "[ca]" || fmt.Sprint(other) != "[cb]" {
		t.Fatalf("holding partition %d of %s's: kept %v, elsewhere %v; want ca kept, cb elsewhere", pa, depA, kept, other)
	}
	e.revoked(ctx, env, segs(pa))
	if kept, _ := held(); len(kept) != 0 {
		t.Fatalf("after losing partition %d the executor still keeps %v", pa, kept)
	}
	if err := hold(pb); err != nil {
		t.Fatal(err)
	}
	if kept, other := held(); fmt.Sprint(kept) != "[cb]" || fmt.Sprint(other) != "[ca]" {
		t.Fatalf("holding partition %d of %s's: kept %v, elsewhere %v; want cb kept, ca elsewhere", pb, depB, kept, other)
	}

	// ca moves to depB: its collection, not kept here, is read when it is
	// next needed, and continues from its generation.
	c.Produce(t, topology.DeployComponents, "ca", reg("ca", depB))
	if err := e.comps.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	cur, err := e.current(ctx, "ca")
	e.mu.Unlock()
	if err != nil || cur == nil || cur.Generation != 4 || len(cur.Policies) != 1 {
		t.Fatalf("the collection of ca, moved to %s: %+v (%v); want generation 4 with its policy", depB, cur, err)
	}
	if kept, _ := held(); len(kept) != 2 {
		t.Fatalf("after reading ca's collection the executor keeps %v, want ca and cb", kept)
	}
}
