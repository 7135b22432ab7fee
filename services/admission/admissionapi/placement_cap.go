package admissionapi

import (
	"net/http"
	"strconv"

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

// placementSlot takes one of the slots of placement computations, or,
// when every slot is taken, answers 503 with Retry-After rather than
// queue: a computation holds its slot for up to ProposeTimeout. The caller
// releases the slot when the computation ends.
func (s *API) placementSlot(w http.ResponseWriter) (release func(), e *web.Error) {
	select {
	case s.placing <- struct{}{}:
		return func() { <-s.placing }, nil
	default:
		w.Header().Set("Retry-After", strconv.Itoa(placementRetryAfter))
		return nil, web.Errorf(http.StatusServiceUnavailable, "%d placement computations are running, as many as this North API runs at once (--max-placements); retry after %d s", cap(s.placing), placementRetryAfter)
	}
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
