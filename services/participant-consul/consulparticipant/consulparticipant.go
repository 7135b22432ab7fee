// Package consulparticipant is the reference participant built on the
// participant intermediary: for elements of type ElementType it writes an
// element's properties into Consul on deploy and update, under a
// configurable prefix (consulkv.ParticipantElementKey), and deletes them on
// undeploy and delete. Any replica may take any operation: the key and
// its value depend only on the element, so a repeated or moved operation
// writes the same thing.
package consulparticipant

import (
	"context"
	"encoding/json"
	"fmt"

	capi "github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/acm/participant"
	"github.com/policyflow/policyflow/services/consulkv"
)

// ElementType is the element type this participant supports.
const ElementType = "org.policyflow.ConsulKV"

// Callbacks returns the intermediary callbacks writing under prefix
// through kv.
func Callbacks(kv *capi.KV, prefix string) map[string]participant.Callbacks {
	put := func(ctx context.Context, e participant.Element) (json.RawMessage, error) {
		key := consulkv.ParticipantElementKey(prefix, e.InstanceID, e.ElementID)
		if _, err := kv.Put(&capi.KVPair{Key: key, Value: e.Properties}, (&capi.WriteOptions{}).WithContext(ctx)); err != nil {
			return nil, fmt.Errorf("write element %s of instance %s to Consul key %s: %w", e.ElementID, e.InstanceID, key, err)
		}
		out, _ := json.Marshal(map[string]string{"consulKey": key})
		return out, nil
	}
	del := func(ctx context.Context, e participant.Element) error {
		key := consulkv.ParticipantElementKey(prefix, e.InstanceID, e.ElementID)
		if _, err := kv.Delete(key, (&capi.WriteOptions{}).WithContext(ctx)); err != nil {
			return fmt.Errorf("delete Consul key %s of element %s of instance %s: %w", key, e.ElementID, e.InstanceID, err)
		}
		return nil
	}
	return map[string]participant.Callbacks{ElementType: {
		Deploy:   put,
		Update:   put,
		Undeploy: del,
		Delete:   del,
	}}
}
