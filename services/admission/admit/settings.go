package admit

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/policyflow/policyflow/services/policy"
)

// SettingsPolicyPrefix starts the policy_id of the policy that carries an
// admitted application's settings to its component's Consul folder:
// admission.<component_id>.
const SettingsPolicyPrefix = policy.AdmissionPrefix

// SettingsPolicyID is the policy_id of an application's settings policy.
func SettingsPolicyID(componentID string) string { return SettingsPolicyPrefix + componentID }

// SettingsPolicy is the policy_body that delivers what an application was
// admitted with (AppConfig, after mutation) through the policy flow: it
// lands in the component's Consul folder as
// <scn>:policies/items/admission.<component_id>, beside the component's
// other policies, and every later admitted request of the deployment is a
// newer version of it. version orders the requests (the submission time
// in milliseconds). The body is checked as every pushed policy is
// (policy.Check); the result is its canonical JSON and policy_id.
func SettingsPolicy(r *Request, a *Application, version int64) (policyID string, body []byte, err error) {
	cid := r.ComponentID(a.Name)
	id := SettingsPolicyID(cid)
	v := strconv.FormatInt(version, 10)
	raw, err := json.Marshal(map[string]any{
		policy.FieldPolicyName:    id + "." + v + ".json",
		policy.FieldPolicyVersion: v,
		policy.FieldConfigStatus:  "CONFIG_RETRIEVED",
		policy.FieldMatchingConditions: map[string]any{
			"ONAPName": "admission", "ConfigName": cid,
		},
		policy.FieldConfig: appConfig(r, a),
	})
	if err != nil {
		return "", nil, err
	}
	c, err := policy.Check(raw)
	if err != nil {
		return "", nil, fmt.Errorf("the settings policy %s of application %q: %w", id, a.Name, err)
	}
	return c.PolicyID, c.JSON, nil
}

func appConfig(r *Request, a *Application) AppConfig {
	return AppConfig{
		Application: a.Name, Environment: r.Environment, Package: a.Package, Class: a.Class,
		Instances: a.Instances, Flavor: a.Flavor, Image: a.Image, Properties: a.Properties, Scripts: a.Scripts,
	}
}
