package web

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/policyflow/policyflow/services/north-api/auth"
)

// Access is who may call a route: anyone (no token), or the holders of a
// token with one of the roles. The route table names one per route.
type Access struct {
	Public bool
	Roles  []auth.Role
}

// Roles is an Access for the holders of a token with one of roles.
func Roles(roles ...auth.Role) Access { return Access{Roles: roles} }

// Who may call what, as most routes need it.
var (
	// Anyone needs no token.
	Anyone = Access{Public: true}
	// Operators change what the pipeline does.
	Operators = Roles(auth.RoleAdmin, auth.RoleOperator)
	// OwnComponents are operators, and tenants for their own components
	// (the handler checks the component's tenant).
	OwnComponents = Roles(auth.RoleAdmin, auth.RoleOperator, auth.RoleTenant)
	// Readers read; tenants only what belongs to their tenant (the
	// handler checks), and global policies and their tenant's.
	Readers = Roles(auth.RoleAdmin, auth.RoleOperator, auth.RoleReadOnly, auth.RoleTenant)
	// StatusReaders see the whole pipeline (every tenant's components):
	// not tenants.
	StatusReaders = Roles(auth.RoleAdmin, auth.RoleOperator, auth.RoleReadOnly)
	// Authenticated is any valid token: unknown paths and methods answer
	// 404 and 405 only to callers who may know what exists.
	Authenticated = Roles(auth.Roles...)
)

// Allows reports whether a caller of role r may call.
func (a Access) Allows(r auth.Role) bool { return a.Public || slices.Contains(a.Roles, r) }

// RoleNames lists the roles a may call with, for an answer.
func (a Access) RoleNames() string {
	s := make([]string, len(a.Roles))
	for i, r := range a.Roles {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

type principalKey struct{}

// WithPrincipal is ctx carrying the caller of its request.
func WithPrincipal(ctx context.Context, p auth.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalOf is the caller of a request that passed the route's access
// check (the zero Principal on a public route).
func PrincipalOf(ctx context.Context) auth.Principal {
	p, _ := ctx.Value(principalKey{}).(auth.Principal)
	return p
}

// DescribeCaller names the caller for logs.
func DescribeCaller(p auth.Principal) string {
	if p.Tenant != "" {
		return fmt.Sprintf("%s (%s of %s)", p.Name, p.Role, p.Tenant)
	}
	return fmt.Sprintf("%s (%s)", p.Name, p.Role)
}

// Caller is the caller of r (PrincipalOf its context).
func Caller(r *http.Request) auth.Principal { return PrincipalOf(r.Context()) }

// ClientAddr is the host of the request's remote address.
func ClientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
