package northapi

import (
	"net/http"
	"sync"
	"testing"

	"github.com/policyflow/policyflow/services/north-api/apicheck"
)

var (
	checkedMu      sync.Mutex
	checkedClients = map[testing.TB]*http.Client{}
)

// checkedClient is the client of a test's calls to the API: every request
// and answer is checked against openapi.json, and the test fails, when it
// ends, for each exchange that differs from the document.
func checkedClient(t testing.TB) *http.Client {
	t.Helper()
	checkedMu.Lock()
	defer checkedMu.Unlock()
	if c := checkedClients[t]; c != nil {
		return c
	}
	c := apicheck.Client(t, openAPIDocument)
	checkedClients[t] = c
	t.Cleanup(func() {
		checkedMu.Lock()
		delete(checkedClients, t)
		checkedMu.Unlock()
	})
	return c
}
