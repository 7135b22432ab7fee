// Package acmapi is the runtime side of automation-composition
// participants (seed 003) as an HTTP API: the registry and the replicated
// state are read from acm.sync, which replica-sync writes; operations go
// to acm.participant, where the participant's replicas share one consumer
// group, so any replica may take one; resync requests go to acm.runtime,
// for replica-sync. The North API (services/north-api/northapi) serves
// its handlers under the roles its route table gives them.
package acmapi

import (
	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// API is the participants' handlers and their read view.
type API struct {
	*web.Kit
	acm *runtime.Table[*events.ReplicaState] // acm.sync: every state by key
}

// New starts the view of acm.sync on kit (closed with kit's views).
func New(kit *web.Kit) (*API, error) {
	t, err := runtime.FollowTable[*events.ReplicaState](kit.Env, topology.ACMSync, nil)
	if err != nil {
		return nil, err
	}
	kit.Views.Add(t)
	kit.Views.OnClose(t.Close)
	return &API{Kit: kit, acm: t}, nil
}
