package pdpingest

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

// SourceCatchup is the source of the notifications a catch-up makes when
// the PDP's full state and the catalog disagree.
const SourceCatchup = "catch-up"

// Difference is one policy_id on which the PDP's full answer and the
// catalog disagree.
type Difference struct {
	PolicyID string
	// PDP is the latest version the PDP has ("" when its latest is
	// invalid or it has none); Catalog the version the catalog holds (""
	// for none).
	PDP, Catalog string
	// Reason says what differs, for the log and the summary.
	Reason string
	// Remove says the PDP's listing no longer has the policy: it is sent
	// to be removed (or withheld, see Reconciliation.Withheld).
	Remove bool
}

// CatchupInput is what one catch-up compares.
type CatchupInput struct {
	// Bodies is the PDP's answer to the full /getConfig query of
	// Filter, one raw body each.
	Bodies []json.RawMessage
	// Catalog is every catalog entry by policy_id.
	Catalog map[string]*events.PolicyCatalogEntry
	// Filter is the policyName of that query: a catalog policy whose
	// policyName it does not match is outside the listing and never
	// missing from it.
	Filter *policy.CompiledFilter
	// MaxRemovalShare is the greatest share (0 to 1) of the catalog's
	// removable policies (see Removable) that one catch-up removes;
	// beyond it, it removes none.
	MaxRemovalShare float64
	// ID names the catch-up's notifications; Now stamps them.
	ID  string
	Now time.Time
}

// Reconciliation is what a catch-up found and sends.
type Reconciliation struct {
	// Notifications go to pdp.notifications, one per difference sent.
	Notifications []Keyed
	// Differences are every policy_id that differs, the withheld removals
	// included.
	Differences []Difference
	// Listed is how many policy_ids the PDP listed.
	Listed int
	// Removed is how many of Notifications are removals.
	Removed int
	// Withheld, when not empty, says why the removals in Differences
	// were not sent.
	Withheld string
}

// updated is how many of Notifications read a policy again from the PDP
// (the rest are removals).
func (r Reconciliation) updated() int { return len(r.Notifications) - r.Removed }

// withheldRemovals is how many of Differences are removals not sent.
func (r Reconciliation) withheldRemovals() int { return len(r.Differences) - len(r.Notifications) }

// Removable reports whether a catch-up may remove a catalog entry the
// PDP's full listing (filter) lacks: only a policy whose body came from
// the PDP and whose name the listing covers. Pushed policies (North API,
// policyctl), the admission stage's own, and any entry that does not
// record the PDP as its source are never removed by a catch-up.
func Removable(e *events.PolicyCatalogEntry, filter *policy.CompiledFilter) bool {
	return e.Source == events.SourcePDP && !strings.HasPrefix(e.PolicyID, policy.AdmissionPrefix) && filter.MatchesName(e.PolicyName)
}

// Reconcile compares the PDP's answer to a full /getConfig query with the
// catalog and returns, per policy_id that differs, a notification: the
// PDP's latest version named as loaded, or, for a policy the PDP no longer
// lists, the catalog's version named as removed. Each is handled like any
// PDP notification: pdp-ingest asks the PDP for every version of that
// policy_id and decides, so a catch-up repairs a missed notification with
// the same rules (a removal the PDP did not make becomes nothing, or an
// update), and a policy_id that already agrees is left out (a catch-up
// sends only what differs).
//
// Only Removable entries are removed. And none at all when the PDP listed
// nothing, or when more than MaxRemovalShare of the removable entries
// would go at once: a PDP that lost its store or answered wrongly must
// not empty every component. Reconciliation.Withheld then says so, and the
// updates are sent anyway.
func Reconcile(in CatchupInput) Reconciliation {
	latest := pdpLatestVersions(in.Bodies)
	ids := make([]string, 0, len(latest))
	for pid := range latest {
		ids = append(ids, pid)
	}
	sort.Strings(ids)
	out := Reconciliation{Listed: len(latest)}
	for _, pid := range ids {
		l := latest[pid]
		d, differs := difference(pid, l, in.Catalog[pid])
		if !differs {
			continue
		}
		out.Differences = append(out.Differences, d)
		out.notify(in, pid, []events.LoadedPolicy{{PolicyName: l.name, VersionNo: l.version, Matches: map[string]string{}}}, []events.UnloadedPolicy{})
	}
	out.removals(in, latest)
	return out
}

// pdpLatest is the PDP's latest version of one policy_id.
type pdpLatest struct {
	name, version, hash string
	errored             bool
}

// pdpLatestVersions is the PDP's latest version of each policy_id its
// answer lists, valid or not.
func pdpLatestVersions(bodies []json.RawMessage) map[string]pdpLatest {
	sel := policy.SelectLatestRaw(bodies)
	latest := make(map[string]pdpLatest, len(sel.Checked)+len(sel.Errored))
	for pid, c := range sel.Checked {
		latest[pid] = pdpLatest{name: c.PolicyName, version: c.PolicyVersion, hash: policy.BodyHash(string(c.JSON))}
	}
	for pid, b := range sel.Errored {
		latest[pid] = pdpLatest{name: b.PolicyName(), version: b.VersionString(), errored: true}
	}
	return latest
}

// difference compares the PDP's latest version of a policy_id with the
// catalog's entry (cur, nil when none); differs is false when they agree.
func difference(pid string, l pdpLatest, cur *events.PolicyCatalogEntry) (d Difference, differs bool) {
	d = Difference{PolicyID: pid, PDP: l.version}
	if l.errored {
		d.PDP = ""
	}
	switch {
	case cur == nil:
		d.Reason = "not in the catalog"
	case l.errored && cur.Status == events.StatusErrored:
		return d, false
	case l.errored:
		d.Catalog, d.Reason = cur.PolicyVersion, "the PDP's latest version "+l.version+" is invalid"
	case cur.Status == events.StatusErrored:
		d.Catalog, d.Reason = cur.PolicyVersion, "the catalog marks it errored; the PDP has valid version "+l.version
	case cur.PolicyVersion != l.version:
		d.Catalog, d.Reason = cur.PolicyVersion, "the catalog holds version "+cur.PolicyVersion+", the PDP "+l.version
	case cur.BodyHash != l.hash:
		d.Catalog, d.Reason = cur.PolicyVersion, "the body of version "+l.version+" differs from the PDP's"
	default:
		return d, false
	}
	return d, true
}

// removals adds the removable catalog entries the PDP no longer lists,
// notified as removed unless too many would go at once (Withheld says
// why).
func (out *Reconciliation) removals(in CatchupInput, latest map[string]pdpLatest) {
	var gone []*events.PolicyCatalogEntry
	removable := 0
	for _, e := range in.Catalog {
		if !Removable(e, in.Filter) {
			continue
		}
		removable++
		if _, listed := latest[e.PolicyID]; !listed {
			gone = append(gone, e)
		}
	}
	if len(gone) == 0 {
		return
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].PolicyID < gone[j].PolicyID })
	share := float64(len(gone)) / float64(removable)
	switch {
	case len(latest) == 0:
		out.Withheld = fmt.Sprintf("the PDP listed no policy for %s while the catalog holds %d from it: an empty answer removes nothing",
			in.Filter.Filter().PolicyName, removable)
	case share > in.MaxRemovalShare:
		out.Withheld = fmt.Sprintf("the PDP's listing lacks %d of the %d catalog policies that came from it (%.0f%%), more than the %.0f%% one catch-up may remove (--catchup-max-removal-share %g): nothing is removed",
			len(gone), removable, 100*share, 100*in.MaxRemovalShare, in.MaxRemovalShare)
	}
	for _, e := range gone {
		d := Difference{PolicyID: e.PolicyID, Catalog: e.PolicyVersion, Remove: true, Reason: "the PDP no longer lists it"}
		if out.Withheld != "" {
			d.Reason += "; removal withheld"
		}
		out.Differences = append(out.Differences, d)
		if out.Withheld == "" {
			out.notify(in, e.PolicyID, []events.LoadedPolicy{}, []events.UnloadedPolicy{{PolicyName: e.PolicyName, VersionNo: e.PolicyVersion}})
			out.Removed++
		}
	}
}

// notify adds the catch-up's notification for one policy_id.
func (out *Reconciliation) notify(in CatchupInput, pid string, loaded []events.LoadedPolicy, removed []events.UnloadedPolicy) {
	out.Notifications = append(out.Notifications, Keyed{PolicyID: pid, Notification: &events.PdpNotification{
		NotificationID:  in.ID + ":" + pid,
		Source:          SourceCatchup,
		ReceivedAt:      in.Now,
		LoadedPolicies:  loaded,
		RemovedPolicies: removed,
		PushedBodies:    []string{},
	}})
}
