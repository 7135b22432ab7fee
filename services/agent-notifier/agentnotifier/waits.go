package agentnotifier

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// waits are the components whose records wait for the lease of another
// notifier's unfinished notification (ClaimAction's Wait), so that the
// stage is not ready while they do and says which: they make no progress,
// whatever the stage holds.
type waits struct {
	mu sync.Mutex
	m  map[string]wait // by claim key
}

// wait is one component waiting.
type wait struct {
	component, owner string
	// partition is the record's partition of component.applied, -1 for
	// a notification run again outside the records.
	partition int32
	// until is when the lease it waits for ends.
	until time.Time
}

// note records whether j waits, and until when.
func (w *waits) note(j *job, waiting bool, owner string, until time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !waiting {
		delete(w.m, j.key)
		return
	}
	if w.m == nil {
		w.m = map[string]wait{}
	}
	w.m[j.key] = wait{component: j.a.ComponentID, owner: owner, partition: j.partition, until: until}
}

// forget drops the components of partitions this member no longer holds.
func (w *waits) forget(partitions []int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, x := range w.m {
		if slices.Contains(partitions, x.partition) {
			delete(w.m, k)
		}
	}
}

// maxNamed is how many waiting components a reason names.
const maxNamed = 5

// reason says which components wait, "" when none does. A wait whose
// lease ended more than stale ago is dropped: what waited is looked at
// again right after the lease ends, so it was handled meanwhile, or went
// to another member.
func (w *waits) reason(now time.Time, stale time.Duration) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	var first wait
	for k, x := range w.m {
		if now.Sub(x.until) > stale {
			delete(w.m, k)
			continue
		}
		if len(ids) == 0 || x.until.Before(first.until) {
			first = x
		}
		ids = append(ids, x.component)
	}
	if len(ids) == 0 {
		return ""
	}
	slices.Sort(ids)
	named := strings.Join(ids[:min(len(ids), maxNamed)], ", ")
	if len(ids) > maxNamed {
		named += fmt.Sprintf(" and %d more", len(ids)-maxNamed)
	}
	return fmt.Sprintf("%d component(s) wait for the lease of another notifier's unfinished notification before they are notified: %s (the lease of %s, held by %s, ends in %s)",
		len(ids), named, first.component, first.owner, max(first.until.Sub(now), 0).Round(time.Millisecond))
}
