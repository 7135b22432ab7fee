package consulkv

import (
	"encoding/json"
	"fmt"
)

// Claim is the JSON value of the claim key. The agent-notifier writes it
// with check-and-set before the component is notified (ExitCode null),
// and completes it with the outcome afterwards.
type Claim struct {
	UpdateID   string `json:"update_id"`
	Generation int64  `json:"generation"`
	// ExitCode is the script's exit status; -1 when it could not run or
	// was killed at its timeout. For a webhook: 0 on a 2xx answer, 1 on
	// any other answer, -1 when no answer came.
	ExitCode *int   `json:"exit_code"`
	Stderr   string `json:"stderr"`
	At       string `json:"at"`
	// HTTPStatus is the webhook's answer (webhooks only).
	HTTPStatus int `json:"http_status,omitempty"`
}

// JSON is the claim's value in Consul.
func (c Claim) JSON() []byte {
	b, _ := json.Marshal(c) // strings and integers only: cannot fail
	return b
}

// ParseClaim reads the claim key's value.
func ParseClaim(b []byte) (Claim, error) {
	var c Claim
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("parse notification claim: %w", err)
	}
	return c, nil
}
