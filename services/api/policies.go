package api

import "encoding/json"

// LatestPolicy is one policy in the ONAP policy-handler shape: the answer
// of GET /policy_latest/{policy_id}, and each value of /policies_latest.
type LatestPolicy struct {
	PolicyID   string          `json:"policy_id"`
	PolicyBody json.RawMessage `json:"policy_body"`
	// Status is ERRORED, with the Error, when the PDP's latest version of
	// the policy is invalid and PolicyBody is the last valid one, still
	// in force; absent otherwise.
	Status string `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// AbortedVersion is the catalog's latest version when its staged
	// rollout was aborted: PolicyBody is that version, which no component
	// has; InForce says what they have instead. Both absent otherwise
	// (the components have, or are being given, PolicyBody).
	AbortedVersion string   `json:"aborted_version,omitempty"`
	InForce        *InForce `json:"in_force,omitempty"`
}

// InForce is the version of a policy the components have after the
// rollout of the catalog's latest was aborted: the version before it, at
// the revision the abort restored it at, or None when there was none
// (the abort removed the policy from the components).
type InForce struct {
	PolicyVersion string          `json:"policy_version,omitempty"`
	PolicyBody    json.RawMessage `json:"policy_body,omitempty"`
	Revision      int64           `json:"revision,omitempty"`
	None          bool            `json:"none,omitempty"`
}
