package nmp

import (
	"bytes"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
)

// FuzzNMPDocument: any body is refused with a reason or becomes a record
// that compiles, selects without panicking and round-trips through the
// API form.
func FuzzNMPDocument(f *testing.F) {
	for _, s := range []string{
		`{"enabled":true,"constraints":["a == 1"],"agentUpgradePolicy":{"atLeastVersion":"1.2.3","start":"now","duration":60}}`,
		`{"start":"2026-01-01T00:00:00Z","startWindow":5,"agentUpgradePolicy":{"manifest":"1.0.0","allowDowngrade":true}}`,
		`{"patterns":["*","o/p"],"properties":[{"name":"x","value":[1]}]}`,
		`{"failureThreshold":{"count":1,"ratio":0.5}}`,
	} {
		f.Add([]byte(s))
	}
	n, _ := CompileNode(&events.AgentNode{Org: "o", Node: "n", Properties: `[{"name":"a","value":1}]`, Constraints: []string{"x == 1"}})
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := Decode(raw)
		if err != nil {
			return
		}
		p, err := Build("o", "n", d, time.Unix(0, 0))
		if err != nil {
			return
		}
		c, err := Compile(p)
		if err != nil {
			t.Fatalf("a built NMP does not compile: %v\n%s", err, raw)
		}
		c.Applies(n)
		c.StartFor("o/n")
		doc := ToDocument(p)
		doc.ConfirmAllNodes = true
		again, err := Build("o", "n", doc, time.Unix(0, 0))
		if err != nil {
			t.Fatalf("the API form of a stored NMP is refused: %v\n%s", err, raw)
		}
		if (again.AgentUpgrade == nil) != (p.AgentUpgrade == nil) || (p.AgentUpgrade != nil && *again.AgentUpgrade != *p.AgentUpgrade) {
			t.Fatalf("round trip changed the upgrade policy: %+v -> %+v", p.AgentUpgrade, again.AgentUpgrade)
		}
	})
}

// FuzzReadPackage: any bytes are refused with a reason or give a manifest
// with a semantic version.
func FuzzReadPackage(f *testing.F) {
	good, _ := BuildPackage(Manifest{Version: "1.0.0"}, map[string][]byte{"config/a": []byte("x")})
	f.Add(good)
	f.Add([]byte("junk"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, _, err := ReadPackage(bytes.NewReader(raw), 0)
		if err != nil {
			return
		}
		if _, err := ParseSemver(m.Version); err != nil {
			t.Fatalf("accepted a package with version %q", m.Version)
		}
	})
}
