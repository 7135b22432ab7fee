package matching

import (
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

// ErrBadInput is wrapped by every error the matcher returns for an input it
// refuses: retrying cannot make such an input acceptable.
var ErrBadInput = errors.New("refused input")

func badInput(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadInput, fmt.Sprintf(format, args...))
}

// bodySeed keys the hashes of policy bodies. "has" state is rebuilt from
// Kafka in every process, so the hashes never leave it.
var bodySeed = maphash.MakeSeed()

func bodyHash(body string) uint64 { return maphash.String(bodySeed, body) }

// entry is the latest valid policy of one policy_id as the matcher sees it.
type entry struct {
	id      string
	name    string
	version string
	ver     int64
	verOK   bool
	raw     string // the policy_body JSON as carried in events
	hash    uint64 // bodyHash(raw)
	// header holds what filters look at (policyName, policyVersion and
	// matchingConditions), so configs need not stay decoded in memory.
	header policy.Body
}

func newEntry(policyID, body string) (*entry, error) {
	b, err := policy.DecodeBody([]byte(body))
	if err != nil {
		return nil, badInput("policy %s: %v", policyID, err)
	}
	name := b.PolicyName()
	if name == "" {
		return nil, badInput("policy %s: policy_body has no policyName", policyID)
	}
	id, err := policy.PolicyID(name)
	if err != nil {
		return nil, badInput("policy %s: %v", policyID, err)
	}
	if id != policyID {
		return nil, badInput("policy %s: policy_body's policyName %q is policy_id %q, not %q", policyID, name, id, policyID)
	}
	version := b.VersionString()
	ver, ok := policy.ParseVersion(version)
	header := policy.Body{policy.FieldPolicyName: name, policy.FieldPolicyVersion: version}
	if mc, present := b[policy.FieldMatchingConditions]; present {
		header[policy.FieldMatchingConditions] = mc
	}
	return &entry{id: id, name: name, version: version, ver: ver, verOK: ok, raw: body, hash: bodyHash(body), header: header}, nil
}

func (e *entry) policy() events.Policy {
	return events.Policy{PolicyID: e.id, PolicyName: e.name, PolicyVersion: e.version, Body: e.raw}
}

// removal remembers that a policy_id left the catalog, so that an older
// change still queued in a lagging partition does not bring it back.
type removal struct {
	ver   int64
	verOK bool
	at    time.Time
}

// Catalog is the matcher's view of policy.catalog: the latest valid policy
// per policy_id. It is built from the compacted topic in log order and then
// kept current by every PolicyChange (a change never moves a policy to an
// older version unless it says it replaces exactly the current one).
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

// Lookup returns the view's latest policy for a policy_id.
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
		c.remove(policyID, at)
		return nil
	}
	if e.PolicyID != "" && e.PolicyID != policyID {
		return badInput("catalog record keyed %q holds policy_id %q", policyID, e.PolicyID)
	}
	if e.Body == "" {
		return nil
	}
	ne, err := newEntry(policyID, e.Body)
	if err != nil {
		return err
	}
	c.entries[policyID] = ne
	delete(c.removed, policyID)
	return nil
}

func (c *Catalog) remove(id string, at time.Time) {
	r := removal{at: at}
	if cur, ok := c.entries[id]; ok {
		r.ver, r.verOK = cur.ver, cur.verOK
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
		if ch.Body == nil || *ch.Body == "" {
			return false, badInput("change %s of policy %s is UPDATED but carries no body", ch.ChangeID, id)
		}
		if cur := c.entries[id]; cur != nil && cur.raw == *ch.Body {
			// The body in force: another partition's copy of the change
			// (pdp-ingest sends one to each) already applied it, so it
			// need not be parsed again.
			return false, nil
		}
		ne, err := newEntry(id, *ch.Body)
		if err != nil {
			return false, fmt.Errorf("change %s: %w", ch.ChangeID, err)
		}
		cur := c.entries[id]
		switch {
		case cur == nil:
			if r, ok := c.removed[id]; ok && (!r.verOK || !ne.verOK || ne.ver <= r.ver) && !ch.ChangedAt.After(r.at) {
				return false, nil // removed after this change was decided
			}
		case cur.version == ne.version && cur.hash == ne.hash:
			return false, nil
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
		if ch.OldVersion != nil && cur.verOK {
			if old, ok := policy.ParseVersion(*ch.OldVersion); ok && old < cur.ver {
				return false, nil // a newer version arrived after this removal
			}
		}
		c.remove(id, ch.ChangedAt)
		return true, nil
	case events.ActionErrored:
		// The last valid body stays in force.
		return false, nil
	}
	return false, badInput("change %s of policy %s has unknown action %q", ch.ChangeID, id, ch.Action)
}
