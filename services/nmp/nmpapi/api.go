// Package nmpapi is node management's HTTP API: NMPs (node-management
// policies), the nodes agents register with their own tokens, their
// directives and status reports, and agent packages. It answers from one
// fold of the node-management world (nmp.FollowWorld, the rules the
// nmp-hub reads by) and writes nmp.policies, agent.nodes, agent.packages
// and agent.status. The North API (services/north-api/northapi) serves
// its handlers under the roles its route table gives them.
package nmpapi

import (
	"time"

	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/north-api/auth"
)

// Options tune node management's API.
type Options struct {
	// Orgs, when set, are the orgs served; a request for another org
	// answers 404. Empty: any well-formed org name.
	Orgs []string
	// PackageDir is where agent packages are stored (by SHA-256); empty:
	// none are. MaxPackageBytes bounds one (default 512 MiB),
	// MaxUnpackedPackageBytes its decompressed size (default
	// nmp.DefaultMaxUnpackedBytes).
	PackageDir              string
	MaxPackageBytes         int64
	MaxUnpackedPackageBytes int64
	// WriteTimeout is the HTTP server's: a directive long poll ends 10s
	// before it.
	WriteTimeout time.Duration
}

// API is node management's handlers and read views.
type API struct {
	*web.Kit
	opts Options
	nm   *nodeMgmt
}

// New starts node management's read views on kit (closed with kit's
// views).
func New(kit *web.Kit, opts Options) (*API, error) {
	nm, err := followNodeMgmt(kit.Env, kit.Log)
	if err != nil {
		return nil, err
	}
	kit.Views.Add(nm.views()...)
	kit.Views.OnClose(nm.close)
	return &API{Kit: kit, opts: opts, nm: nm}, nil
}

// LookupNodeToken names the node whose own token is token (agent.nodes
// holds its hash).
func (s *API) LookupNodeToken(token string) (auth.Principal, bool) { return s.nm.creds.lookup(token) }

// World is node management as the API folded it.
func (s *API) World() *nmp.FollowedWorld { return s.nm.world }
