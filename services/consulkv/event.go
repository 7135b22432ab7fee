package consulkv

import (
	"encoding/json"
	"fmt"
)

// Actions of the event key. "updating" marks a write that takes several
// transactions; readers see it between the first and the last.
const (
	ActionGathered = "gathered"
	ActionUpdated  = "updated"
	ActionUpdating = "updating"
)

// TimestampFormat is how the event's timestamp is written: RFC 3339 in
// UTC with milliseconds, e.g. 2018-02-12T10:20:30.777Z.
const TimestampFormat = "2006-01-02T15:04:05.000Z07:00"

// Event is the JSON value of the event key.
type Event struct {
	Action        string `json:"action"`
	Timestamp     string `json:"timestamp"`
	UpdateID      string `json:"update_id"`
	PoliciesCount int    `json:"policies_count"`
	Generation    int64  `json:"generation"`
}

// JSON is the event's value in Consul.
func (e Event) JSON() []byte {
	b, _ := json.Marshal(e) // strings and integers only: cannot fail
	return b
}

// ParseEvent reads an event key's value.
func ParseEvent(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("parse policies event %q: %w", truncate(b, 200), err)
	}
	if e.Action == "" {
		return e, fmt.Errorf("parse policies event %q: no action", truncate(b, 200))
	}
	return e, nil
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}
