package consulkv

import "strings"

// DefaultParticipantPrefix is where the reference participant writes the
// elements it deploys unless told otherwise.
const DefaultParticipantPrefix = "acm/participant-consul"

// ParticipantElementKey is the Consul key holding one deployed element's
// properties: <prefix>/<instance_id>/<element_id>. The ids are checked
// (check.ID) before they get here, so they hold no '/'.
func ParticipantElementKey(prefix, instanceID, elementID string) string {
	return strings.TrimRight(prefix, "/") + "/" + instanceID + "/" + elementID
}
