package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// TestMembersChangeNothingButSpeed runs the executor on one backlog of
// segments, complete before the first member starts, with one member and
// with members joining and leaving while it works through it: every
// component is written the same collections in the same order — update,
// generation, policies with their versions, what changed and what was
// removed — as one member writes. The backlog has updates cut into
// pieces (so that a partition moves between the pieces of an update) and
// several successive updates of every component.
func TestMembersChangeNothingButSpeed(t *testing.T) {
	comps, segs := membersBacklog()
	run := func(t *testing.T, members, want int) (map[string][]string, int) {
		c := newCluster(t)
		var recs []*kgo.Record
		for _, comp := range comps {
			recs = append(recs, c.Record(t, topology.DeployComponents, comp.ComponentID, comp))
		}
		c.ProduceRecords(t, recs...)
		recs = recs[:0]
		for _, s := range segs {
			recs = append(recs, c.Record(t, topology.PolicySegments, s.DeploymentID, s))
		}
		c.ProduceRecords(t, recs...)
		out := c.Reader(t, topology.ComponentPolicies)
		env := func() runtime.Env {
			env := testEnv(c)
			env.PollRecords = 10
			return env
		}
		got, ms := c.Members(t, members, Stage, env, out, want)
		t.Logf("members=%d: %d collections of %d segments; %v", members, len(got), len(segs), ms)
		return collectionLines(t, got), len(got)
	}

	var ref map[string][]string
	var refCount int
	t.Run("1 member", func(t *testing.T) {
		ref, refCount = run(t, 1, 0)
		if refCount == 0 {
			t.Fatal("one member wrote no collection")
		}
	})
	if ref == nil {
		t.FailNow()
	}
	for _, members := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d members", members), func(t *testing.T) {
			got, n := run(t, members, refCount)
			if diff := stagetest.CompareLines(got, ref); diff != "" {
				t.Fatalf("%d members wrote %d collections, one member %d:\n%s", members, n, refCount, diff)
			}
		})
	}
}

// membersBodyBytes is the size of every policy body of the backlog, as
// pfbench's (--body-bytes): a collection holds a few KiB, so that reading
// component.policies back takes fetches as full as the runtime allows
// (runtime.DefaultFetchMaxBytes), as at scale.
const membersBodyBytes = 1024

// bigPol is pol with a body of membersBodyBytes that does not compress.
func bigPol(id, version string) events.Policy {
	p := pol(id, version)
	var pad strings.Builder
	for sum := sha256.Sum256([]byte(id + "@" + version)); pad.Len() < membersBodyBytes-len(p.Body); sum = sha256.Sum256(sum[:]) {
		pad.WriteString(hex.EncodeToString(sum[:]))
	}
	p.Body = p.Body[:len(p.Body)-2] + `,"pad":"` + pad.String() + `"}}`
	return hashed(p)
}

// membersBacklog is deploy.components and a backlog of policy.segments:
// 100 deployments of 3 components, 5 updates each — an install, an
// update in 3 pieces (removals, updated policies, policies added by a
// filter), a new version of a policy every component holds, an update in
// 2 pieces one of whose versions is older than the one held (it changes
// nothing for that component), and the uninstall of one component.
func membersBacklog() ([]*events.Component, []*events.PolicySegment) {
	pol := bigPol
	const (
		deployments = 100
		perDep      = 3
	)
	var comps []*events.Component
	var segs []*events.PolicySegment
	at := time.UnixMilli(1700000000000).UTC()
	for d := range deployments {
		dep := fmt.Sprintf("dep-%03d", d)
		id := func(c int) string { return fmt.Sprintf("%s-c%d", dep, c) }
		for c := range perDep {
			comp := component(id(c), "scn-"+id(c))
			comp.DeploymentID = dep
			comps = append(comps, comp)
		}
		piece := func(u string, index, count int32, deltas ...events.ComponentDelta) {
			segs = append(segs, &events.PolicySegment{UpdateID: dep + "-" + u, DeploymentID: dep, Index: index, Count: count,
				CatchUp: u == "u5", Components: deltas, CreatedAt: at})
		}
		a := pol(fmt.Sprintf("A_%03d", d), "1")
		var install, removals, updated, added, shared2, b2, b0 []events.ComponentDelta
		for c := range perDep {
			install = append(install, events.ComponentDelta{ComponentID: id(c), UpdatedPolicies: []events.Policy{a, pol("S", "1")}})
			removals = append(removals, events.ComponentDelta{ComponentID: id(c), RemovedPolicies: []events.RemovedPolicy{{PolicyID: a.PolicyID, PolicyVersion: ver("1")}}})
			b := fmt.Sprintf("B_%03d_%d", d, c)
			if c < 2 {
				updated = append(updated, events.ComponentDelta{ComponentID: id(c), UpdatedPolicies: []events.Policy{pol(b, "3")}})
			} else {
				added = append(added, events.ComponentDelta{ComponentID: id(c), AddedPolicies: []events.FilterMatch{{FilterID: "f", Policies: []events.Policy{pol(b, "3")}}}})
			}
			shared2 = append(shared2, events.ComponentDelta{ComponentID: id(c), UpdatedPolicies: []events.Policy{pol("S", "2")}})
			if c == 0 {
				b0 = append(b0, events.ComponentDelta{ComponentID: id(c), UpdatedPolicies: []events.Policy{pol(b, "2")}}) // older: fenced
			} else {
				b2 = append(b2, events.ComponentDelta{ComponentID: id(c), UpdatedPolicies: []events.Policy{pol(b, "4")}})
			}
		}
		piece("u1", 1, 1, install...)
		piece("u2", 1, 3, removals...)
		piece("u2", 2, 3, updated...)
		piece("u2", 3, 3, added...)
		piece("u3", 1, 1, shared2...)
		piece("u4", 1, 2, b0...)
		piece("u4", 2, 2, b2...)
		piece("u5", 1, 1, events.ComponentDelta{ComponentID: id(perDep - 1), Uninstall: true,
			RemovedPolicies: []events.RemovedPolicy{{PolicyID: "S"}, {PolicyID: fmt.Sprintf("B_%03d_%d", d, perDep-1)}}})
	}
	return comps, segs
}

// collectionLines are the collections written for each component, in the
// order written, each as one line: update, generation, deployment and
// service name, catch-up and uninstalled, and the policies it holds, those
// updated and those removed, by id and version (bodies by hash).
func collectionLines(t *testing.T, recs []*kgo.Record) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range recs {
		cp := decodeCP(t, r)
		if string(r.Key) != cp.ComponentID {
			t.Fatalf("collection of %s keyed %q", cp.ComponentID, r.Key)
		}
		ps := func(ps []events.Policy) string {
			l := make([]string, len(ps))
			for i, p := range ps {
				l[i] = fmt.Sprintf("%s@%s#%s", p.PolicyID, p.PolicyVersion, p.BodyHash[:min(8, len(p.BodyHash))])
			}
			return strings.Join(l, ",")
		}
		out[cp.ComponentID] = append(out[cp.ComponentID], fmt.Sprintf("%s %s gen=%d dep=%s scn=%s notify=%s catch_up=%t uninstalled=%t has[%s] updated[%s] removed[%s]",
			cp.ComponentID, cp.UpdateID, cp.Generation, cp.DeploymentID, cp.ServiceComponentName, cp.Notify.Kind, cp.CatchUp, cp.Uninstalled,
			ps(cp.Policies), ps(cp.UpdatedPolicies), ps(cp.RemovedPolicies)))
	}
	return out
}
