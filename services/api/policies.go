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
}
