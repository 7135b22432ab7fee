// Package auth says who calls the North API: the roles a caller may have,
// the bearer tokens file that names each token's holder, role and tenant
// (it holds SHA-256 hashes of the tokens, never the tokens), and a Store
// that reloads that file when it changes.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Role is what a token's holder may do; the North API's route table says
// which roles may call each route.
type Role string

// The roles.
const (
	// RoleAdmin may do everything.
	RoleAdmin Role = "admin"
	// RoleOperator may do everything but administer tokens.
	RoleOperator Role = "operator"
	// RoleTenant may write, delete and read the components of its own
	// tenant, read their Consul folders, and read policies.
	RoleTenant Role = "tenant"
	// RoleReadOnly may call the routes that only read.
	RoleReadOnly Role = "read-only"
	// RoleAgent is an edge agent (node management). A token of the tokens
	// file with this role is an org token: it registers new nodes (with a
	// tenant, only in the org of that name), each registration issuing
	// the node its own token (NodePrincipal), with which the node reads
	// its directive, reports its status and downloads agent packages.
	RoleAgent Role = "agent"
	// RoleParticipant is an automation-composition participant; no route
	// grants it anything yet.
	RoleParticipant Role = "participant"
)

// Roles lists every role, in the order the documentation shows them.
var Roles = []Role{RoleAdmin, RoleOperator, RoleTenant, RoleReadOnly, RoleAgent, RoleParticipant}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// Principal is the authenticated caller: the token's name, role and, for
// the tenant role (and optionally the agent role), the tenant (org) it is
// scoped to. Node is set for a node's own token (role agent, Tenant its
// org), issued when the node registered: it acts for that node only.
type Principal struct {
	Name   string
	Role   Role
	Tenant string
	Node   string
}

// NodePrincipal is the caller holding the own token of node org/node.
func NodePrincipal(org, node string) Principal {
	return Principal{Name: "node " + org + "/" + node, Role: RoleAgent, Tenant: org, Node: node}
}

// tokenPrefix starts every token NewToken makes, and nodeTokenPrefix
// every node's own token (NewNodeToken), so one found in a log or a
// repository is recognizable, and the API knows where to look a token up.
const (
	tokenPrefix     = "pf_"
	nodeTokenPrefix = "pfn_"
)

// NewToken returns a new random token: "pf_" and 32 random bytes in
// unpadded base64url (256 bits of entropy, so an unsalted SHA-256 of it is
// safe to store).
func NewToken() (string, error) { return newToken(tokenPrefix) }

// NewNodeToken returns a new random token for one node: as NewToken, with
// the prefix "pfn_".
func NewNodeToken() (string, error) { return newToken(nodeTokenPrefix) }

// IsNodeToken reports whether token has the form of a node's own token.
func IsNodeToken(token string) bool { return strings.HasPrefix(token, nodeTokenPrefix) }

func newToken(prefix string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a token: read random bytes: %w", err)
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// Hash is the hex SHA-256 of a token, as the tokens file stores it.
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// BearerToken returns the token of an "Authorization: Bearer <token>"
// header and whether the request had one.
func BearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// SetBearer sets the Authorization header of req to the token.
func SetBearer(req *http.Request, token string) {
	req.Header.Set("Authorization", "Bearer "+token)
}

// Transport is an http.RoundTripper that sends every request with the
// token as bearer credential, unless the request already has an
// Authorization header.
type Transport struct {
	Token string
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if t.Token == "" || req.Header.Get("Authorization") != "" {
		return base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	SetBearer(req, t.Token)
	return base.RoundTrip(req)
}

// Client returns an HTTP client that sends the token with every request.
func Client(token string) *http.Client {
	return &http.Client{Transport: &Transport{Token: token}}
}

// Set is a parsed tokens file: who holds each token hash.
type Set struct {
	entries []setEntry
}

type setEntry struct {
	p   Principal
	sum [sha256.Size]byte
}

// Len is the number of tokens in the set.
func (s *Set) Len() int { return len(s.entries) }

// Lookup returns the holder of token. It hashes the token and compares the
// hash with every entry's in constant time, so the answer's timing says
// nothing about how close a guess was.
func (s *Set) Lookup(token string) (Principal, bool) {
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i := range s.entries {
		if subtle.ConstantTimeCompare(sum[:], s.entries[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, false
	}
	return s.entries[found].p, true
}
