package policy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestNotificationJSON(t *testing.T) {
	// As the PDP sends it (ONAP PDPNotification).
	in := `{
	  "removedPolicies": [{"policyName": "DCAE.Config_VM_MEMORY.4.xml", "versionNo": "4"}],
	  "loadedPolicies": [{"policyName": "DCAE.Config_VM_MEMORY.5.xml", "versionNo": "5",
	                      "matches": {"ONAPName": "DCAE", "ConfigName": "vm", "priority": 1, "on": true},
	                      "updateType": "UPDATE"}],
	  "notificationType": "Both"
	}`
	var n Notification
	if err := json.Unmarshal([]byte(in), &n); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	want := Notification{
		LoadedPolicies: []LoadedPolicy{{
			PolicyName: "DCAE.Config_VM_MEMORY.5.xml", VersionNo: "5",
			Matches:    map[string]string{"ONAPName": "DCAE", "ConfigName": "vm", "priority": "1", "on": "true"},
			UpdateType: "UPDATE",
		}},
		RemovedPolicies:  []RemovedPolicy{{PolicyName: "DCAE.Config_VM_MEMORY.4.xml", VersionNo: "4"}},
		NotificationType: "Both",
	}
	if !reflect.DeepEqual(n, want) {
		t.Fatalf("got %+v\nwant %+v", n, want)
	}
	if err := n.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if got := n.PolicyIDs(); !reflect.DeepEqual(got, []string{"DCAE.Config_VM_MEMORY"}) {
		t.Fatalf("PolicyIDs = %v", got)
	}

	out, err := json.Marshal(Notification{RemovedPolicies: []RemovedPolicy{{PolicyName: "DCAE.Config_a.1.xml", VersionNo: "1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"loadedPolicies":[],"removedPolicies":[{"policyName":"DCAE.Config_a.1.xml","versionNo":"1"}]}` {
		t.Fatalf("Marshal = %s", out)
	}

	var numeric Notification
	if err := json.Unmarshal([]byte(`{"removedPolicies":[{"policyName":"DCAE.Config_a.7.xml","versionNo":7}]}`), &numeric); err != nil {
		t.Fatal(err)
	}
	if numeric.RemovedPolicies[0].VersionNo != "7" {
		t.Fatalf("versionNo = %q", numeric.RemovedPolicies[0].VersionNo)
	}
}

func TestNotificationValidate(t *testing.T) {
	n := Notification{
		LoadedPolicies:  []LoadedPolicy{{PolicyName: ""}},
		RemovedPolicies: []RemovedPolicy{{PolicyName: ".3.xml"}},
	}
	err := n.Validate()
	if err == nil || !strings.Contains(err.Error(), "loadedPolicies[0]") || !strings.Contains(err.Error(), "removedPolicies[0]") {
		t.Fatalf("Validate = %v", err)
	}
}

func TestLoadedPolicyHeaderAndFromBody(t *testing.T) {
	b := hostCapacityBody()
	l := LoadedFromBody(b, UpdateTypeNew)
	if l.PolicyName != "DCAE.Config_host_capacity_policy_id_value.69.xml" || l.VersionNo != "69" || l.UpdateType != "NEW" {
		t.Fatalf("LoadedFromBody = %+v", l)
	}
	if l.Matches["ONAPName"] != "DCAE" || l.Matches["n"] != "1" || l.Matches["obj"] != `{"a":[1,"x"]}` {
		t.Fatalf("matches = %v", l.Matches)
	}
	h := l.Header()
	if h.PolicyName() != l.PolicyName || h.VersionString() != "69" {
		t.Fatalf("Header = %v", h)
	}
	c, err := CompileFilter(Filter{PolicyName: "DCAE.Config_host.*", OnapName: "DCAE", ConfigName: "alex_config_name"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, r := c.Match(h); !ok {
		t.Fatalf("header does not match: %q", r)
	}
}

func TestValidateRefusesAVersionNoOtherThanTheName(t *testing.T) {
	var n Notification
	if err := json.Unmarshal([]byte(`{"loadedPolicies":[{"policyName":"DCAE.Config_a.5.xml","versionNo":"6"}]}`), &n); err != nil {
		t.Fatal(err)
	}
	want := `loadedPolicies[0]: versionNo "6" is not the version 5 in policyName "DCAE.Config_a.5.xml"; give versionNo "5" or leave it out`
	if err := n.Validate(); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Validate: %v, want %s", err, want)
	}
}
