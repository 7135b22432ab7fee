package ingest

import (
	"bytes"
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
	// policy_id, when Route.AskPDP (bodies of other policy_ids are
	// ignored).
	PDPBodies []policy.Body
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
// digits are skipped). A valid latest replaces the entry, even with a lower
// version when the PDP no longer has the entry's (a removed version with
// another one left is an update). An invalid latest marks the entry
// ERRORED, keeping its last valid body; it is never replaced by an older
// version. No version left removes the entry.
//
// Pushed bodies are then applied in order, each only when its version is
// greater than the entry's: a policy never goes back to an older version
// by a push, and the same version with the same body changes nothing. The
// same version with a different body is refused (permanent): it would
// silently fork one version.
//
// The decision carries the catalog write and one change (UPDATED, REMOVED
// or ERRORED) when the entry changed, nothing otherwise; replaying a
// notification changes nothing.
func Decide(req Request) (Decision, error) {
	id := req.Route.PolicyID
	var d Decision
	after := req.Current
	erroredOnly := "" // the latest is invalid and there is no valid body to keep
	if req.Route.AskPDP {
		sel := policy.SelectLatest(req.PDPBodies)
		if latest, ok := sel.Latest[id]; ok {
			e, err := entry(id, latest, req.Now)
			if err != nil {
				return Decision{}, err
			}
			after = e
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
				same, err := sameBody(after.Body, p.Body)
				if err != nil {
					return Decision{}, err
				}
				if !same {
					return Decision{}, fmt.Errorf("pushed version %d of %s differs from the body the catalog holds for that version: push it with a greater policyVersion", p.Version, id)
				}
				d.Notes = append(d.Notes, fmt.Sprintf("pushed version %d of %s is already in the catalog", p.Version, id))
				continue
			}
		}
		e, err := entry(id, p.Body, req.Now)
		if err != nil {
			return Decision{}, err
		}
		after, erroredOnly = e, ""
	}
	return diff(d, id, req.Current, after, erroredOnly, req.Now, req.ChangeID)
}

// diff turns the entry before and after into outputs.
func diff(d Decision, id string, before, after *events.PolicyCatalogEntry, erroredOnly string, now time.Time, changeID string) (Decision, error) {
	change := &events.PolicyChange{ChangeID: changeID, PolicyID: id, ChangedAt: now}
	if before != nil {
		change.OldVersion = strPtr(before.PolicyVersion)
	}
	switch {
	case after == nil && before == nil:
		if erroredOnly == "" {
			return d, nil
		}
		change.Action, change.Error = events.ActionErrored, &erroredOnly
	case after == nil:
		d.Remove = true
		change.Action = events.ActionRemoved
	default:
		if before != nil {
			same, err := sameEntry(before, after)
			if err != nil {
				return Decision{}, err
			}
			if same {
				return d, nil
			}
		}
		d.Catalog = after
		if after.Status == events.StatusErrored {
			change.Action, change.Error = events.ActionErrored, after.Error
		} else {
			change.Action = events.ActionUpdated
			change.NewVersion = strPtr(after.PolicyVersion)
			change.Body = strPtr(after.Body)
		}
	}
	d.Change = change
	return d, nil
}

func strPtr(s string) *string { return &s }

// entry is a VALID catalog entry for body.
func entry(id string, b policy.Body, now time.Time) (*events.PolicyCatalogEntry, error) {
	js, err := EncodeBody(b)
	if err != nil {
		return nil, fmt.Errorf("encode policy_body of %s: %w", id, err)
	}
	return &events.PolicyCatalogEntry{
		PolicyID:      id,
		PolicyName:    b.PolicyName(),
		PolicyVersion: b.VersionString(),
		Body:          js,
		Status:        events.StatusValid,
		UpdatedAt:     now,
	}, nil
}

// EncodeBody writes a policy_body as the compact JSON object the catalog
// carries: keys sorted, numbers as received, no HTML escaping.
func EncodeBody(b policy.Body) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(b); err != nil {
		return "", err
	}
	return string(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

// canonical re-encodes a stored body so bodies written by other writers
// compare by content.
func canonical(js string) (string, error) {
	b, err := policy.DecodeBody([]byte(js))
	if err != nil {
		return "", err
	}
	return EncodeBody(policy.Normalize(b))
}

func sameBody(stored string, b policy.Body) (bool, error) {
	c, cerr := canonical(stored)
	if cerr != nil {
		// A stored body that does not decode differs from any valid one.
		return false, nil
	}
	n, err := EncodeBody(b)
	if err != nil {
		return false, fmt.Errorf("encode pushed policy_body %q: %w", b.PolicyName(), err)
	}
	return c == n, nil
}

// sameEntry compares what a catalog entry says, not when it was written.
func sameEntry(a, b *events.PolicyCatalogEntry) (bool, error) {
	if a.PolicyID != b.PolicyID || a.PolicyName != b.PolicyName || a.PolicyVersion != b.PolicyVersion ||
		a.Status != b.Status || deref(a.Error) != deref(b.Error) {
		return false, nil
	}
	ca, errA := canonical(a.Body)
	cb, errB := canonical(b.Body)
	if errA != nil || errB != nil {
		return a.Body == b.Body, nil
	}
	return ca == cb, nil
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
