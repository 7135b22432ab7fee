package admissionapi

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/policyflow/policyflow/services/internal/web"
)

// DefaultMaxPlacements is how many placement computations (POST
// /v1/placements, and the placement check of a dry run that names a
// datacenter) one North API runs at once unless Options.MaxPlacements
// says otherwise; each can take ProposeTimeout of a CPU.
const DefaultMaxPlacements = 4

// placementRetryAfter is the Retry-After, in seconds, of a placement
// refused because every slot is taken.
const placementRetryAfter = 1

// placementSlot takes one of the slots of placement computations for the
// caller's tenant, or answers rather than queue: 429 with Retry-After
// when the tenant already holds its share (tenantShare of the slots: one
// tenant's costly requests never take every slot), 503 with Retry-After
// when every slot is taken. A computation holds its slot for up to
// ProposeTimeout. The caller releases the slot when the computation ends.
func (s *API) placementSlot(w http.ResponseWriter, tenant string) (release func(), e *web.Error) {
	mine, ok := s.placingBy.take(tenant)
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(placementRetryAfter))
		return nil, web.Errorf(http.StatusTooManyRequests, "%s runs %d placement computations, the most one tenant may run at once (half of --max-placements, %d); retry after %d s",
			callerName(tenant), s.placingBy.per, cap(s.placing), placementRetryAfter)
	}
	select {
	case s.placing <- struct{}{}:
		return func() { <-s.placing; mine() }, nil
	default:
		mine()
		w.Header().Set("Retry-After", strconv.Itoa(placementRetryAfter))
		return nil, web.Errorf(http.StatusServiceUnavailable, "%d placement computations are running, as many as this North API runs at once (--max-placements); retry after %d s", cap(s.placing), placementRetryAfter)
	}
}

// dryRunSlot takes one of the tenant's slots of dry runs (tenantShare of
// --max-placements at once): a dry run evaluates every rule of the
// tenant's policies, and one tenant's costly ones must not hold the
// North API for the others. Over it, 429 with Retry-After.
func (s *API) dryRunSlot(w http.ResponseWriter, tenant string) (release func(), e *web.Error) {
	mine, ok := s.dryRunsBy.take(tenant)
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(placementRetryAfter))
		return nil, web.Errorf(http.StatusTooManyRequests, "%s runs %d dry runs, the most one tenant may run at once (half of --max-placements); retry after %d s",
			callerName(tenant), s.dryRunsBy.per, placementRetryAfter)
	}
	return mine, nil
}

func callerName(tenant string) string {
	if tenant == "" {
		return "the operators"
	}
	return fmt.Sprintf("tenant %q", tenant)
}

// tenantShare is how many of n slots one tenant may hold at once: half,
// rounded up, so that another tenant always finds one when n is 2 or more.
func tenantShare(n int) int { return max(1, (n+1)/2) }

// tenantSlots counts what each tenant holds of a shared resource, each
// at most per at once.
type tenantSlots struct {
	mu   sync.Mutex
	per  int
	held map[string]int
}

func newTenantSlots(per int) *tenantSlots { return &tenantSlots{per: per, held: map[string]int{}} }

// take takes one of tenant's slots; ok is false when it holds per already.
func (t *tenantSlots) take(tenant string) (release func(), ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held[tenant] >= t.per {
		return nil, false
	}
	t.held[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.held[tenant]--; t.held[tenant] <= 0 {
				delete(t.held, tenant)
			}
		})
	}, true
}

// TakePlacementSlot takes a slot of placement computations as a request
// does; ok is false when every slot is taken. Call release to give it
// back.
func (s *API) TakePlacementSlot() (release func(), ok bool) {
	select {
	case s.placing <- struct{}{}:
		return func() { <-s.placing }, true
	default:
		return nil, false
	}
}

// TakeTenantSlots takes, as running requests of tenant do, n of its
// placement slots (with a shared slot each) and n of its dry-run slots;
// ok is false when they are not free. Call release to give them back.
func (s *API) TakeTenantSlots(tenant string, n int) (release func(), ok bool) {
	var held []func()
	release = func() {
		for _, r := range held {
			r()
		}
	}
	for range n {
		p, ok := s.placingBy.take(tenant)
		if !ok {
			release()
			return nil, false
		}
		held = append(held, p)
		g, ok := s.TakePlacementSlot()
		if !ok {
			release()
			return nil, false
		}
		held = append(held, g)
		d, ok := s.dryRunsBy.take(tenant)
		if !ok {
			release()
			return nil, false
		}
		held = append(held, d)
	}
	return release, true
}
