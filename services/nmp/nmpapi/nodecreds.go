package nmpapi

import (
	"net/http"
	"sync"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/topology"
)

// nodeCreds are the nodes' own tokens as agent.nodes has them (the hash
// only, in each node's record): every node's latest record, and the node
// each token hash belongs to. Every replica reads the topic, so a node's
// token works on every replica.
type nodeCreds struct {
	mu     sync.RWMutex
	nodes  map[string]*events.AgentNode // by org/node
	byHash map[string]string            // token SHA-256 (hex) -> org/node
}

func newNodeCreds() *nodeCreds {
	return &nodeCreds{nodes: map[string]*events.AgentNode{}, byHash: map[string]string{}}
}

// set applies node key's record (nil: a tombstone).
func (c *nodeCreds) set(key string, n *events.AgentNode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.nodes[key]; old != nil && c.byHash[old.TokenSHA256] == key {
		delete(c.byHash, old.TokenSHA256)
	}
	if n == nil || n.Deleted {
		delete(c.nodes, key)
		return
	}
	c.nodes[key] = n
	if n.TokenSHA256 != "" {
		c.byHash[n.TokenSHA256] = key
	}
}

// node is node key's record, nil when it is not registered.
func (c *nodeCreds) node(key string) *events.AgentNode {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nodes[key]
}

// lookup names the node whose own token is token. The map is keyed by
// the token's SHA-256, which says nothing of the token: the lookup's
// timing gives a guesser nothing to go on.
func (c *nodeCreds) lookup(token string) (auth.Principal, bool) {
	c.mu.RLock()
	key, ok := c.byHash[auth.Hash(token)]
	c.mu.RUnlock()
	if !ok {
		return auth.Principal{}, false
	}
	org, node := splitKey(key)
	return auth.NodePrincipal(org, node), true
}

// newNodeToken makes a node's own token and its hash.
func newNodeToken() (string, string, *web.Error) {
	token, err := auth.NewNodeToken()
	if err != nil {
		return "", "", web.Errorf(http.StatusInternalServerError, "%v", err)
	}
	return token, auth.Hash(token), nil
}

// writeNode writes node ev's record and waits (up to ViewWait) until this
// replica's view has it, so that a token it issues works on the caller's
// next request.
func (s *API) writeNode(r *http.Request, ev *events.AgentNode) *web.Error {
	rec, e := s.ProduceRecord(r.Context(), topology.AgentNodes, keyOf(ev.Org, ev.Node), ev)
	if e != nil {
		return e
	}
	s.WaitOwnWrite(r.Context(), s.nm.nodes, rec)
	return nil
}

// registeredNode is the record of node org/node for a change of its
// token: 404 when it is not registered. The caller holds the node's lock.
func (s *API) registeredNode(org, node string) (*events.AgentNode, *web.Error) {
	if e := s.Views.Need(topology.AgentNodes); e != nil {
		return nil, e
	}
	n := s.nm.creds.node(keyOf(org, node))
	if n == nil {
		return nil, web.Errorf(http.StatusNotFound, "node %s/%s is not registered", org, node)
	}
	c := *n
	c.UpdatedAt = time.Now().UTC().Truncate(time.Millisecond)
	return &c, nil
}

// nodeTokenChange is the route that rotates (a new own token for the
// registered node, answered once; the old one stops working) or revokes
// a node's own token (it stops working; the node keeps its registration
// and directive, and an org token may register it again, which issues a
// new one).
func (s *API) NodeTokenChange(rotate bool) web.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) *web.Error {
		org, node, e := s.nodeKey(r)
		if e != nil {
			return e
		}
		defer s.Lock("node " + keyOf(org, node))()
		n, e := s.registeredNode(org, node)
		if e != nil {
			return e
		}
		answer := api.NodeTokenChanged{Org: org, Node: node}
		n.TokenSHA256 = ""
		if rotate {
			token, sum, e := newNodeToken()
			if e != nil {
				return e
			}
			n.TokenSHA256, answer.Token, answer.Rotated = sum, token, true
		} else {
			answer.Revoked = true
		}
		if e := s.writeNode(r, n); e != nil {
			return e
		}
		s.Log.Info().Str("node", keyOf(org, node)).Str("by", web.DescribeCaller(web.PrincipalOf(r.Context()))).Bool("rotated", rotate).Msg("node token changed")
		web.WriteJSON(w, http.StatusOK, answer)
		return nil
	}
}
