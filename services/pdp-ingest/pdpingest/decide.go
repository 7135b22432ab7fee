package pdpingest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

// Request is everything Decide needs about one policy_id.
type Request struct {
	Route Route
	// Current is the catalog entry of Route.PolicyID, nil when it has none.
	Current *events.PolicyCatalogEntry
	// PDPBodies is what the PDP answered for every version of the
	// policy_id, when Route.AskPDP, one raw body each (bodies of other
	// policy_ids are ignored).
	PDPBodies []json.RawMessage
	// Now stamps the catalog entry and the change; ChangeID names the
	// change.
	Now      time.Time
	ChangeID string
}

// Decision is what one notification changes for its policy_id.
type Decision struct {
	// Catalog is the new catalog entry; nil leaves the catalog as it is
	// unless Remove is set.
	Catalog *events.PolicyCatalogEntry
	// Remove tombstones the policy_id's catalog entry.
	Remove bool
	// Change is what downstream stages are told; nil when nothing changed.
	Change *events.PolicyChange
	// Notes say why something asked for was not applied, for the log.
	Notes []string
}

// Decide applies one notification to the catalog entry of its policy_id.
//
// When the PDP was asked, its answer is the truth: the greatest integer
// policyVersion it has is the latest ("10" > "9"; versions that are not all
// digits are skipped). A latest that policy.Check accepts replaces the
// entry, even with a lower version when the PDP no longer has the entry's
// (a removed version with another one left is an update). A latest Check
// refuses marks the entry ERRORED, keeping its last valid body; it is never
// replaced by an older version. No version left removes the entry.
//
// Pushed bodies are then applied in order, each only when its version is
// greater than the entry's: a policy never goes back to an older version
// by a push, and the same version with the same body changes nothing. The
// same version with a different body is refused (permanent): it would
// silently fork one version.
//
// Pushed bodies belong to the notification's tenant ("": global), what
// the PDP answers is global. A tenant's policy is changed only by pushes
// of that tenant, and removed only by the admission stage's removal for
// that tenant (Route.Withdraw, see withdraw): any other notification for
// it is refused (permanent), so no one takes over or removes another
// tenant's policy; a removal that asks the PDP is global. A global entry may become
// a tenant's: the only tenant writer is the admission stage, writing the
// settings policy admission.<component_id> of a component it admitted,
// and a global body published under that id must not block it.
//
// The decision carries the catalog write and one change (UPDATED, REMOVED
// or ERRORED) when the entry changed, nothing otherwise; replaying a
// notification changes nothing.
func Decide(req Request) (Decision, error) {
	id := req.Route.PolicyID
	if req.Route.Withdraw {
		return withdraw(req)
	}
	// writer is the tenant the notification writes for: what the PDP
	// answers is global.
	writer := req.Route.Tenant
	if req.Route.AskPDP {
		writer = ""
	}
	if cur := req.Current; cur != nil && !policy.MayHold(writer, cur.Tenant) {
		by := "a global notification"
		if writer != "" {
			by = fmt.Sprintf("a notification of tenant %q", writer)
		}
		return Decision{}, fmt.Errorf("policy %s belongs to tenant %q; %s may not change it", id, cur.Tenant, by)
	}
	var d Decision
	after := req.Current
	// head is the header of after's body whenever after holds a body
	// checked here; only such an entry can make an UPDATED change.
	var head policy.Header
	erroredOnly := "" // the latest is invalid and there is no valid body to keep
	if req.Route.AskPDP {
		sel := policy.SelectLatestRaw(req.PDPBodies)
		if latest, ok := sel.Checked[id]; ok {
			after, head = entry(latest, "", events.SourcePDP, req.Now)
		} else if bad, ok := sel.Errored[id]; ok {
			reason := fmt.Sprintf("latest version %s of %s from the PDP is invalid: %v", bad.VersionString(), id, sel.Reasons[id])
			if after != nil {
				e := *after
				e.Status, e.Error, e.UpdatedAt = events.StatusErrored, &reason, req.Now
				after = &e
			} else {
				erroredOnly = reason
			}
		} else {
			after = nil
			d.Notes = append(d.Notes, fmt.Sprintf("the PDP has no version of %s", id))
		}
	}
	for _, p := range req.Route.Pushed {
		if p.PolicyID != id {
			continue
		}
		if after != nil {
			cur, ok := policy.ParseVersion(after.PolicyVersion)
			if ok && p.Version < cur {
				d.Notes = append(d.Notes, fmt.Sprintf("pushed version %d of %s is older than version %s in the catalog: ignored", p.Version, id, after.PolicyVersion))
				continue
			}
			if ok && p.Version == cur {
				if after.Body != string(p.JSON) {
					return Decision{}, fmt.Errorf("pushed version %d of %s differs from the body the catalog holds for that version: push it with a greater policyVersion", p.Version, id)
				}
				d.Notes = append(d.Notes, fmt.Sprintf("pushed version %d of %s is already in the catalog", p.Version, id))
				continue
			}
		}
		after, head = entry(p, req.Route.Tenant, events.SourcePushed, req.Now)
		erroredOnly = ""
	}
	return diff(d, id, req.Current, after, head, erroredOnly, req.Now, req.ChangeID), nil
}

// withdraw is the admission stage's removal of a settings policy it
// pushed for a tenant (Route.Withdraw): the entry is removed when that
// tenant holds it, and its version is not newer than the removal's. A
// global entry, or another tenant's, is refused (permanent): a tenant
// removes only its own policies.
func withdraw(req Request) (Decision, error) {
	id, tenant, cur := req.Route.PolicyID, req.Route.Tenant, req.Current
	var d Decision
	switch {
	case cur == nil:
		d.Notes = append(d.Notes, fmt.Sprintf("the removal of %s by tenant %q: the catalog holds no such policy", id, tenant))
		return d, nil
	case cur.Tenant == "":
		return Decision{}, fmt.Errorf("policy %s is global; a removal of tenant %q may not remove it", id, tenant)
	case cur.Tenant != tenant:
		return Decision{}, fmt.Errorf("policy %s belongs to tenant %q; a removal of tenant %q may not remove it", id, cur.Tenant, tenant)
	}
	if v, ok := policy.ParseVersion(cur.PolicyVersion); ok && v > req.Route.WithdrawVersion {
		d.Notes = append(d.Notes, fmt.Sprintf("the removal of %s up to version %d: the catalog holds the newer version %s; kept", id, req.Route.WithdrawVersion, cur.PolicyVersion))
		return d, nil
	}
	return diff(d, id, cur, nil, policy.Header{}, "", req.Now, req.ChangeID), nil
}

// diff turns the entry before and after into outputs; head is the header
// of after's body when it was checked here.
func diff(d Decision, id string, before, after *events.PolicyCatalogEntry, head policy.Header, erroredOnly string, now time.Time, changeID string) Decision {
	change := &events.PolicyChange{ChangeID: changeID, PolicyID: id, ChangedAt: now}
	var prev int64
	if before != nil {
		change.OldVersion = strPtr(before.PolicyVersion)
		prev = before.Revision
	}
	// Every change moves the policy_id to a new revision; an ERRORED
	// latest keeps the valid body in force, and its revision.
	next := events.NextRevision(prev, now)
	switch {
	case after == nil && before == nil:
		if erroredOnly == "" {
			return d
		}
		change.Action, change.Error, change.Revision = events.ActionErrored, &erroredOnly, next
	case after == nil:
		d.Remove = true
		change.Action, change.Revision = events.ActionRemoved, next
	default:
		if before != nil && sameEntry(before, after) {
			if after.Source != "" && after.Source != before.Source {
				// Only where the body came from is new (the PDP
				// confirms a pushed body): the catalog records it,
				// and nothing downstream changes.
				e := *before
				e.Source = after.Source
				d.Catalog = &e
			}
			return d
		}
		if after.Status == events.StatusErrored {
			change.Action, change.Error, change.Revision = events.ActionErrored, after.Error, after.Revision
		} else {
			e := *after
			e.Revision = next
			after = &e
			change.Action, change.Revision = events.ActionUpdated, next
			change.NewVersion = strPtr(after.PolicyVersion)
			// The header, not the body: the catalog entry written in
			// the same transaction holds it.
			change.PolicyName, change.MatchingConditions, change.BodyHash = head.PolicyName, head.MatchingConditions, head.BodyHash
			change.Tenant = after.Tenant
		}
		d.Catalog = after
	}
	d.Change = change
	return d
}

func strPtr(s string) *string { return &s }

// entry is a VALID catalog entry for a checked body owned by tenant ("":
// global) from source, and the body's header.
func entry(c policy.Checked, tenant, source string, now time.Time) (*events.PolicyCatalogEntry, policy.Header) {
	h := c.Header()
	return &events.PolicyCatalogEntry{
		PolicyID:      c.PolicyID,
		PolicyName:    c.PolicyName,
		PolicyVersion: c.PolicyVersion,
		Body:          string(c.JSON),
		BodyHash:      h.BodyHash,
		Status:        events.StatusValid,
		UpdatedAt:     now,
		Tenant:        tenant,
		Source:        source,
	}, h
}

// sameEntry compares what a catalog entry says, not when it was written.
// Bodies compare as bytes: every body in the catalog is the canonical JSON
// policy.Check gave.
func sameEntry(a, b *events.PolicyCatalogEntry) bool {
	return a.PolicyID == b.PolicyID && a.PolicyName == b.PolicyName && a.PolicyVersion == b.PolicyVersion &&
		a.Status == b.Status && deref(a.Error) == deref(b.Error) && a.Body == b.Body && a.Tenant == b.Tenant
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// versionOf is an entry's version for logs.
func versionOf(e *events.PolicyCatalogEntry) string {
	if e == nil {
		return "none"
	}
	if _, ok := policy.ParseVersion(e.PolicyVersion); !ok {
		return strconv.Quote(e.PolicyVersion)
	}
	return e.PolicyVersion
}
