package pdpingest

import (
	"encoding/json"
	"sort"
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
	// invalid); Catalog the version the catalog holds ("" for none).
	PDP, Catalog string
	// Reason says what differs, for the log and the summary.
	Reason string
}

// Reconcile compares the PDP's answer to a full /getConfig query with the
// catalog (every entry by policy_id) and returns, per policy_id that
// differs, a notification naming the PDP's latest version as loaded. Each
// is handled like any PDP notification: pdp-ingest asks the PDP for every
// version of that policy_id and decides, so a catch-up repairs a missed
// notification with the same rules, and a policy_id that already agrees is
// left out (a catch-up sends only what differs).
//
// A catalog entry of a policy_id the PDP does not have at all is left as it
// is: policies pushed through the North API never were in the PDP, and a
// PDP that answered a narrower filter than the catalog's contents must not
// withdraw them. A withdrawal the PDP announced but pdp-ingest missed is
// repaired by naming the policy in a notification (policyctl or the PDP
// simulator), not by a catch-up.
func Reconcile(bodies []json.RawMessage, catalog map[string]*events.PolicyCatalogEntry, id string, now time.Time) ([]Keyed, []Difference) {
	sel := policy.SelectLatestRaw(bodies)
	type pdpLatest struct {
		name, version, hash string
		errored             bool
	}
	latest := make(map[string]pdpLatest, len(sel.Checked)+len(sel.Errored))
	for pid, c := range sel.Checked {
		latest[pid] = pdpLatest{name: c.PolicyName, version: c.PolicyVersion, hash: policy.BodyHash(string(c.JSON))}
	}
	for pid, b := range sel.Errored {
		latest[pid] = pdpLatest{name: b.PolicyName(), version: b.VersionString(), errored: true}
	}
	ids := make([]string, 0, len(latest))
	for pid := range latest {
		ids = append(ids, pid)
	}
	sort.Strings(ids)
	var (
		outs  []Keyed
		diffs []Difference
	)
	for _, pid := range ids {
		l := latest[pid]
		cur := catalog[pid]
		d := Difference{PolicyID: pid, PDP: l.version}
		if l.errored {
			d.PDP = ""
		}
		switch {
		case cur == nil:
			d.Reason = "not in the catalog"
		case l.errored && cur.Status == events.StatusErrored:
			continue
		case l.errored:
			d.Catalog, d.Reason = cur.PolicyVersion, "the PDP's latest version "+l.version+" is invalid"
		case cur.Status == events.StatusErrored:
			d.Catalog, d.Reason = cur.PolicyVersion, "the catalog marks it errored; the PDP has valid version "+l.version
		case cur.PolicyVersion != l.version:
			d.Catalog, d.Reason = cur.PolicyVersion, "the catalog holds version "+cur.PolicyVersion+", the PDP "+l.version
		case cur.BodyHash != "" && cur.BodyHash != l.hash:
			d.Catalog, d.Reason = cur.PolicyVersion, "the body of version "+l.version+" differs from the PDP's"
		default:
			continue
		}
		diffs = append(diffs, d)
		outs = append(outs, Keyed{PolicyID: pid, Notification: &events.PdpNotification{
			NotificationID:  id + ":" + pid,
			Source:          SourceCatchup,
			ReceivedAt:      now,
			LoadedPolicies:  []events.LoadedPolicy{{PolicyName: l.name, VersionNo: l.version, Matches: map[string]string{}}},
			RemovedPolicies: []events.UnloadedPolicy{},
			PushedBodies:    []string{},
		}})
	}
	return outs, diffs
}
