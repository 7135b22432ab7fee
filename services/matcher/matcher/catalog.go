package matcher

import (
	"errors"
	"fmt"
	"time"
	"unique"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

// ErrBadInput is wrapped by every error the matcher returns for an input it
// refuses: retrying cannot make such an input acceptable.
var ErrBadInput = errors.New("refused input")

func badInput(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadInput, fmt.Sprintf(format, args...))
}

// entry is the latest valid policy of one policy_id as the matcher sees it:
// its header, never its body.
type entry struct {
	id      string
	name    string
	version string
	ver     int64
	verOK   bool
	// hash is the body's policy.BodyHash, interned: every holding of this
	// version shares it.
	hash unique.Handle[string]
	// header holds what filters look at (policyName, policyVersion and
	// matchingConditions).
	header policy.Body
	// rev is the catalog revision of this version (0: a record from
	// before revisions).
	rev int64
	// owner is the tenant the policy belongs to, "" when global.
	owner string
}

// mayGo reports whether comp may hold the entry (policy.MayHold): a
// filter or a policy_id never brings another tenant's policy.
func (e *entry) mayGo(comp *component) bool { return policy.MayHold(comp.tenant, e.owner) }

// newEntry is the entry of a policy_id from its header, catalog revision
// and owner.
func newEntry(policyID string, h policy.Header, rev int64, owner string) (*entry, error) {
	if h.PolicyName == "" {
		return nil, badInput("policy %s: no policyName", policyID)
	}
	id, err := policy.PolicyID(h.PolicyName)
	if err != nil {
		return nil, badInput("policy %s: %v", policyID, err)
	}
	if id != policyID {
		return nil, badInput("policy %s: policyName %q is policy_id %q, not %q", policyID, h.PolicyName, id, policyID)
	}
	if h.BodyHash == "" {
		return nil, badInput("policy %s: no body_hash", policyID)
	}
	header, err := h.Matchable()
	if err != nil {
		return nil, badInput("policy %s: %v", policyID, err)
	}
	ver, ok := policy.ParseVersion(h.PolicyVersion)
	return &entry{id: id, name: h.PolicyName, version: h.PolicyVersion, ver: ver, verOK: ok, hash: unique.Make(h.BodyHash), header: header, rev: rev, owner: owner}, nil
}

// policy is the entry as the matcher's deltas name it: by reference, the
// body left for the segmenter to fill in.
func (e *entry) policy() events.Policy {
	return events.Policy{PolicyID: e.id, PolicyName: e.name, PolicyVersion: e.version, BodyHash: e.hash.Value(), Revision: e.rev}
}

// held is what a component holding this entry has.
func (e *entry) held() held { return held{version: e.version, hash: e.hash, rev: e.rev} }

// removal remembers that a policy_id left the catalog, so that an older
// change still queued in a lagging partition does not bring it back.
type removal struct {
	ver   int64
	verOK bool
	rev   int64 // the removal's catalog revision, or the last entry's
	at    time.Time
}

// Catalog is the matcher's view of policy.catalog: the header and body
// hash of the latest valid policy per policy_id, no body. It is built from
// the compacted topic in log order and then kept current by every
// PolicyChange (a change never moves a policy to an older version unless
// it says it replaces exactly the current one).
type Catalog struct {
	entries map[string]*entry
	removed map[string]removal
}

// NewCatalog returns an empty catalog view.
func NewCatalog() *Catalog {
	return &Catalog{entries: map[string]*entry{}, removed: map[string]removal{}}
}

// Len is the number of policies in the view.
func (c *Catalog) Len() int { return len(c.entries) }

// Lookup returns the view's latest policy for a policy_id, by reference
// (no body).
func (c *Catalog) Lookup(policyID string) (events.Policy, bool) {
	e, ok := c.entries[policyID]
	if !ok {
		return events.Policy{}, false
	}
	return e.policy(), true
}

// Apply applies one policy.catalog record, in log order: e nil is the
// tombstone of policyID (at is the record's timestamp). An ERRORED entry
// carries the last valid body, which is kept; one without a body changes
// nothing, so an errored latest version never replaces a valid one.
func (c *Catalog) Apply(policyID string, e *events.PolicyCatalogEntry, at time.Time) error {
	if policyID == "" {
		return badInput("catalog record has no policy_id key")
	}
	if e == nil {
		c.remove(policyID, at, 0)
		return nil
	}
	if e.PolicyID != "" && e.PolicyID != policyID {
		return badInput("catalog record keyed %q holds policy_id %q", policyID, e.PolicyID)
	}
	if e.Body == "" {
		return nil
	}
	// The catalog holds the body, not the header the changes carry:
	// derive the same header from it.
	h, err := policy.HeaderOf(e.Body)
	if err != nil {
		return badInput("policy %s: %v", policyID, err)
	}
	ne, err := newEntry(policyID, h, e.Revision, e.Tenant)
	if err != nil {
		return err
	}
	c.entries[policyID] = ne
	delete(c.removed, policyID)
	return nil
}

func (c *Catalog) remove(id string, at time.Time, rev int64) {
	r := removal{at: at, rev: rev}
	if cur, ok := c.entries[id]; ok {
		r.ver, r.verOK = cur.ver, cur.verOK
		if r.rev == 0 {
			r.rev = cur.rev
		}
	}
	c.removed[id] = r
	delete(c.entries, id)
}

// change applies a PolicyChange to the view. It reports whether the view
// changed. A change older than the view (a lagging partition's copy after
// the view was refreshed from policy.catalog) is ignored.
func (c *Catalog) change(ch *events.PolicyChange) (bool, error) {
	id := ch.PolicyID
	switch ch.Action {
	case events.ActionUpdated:
		h, err := changeHeader(ch)
		if err != nil {
			return false, err
		}
		if cur := c.entries[id]; cur != nil && cur.version == h.PolicyVersion && cur.hash.Value() == h.BodyHash && (ch.Revision == 0 || ch.Revision <= cur.rev) {
			// The version in force: another partition's copy of the
			// change (pdp-ingest sends one to each) already applied it.
			return false, nil
		}
		ne, err := newEntry(id, h, ch.Revision, ch.Tenant)
		if err != nil {
			return false, fmt.Errorf("change %s: %w", ch.ChangeID, err)
		}
		cur := c.entries[id]
		r, wasRemoved := c.removed[id]
		switch {
		// Fencing by the catalog's revision when both sides carry one:
		// an older change (a lagging partition's copy, a replay) never
		// wins, a newer one always does, whatever its version number.
		case cur != nil && cur.rev != 0 && ne.rev != 0:
			if ne.rev <= cur.rev {
				return false, nil
			}
		case cur == nil && wasRemoved && r.rev != 0 && ne.rev != 0:
			if ne.rev <= r.rev {
				return false, nil // removed after this change was decided
			}
		case cur == nil:
			if wasRemoved && (!r.verOK || !ne.verOK || ne.ver <= r.ver) && !ch.ChangedAt.After(r.at) {
				return false, nil // removed after this change was decided
			}
		case cur.verOK && ne.verOK && ne.ver < cur.ver:
			// Only a change that names the current version as the one it
			// replaces may go back (the latest version was withdrawn).
			if ch.OldVersion == nil || *ch.OldVersion != cur.version {
				return false, nil
			}
		}
		c.entries[id] = ne
		delete(c.removed, id)
		return true, nil
	case events.ActionRemoved:
		cur := c.entries[id]
		if cur == nil {
			return false, nil
		}
		switch {
		case ch.Revision != 0 && cur.rev != 0:
			if ch.Revision < cur.rev {
				return false, nil // a newer version arrived after this removal
			}
		case ch.OldVersion != nil && cur.verOK:
			if old, ok := policy.ParseVersion(*ch.OldVersion); ok && old < cur.ver {
				return false, nil // a newer version arrived after this removal
			}
		}
		c.remove(id, ch.ChangedAt, ch.Revision)
		return true, nil
	case events.ActionErrored:
		// The last valid body stays in force.
		return false, nil
	}
	return false, badInput("change %s of policy %s has unknown action %q", ch.ChangeID, id, ch.Action)
}

// changeHeader is the header of the new version an UPDATED change carries.
func changeHeader(ch *events.PolicyChange) (policy.Header, error) {
	if ch.BodyHash == "" {
		return policy.Header{}, badInput("change %s of policy %s is UPDATED but carries no body_hash", ch.ChangeID, ch.PolicyID)
	}
	if ch.NewVersion == nil {
		return policy.Header{}, badInput("change %s of policy %s is UPDATED but names no new version", ch.ChangeID, ch.PolicyID)
	}
	return policy.Header{PolicyID: ch.PolicyID, PolicyName: ch.PolicyName, PolicyVersion: *ch.NewVersion,
		MatchingConditions: ch.MatchingConditions, BodyHash: ch.BodyHash}, nil
}
