package admit

import (
	"context"
	"fmt"
	"testing"

	"github.com/policyflow/policyflow/events"
)

// BenchmarkAuditFlavorLimitTexts is what the audit reports do for each
// policy and admitted deployment: a flavor limit checked against a request
// of three applications, two over the limit, and the findings' texts.
func BenchmarkAuditFlavorLimitTexts(b *testing.B) {
	p, err := CompilePolicy(&events.AppPolicy{PolicyID: "p0001", Mode: "audit",
		ObjectModel: `{"maxFlavor":"m1.medium","approvedApplications":["com.example.Analytics"],"?":{"type":"io.policyflow.admission.FlavorLimit"}}`})
	if err != nil {
		b.Fatal(err)
	}
	req, err := ParseRequest([]byte(`{"deployment_id":"d1","tenant":"t1","applications":[` +
		`{"name":"web","class":"com.example.Web","instances":1,"flavor":"m1.xlarge"},` +
		`{"name":"db","class":"com.example.Db","instances":1,"flavor":"m1.large"},` +
		`{"name":"an","class":"com.example.Analytics","instances":1,"flavor":"m1.xlarge"}]}`))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		fs := Audit(ctx, req, p)
		if len(fs) != 2 {
			b.Fatalf("%d findings, want 2", len(fs))
		}
		for _, f := range fs {
			_ = f.Text(req.Tenant)
		}
	}
}

// TestTextsAreWhatFmtWrote: the texts of findings and the descriptions
// of applications, built without fmt, are what fmt wrote, also for names
// that need quoting.
func TestTextsAreWhatFmtWrote(t *testing.T) {
	for _, s := range []string{"", "t1", `a "quoted" name`, "tab\there", "naïve ✓", "\x00\x7f\xff", `back\slash`} {
		f := Finding{PolicyID: "p" + s, Rule: "r" + s, Object: "o" + s, Message: "m" + s}
		if got, want := f.Text(s), fmt.Sprintf("tenant %q: %s: %s (rule %s of policy %s)", s, f.Object, f.Message, f.Rule, f.PolicyID); got != want {
			t.Errorf("Text(%q) = %q, want %q", s, got, want)
		}
		a := Application{Name: s, Class: "x." + s}
		if got, want := a.describe(), fmt.Sprintf("application %q (%s)", a.Name, a.Class); got != want {
			t.Errorf("describe of %q = %q, want %q", s, got, want)
		}
	}
}
