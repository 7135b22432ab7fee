package policy

import "testing"

func TestMayHold(t *testing.T) {
	for _, c := range []struct {
		name              string
		component, policy string
		want              bool
	}{
		{"a global policy, any tenant", "acme", "", true},
		{"a global policy, a component with no tenant", "", "", true},
		{"its own tenant's policy", "acme", "acme", true},
		{"another tenant's policy", "acme", "globex", false},
		{"a tenant's policy, a component with no tenant", "", "globex", false},
		{"no prefix match between tenants", "acme", "acme-eu", false},
		{"case matters", "Acme", "acme", false},
	} {
		if got := MayHold(c.component, c.policy); got != c.want {
			t.Errorf("%s: MayHold(%q, %q) = %v, want %v", c.name, c.component, c.policy, got, c.want)
		}
	}
}
