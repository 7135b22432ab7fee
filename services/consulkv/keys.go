// Package consulkv is the one place that knows how policyflow lays out
// Consul KV and talks to Consul: the keys of a component's folder, the
// event and claim documents stored there, Consul's size limits and
// transaction helpers, the connection configuration and client, and what
// Consul's ACL refusals mean (an unknown token, a missing right).
//
// A component's keys all start with its service_component_name (scn):
//
//	<scn>                              the component's config (read by the North API)
//	<scn>:policies/items/<policy_id>   one policy_body per policy
//	<scn>:policies/event               the folder's last write (Event)
//	<scn>:policies/notified            the agent-notifier's claim (Claim)
package consulkv

import "strings"

// Prefix starts every key of a component other than its config:
// <scn>:.
func Prefix(scn string) string { return scn + ":" }

// ConfigKey is the key of a component's config: <scn>.
func ConfigKey(scn string) string { return scn }

// Folder is the Consul KV folder of a component's policies:
// <scn>:policies/. Uninstalling a component deletes this tree.
func Folder(scn string) string { return Prefix(scn) + "policies/" }

// ItemsPrefix is the folder holding one key per policy.
func ItemsPrefix(scn string) string { return Folder(scn) + "items/" }

// ItemKey is the key of one policy's policy_body.
func ItemKey(scn, policyID string) string { return ItemsPrefix(scn) + policyID }

// ItemPolicyID is ItemKey read back: the policy_id of key when key is an
// item key of scn's folder. A folder placeholder (a key ending in '/') is
// not an item.
func ItemPolicyID(scn, key string) (policyID string, ok bool) {
	id, ok := strings.CutPrefix(key, ItemsPrefix(scn))
	if !ok || id == "" || strings.HasSuffix(id, "/") {
		return "", false
	}
	return id, true
}

// ItemsOwners are the names (scn) whose items prefix (ItemsPrefix) key
// lies under, shortest first: usually one; more when a name holds another
// component's items prefix (the keys of "a:policies/items/b" lie under
// "a"'s items prefix too); none for a key outside every items prefix. A
// listing of many components' keys is read back with it: each key goes
// where a read of each folder would have found it.
func ItemsOwners(key string) []string {
	marker := ItemsPrefix("")
	var out []string
	for off := 0; ; {
		i := strings.Index(key[off:], marker)
		if i < 0 {
			return out
		}
		out = append(out, key[:off+i])
		off += i + 1
	}
}

// EventKey is the key of the folder's last event.
func EventKey(scn string) string { return Folder(scn) + "event" }

// ClaimKey is the key that records which update a component was last
// notified of: the agent-notifier's claim.
func ClaimKey(scn string) string { return Folder(scn) + "notified" }
