package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Notification is a PDP policy notification in ONAP's JSON shape:
//
//	{"loadedPolicies": [{"policyName": "DCAE.Config_VM_MEMORY.5.xml", "versionNo": "5",
//	                     "matches": {"ONAPName": "DCAE"}, "updateType": "NEW"}],
//	 "removedPolicies": [{"policyName": "DCAE.Config_VM_MEMORY.4.xml", "versionNo": "4"}],
//	 "notificationType": "Both"}
//
// It names policy versions and their matching conditions, never their
// config. Decoding an entry refuses a field it does not have.
type Notification struct {
	LoadedPolicies  []LoadedPolicy  `json:"loadedPolicies"`
	RemovedPolicies []RemovedPolicy `json:"removedPolicies"`
	// NotificationType is "Update", "Remove" or "Both" when the sender
	// sets it; policyflow does not depend on it.
	NotificationType string `json:"notificationType,omitempty"`
}

// Notification types as the PDP names them.
const (
	NotificationUpdate = "Update"
	NotificationRemove = "Remove"
	NotificationBoth   = "Both"
)

// Update types of a loaded policy as the PDP names them.
const (
	UpdateTypeNew    = "NEW"
	UpdateTypeUpdate = "UPDATE"
)

// LoadedPolicy is one entry of loadedPolicies: a policy version the PDP
// loaded.
type LoadedPolicy struct {
	PolicyName string `json:"policyName"`
	VersionNo  string `json:"versionNo"`
	// Matches are the policy's matching conditions (ONAPName, ConfigName
	// and config attributes). Non-string values a sender puts here are
	// carried as their JSON text.
	Matches    map[string]string `json:"matches,omitempty"`
	UpdateType string            `json:"updateType,omitempty"`
}

// RemovedPolicy is one entry of removedPolicies: a policy version the PDP
// removed.
type RemovedPolicy struct {
	PolicyName string `json:"policyName"`
	VersionNo  string `json:"versionNo"`
}

// MarshalJSON writes empty lists as [] rather than null, as the PDP does.
func (n Notification) MarshalJSON() ([]byte, error) {
	type plain Notification
	p := plain(n)
	if p.LoadedPolicies == nil {
		p.LoadedPolicies = []LoadedPolicy{}
	}
	if p.RemovedPolicies == nil {
		p.RemovedPolicies = []RemovedPolicy{}
	}
	return json.Marshal(p)
}

// UnmarshalJSON accepts matches whose values are not strings (numbers,
// booleans, objects) by keeping their JSON text.
func (l *LoadedPolicy) UnmarshalJSON(data []byte) error {
	var raw struct {
		PolicyName string                     `json:"policyName"`
		VersionNo  json.RawMessage            `json:"versionNo"`
		Matches    map[string]json.RawMessage `json:"matches"`
		UpdateType string                     `json:"updateType"`
	}
	if err := decodeEntry("loadedPolicies", data, &raw); err != nil {
		return err
	}
	version, err := textOf(raw.VersionNo)
	if err != nil {
		return fmt.Errorf("decode loadedPolicies entry %q: versionNo: %w", raw.PolicyName, err)
	}
	*l = LoadedPolicy{PolicyName: raw.PolicyName, VersionNo: version, UpdateType: raw.UpdateType}
	if raw.Matches != nil {
		l.Matches = make(map[string]string, len(raw.Matches))
		for k, v := range raw.Matches {
			s, err := textOf(v)
			if err != nil {
				return fmt.Errorf("decode loadedPolicies entry %q: matches[%q]: %w", raw.PolicyName, k, err)
			}
			l.Matches[k] = s
		}
	}
	return nil
}

// UnmarshalJSON accepts a versionNo given as a JSON number.
func (r *RemovedPolicy) UnmarshalJSON(data []byte) error {
	var raw struct {
		PolicyName string          `json:"policyName"`
		VersionNo  json.RawMessage `json:"versionNo"`
	}
	if err := decodeEntry("removedPolicies", data, &raw); err != nil {
		return err
	}
	version, err := textOf(raw.VersionNo)
	if err != nil {
		return fmt.Errorf("decode removedPolicies entry %q: versionNo: %w", raw.PolicyName, err)
	}
	*r = RemovedPolicy{PolicyName: raw.PolicyName, VersionNo: version}
	return nil
}

// decodeEntry decodes one entry of list into raw, refusing a field raw
// does not have.
func decodeEntry(list string, data []byte, raw any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(raw); err != nil {
		return fmt.Errorf("decode %s entry: %w", list, err)
	}
	return nil
}

// textOf turns a JSON value into text: a string is unquoted, null is "",
// anything else keeps its compact JSON text.
func textOf(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	v, err := decodeJSONValue(raw)
	if err != nil {
		return "", err
	}
	switch t := v.(type) {
	case nil:
		return "", nil
	case string:
		return t, nil
	case json.Number:
		return t.String(), nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(data), nil
}

// Validate checks that every entry names a full policyName CheckName
// accepts, and a versionNo, when given, equal (as an integer) to the
// version in that name.
func (n Notification) Validate() error {
	var errs []error
	for i, l := range n.LoadedPolicies {
		if err := checkEntry(l.PolicyName, l.VersionNo); err != nil {
			errs = append(errs, fmt.Errorf("loadedPolicies[%d]: %w", i, err))
		}
	}
	for i, r := range n.RemovedPolicies {
		if err := checkEntry(r.PolicyName, r.VersionNo); err != nil {
			errs = append(errs, fmt.Errorf("removedPolicies[%d]: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("validate PDP notification: %w", errors.Join(errs...))
	}
	return nil
}

// checkEntry checks one entry's policyName and versionNo.
func checkEntry(name, versionNo string) error {
	id, version, err := CheckName(name)
	if err != nil || versionNo == "" {
		return err
	}
	if v, ok := ParseVersion(versionNo); !ok || v != version {
		fromName := versionText(name, id)
		return fmt.Errorf("versionNo %s is not the version %s in policyName %s; give versionNo %q or leave it out",
			quoteShort(versionNo), fromName, quoteShort(name), fromName)
	}
	return nil
}

// PolicyIDs lists the distinct policy_ids the notification names, loaded
// ones first, in order of appearance; names without a policy_id are left
// out.
func (n Notification) PolicyIDs() []string {
	seen := make(map[string]bool)
	var out []string
	add := func(name string) {
		id, err := PolicyID(name)
		if err != nil || seen[id] {
			return
		}
		seen[id] = true
		out = append(out, id)
	}
	for _, l := range n.LoadedPolicies {
		add(l.PolicyName)
	}
	for _, r := range n.RemovedPolicies {
		add(r.PolicyName)
	}
	return out
}

// Header is the policy_body a loaded policy announces, without config:
// policyName, policyVersion and matchingConditions. It lets filters be
// matched before the full body is fetched.
func (l LoadedPolicy) Header() Body {
	mc := make(map[string]any, len(l.Matches))
	for k, v := range l.Matches {
		mc[k] = v
	}
	return Body{
		FieldPolicyName:         l.PolicyName,
		FieldPolicyVersion:      l.VersionNo,
		FieldMatchingConditions: mc,
	}
}

// LoadedFromBody describes a body as a loadedPolicies entry; matching
// conditions that are not strings are carried as their JSON text.
func LoadedFromBody(b Body, updateType string) LoadedPolicy {
	l := LoadedPolicy{PolicyName: b.PolicyName(), VersionNo: b.VersionString(), UpdateType: updateType}
	var mc map[string]any
	switch m := b[FieldMatchingConditions].(type) {
	case map[string]any:
		mc = m
	case map[string]string:
		mc = asObject(m)
	}
	if len(mc) > 0 {
		l.Matches = make(map[string]string, len(mc))
		for k, v := range mc {
			if s, ok := v.(string); ok {
				l.Matches[k] = s
				continue
			}
			l.Matches[k] = compactJSONFull(v)
		}
	}
	return l
}

func compactJSONFull(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(data)
}
