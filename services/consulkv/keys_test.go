package consulkv_test

import (
	"strings"
	"testing"

	"github.com/policyflow/policyflow/services/consulkv"
)

// The layout is the seed's: these are the keys components and operators
// read.
func TestKeysOfAComponent(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{consulkv.ConfigKey("dcae-vm"), "dcae-vm"},
		{consulkv.Prefix("dcae-vm"), "dcae-vm:"},
		{consulkv.Folder("dcae-vm"), "dcae-vm:policies/"},
		{consulkv.ItemsPrefix("dcae-vm"), "dcae-vm:policies/items/"},
		{consulkv.ItemKey("dcae-vm", "DCAE.Config_VM_MEMORY"), "dcae-vm:policies/items/DCAE.Config_VM_MEMORY"},
		{consulkv.EventKey("dcae-vm"), "dcae-vm:policies/event"},
		{consulkv.ClaimKey("dcae-vm"), "dcae-vm:policies/notified"},
	} {
		if tc.got != tc.want {
			t.Errorf("key %q, want %q", tc.got, tc.want)
		}
	}
}

func TestItemPolicyIDReadsBackItemKeysOnly(t *testing.T) {
	if id, ok := consulkv.ItemPolicyID("dcae-vm", consulkv.ItemKey("dcae-vm", "DCAE.Config_A")); !ok || id != "DCAE.Config_A" {
		t.Fatalf("ItemPolicyID of an item key = %q, %v; want DCAE.Config_A, true", id, ok)
	}
	for _, key := range []string{
		consulkv.EventKey("dcae-vm"),
		consulkv.ClaimKey("dcae-vm"),
		consulkv.ItemsPrefix("dcae-vm"),
		consulkv.ItemsPrefix("dcae-vm") + "sub/",
		consulkv.ItemKey("dcae-vmx", "DCAE.Config_A"), // another component
		"dcae-vm",
	} {
		if id, ok := consulkv.ItemPolicyID("dcae-vm", key); ok {
			t.Errorf("ItemPolicyID(%q) = %q, true; want no item", key, id)
		}
	}
}

func TestItemsOwnersFindsEveryItemsPrefixOfAKey(t *testing.T) {
	nested := consulkv.ItemKey("a", "b") // a name that holds a's items prefix
	for _, tc := range []struct {
		key  string
		want []string
	}{
		{consulkv.ItemKey("dcae-vm", "DCAE.Config_A"), []string{"dcae-vm"}},
		{consulkv.ItemsPrefix("dcae-vm") + "sub/", []string{"dcae-vm"}},
		{consulkv.ItemsPrefix("dcae-vm"), []string{"dcae-vm"}},
		{consulkv.ItemKey(nested, "X"), []string{"a", nested}},
		{consulkv.EventKey("dcae-vm"), nil},
		{consulkv.ClaimKey("dcae-vm"), nil},
		{consulkv.ConfigKey("dcae-vm"), nil},
	} {
		got := consulkv.ItemsOwners(tc.key)
		if len(got) != len(tc.want) {
			t.Errorf("ItemsOwners(%q) = %q, want %q", tc.key, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] || !strings.HasPrefix(tc.key, consulkv.ItemsPrefix(got[i])) {
				t.Errorf("ItemsOwners(%q) = %q, want %q", tc.key, got, tc.want)
			}
		}
	}
}
