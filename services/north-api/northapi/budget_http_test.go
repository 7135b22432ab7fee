package northapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/testkit"
)

// A dry run whose client leaves stops computing: the handler ends (and
// counts its answer) soon after, not when the evaluation would have.
func TestDryRunStopsWhenTheClientLeaves(t *testing.T) {
	old := admit.RequestBudget
	t.Cleanup(func() { admit.RequestBudget = old })
	admit.RequestBudget = 1 << 62 // only the client's leaving stops it
	s := newStack(t, nil)

	// Two rules of four comprehensions nested over ten items: each is
	// accepted (about 100,000 units an evaluation), and both over 256
	// applications cost 50 million units, ten seconds or more.
	l := "[1,2,3,4,5,6,7,8,9,10]"
	expr := fmt.Sprintf("%s.all(a, %s.all(b, %s.all(c, %s.all(d, a+b+c+d > 0))))", l, l, l, l)
	rules := make([]any, 2)
	for i := range rules {
		rules[i] = map[string]any{"expression": expr, "message": "costly"}
	}
	if code, _, raw := s.call(t, http.MethodPost, "/policies", map[string]any{"objectModel": map[string]any{"validations": rules, "?": map[string]any{"type": admit.KindCEL}}}); code != http.StatusOK {
		t.Fatalf("create the policy: %d %s", code, raw)
	}
	apps := make([]any, admit.MaxApplications)
	for i := range apps {
		apps[i] = map[string]any{"name": fmt.Sprintf("a%d", i), "class": "x.A"}
	}
	body, _ := json.Marshal(map[string]any{"deployment_id": "d1", "tenant": "t1", "applications": apps})

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/deployments?dry_run=true", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	auth.SetBearer(req, adminToken)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the dry run answered %d within 300ms; want it still computing when the client leaves", resp.StatusCode)
	}
	testkit.Eventually(t, 2*time.Second, testkit.Holds("the dry run stops once its client left (a 503 counted)", func() bool {
		_, _, metrics := s.opsGet(t, "/metrics")
		return strings.Contains(string(metrics), `policyflow_north_api_requests_total{code="503",route="POST /v1/deployments"} 1`)
	}))
}
