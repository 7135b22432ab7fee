package northapi

import (
	"math"
	"net/http"
	"strconv"

	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/topology"
)

// Authenticator names the holder of a bearer token; *auth.Store (a tokens
// file, reloaded) and *auth.Set are ones.
type Authenticator interface {
	Lookup(token string) (auth.Principal, bool)
}

// anonymous is the caller of every request when authentication is off.
var anonymous = auth.Principal{Name: "anonymous (--insecure-no-auth)", Role: auth.RoleAdmin}

// authRealm names the API in WWW-Authenticate challenges.
const authRealm = `Bearer realm="policyflow-north-api"`

// guard authenticates the caller, applies the rate limit (per token name,
// or per client address before authentication) and checks the caller's
// role against the route's access, before h reads anything of the request.
func (s *Server) guard(a web.Access, h web.HandlerFunc) web.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) *web.Error {
		p, known, hadToken := s.authenticate(r)
		key := "addr " + web.ClientAddr(r)
		if known {
			key = "token " + p.Name
		}
		if ok, wait := s.limiter.Allow(key); !ok {
			secs := int(math.Ceil(wait.Seconds()))
			w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
			return web.Errorf(http.StatusTooManyRequests, "too many requests from %s: the limit is %g per second with bursts of %d; retry after %d s",
				key, s.limiter.Rate(), s.limiter.Burst(), max(secs, 1))
		}
		if a.Public {
			return h(w, r)
		}
		switch {
		case !hadToken:
			w.Header().Set("WWW-Authenticate", authRealm)
			return web.Errorf(http.StatusUnauthorized, "%s %s needs a bearer token: send Authorization: Bearer <token> (policyctl takes --token, PF_TOKEN or --token-file)", r.Method, r.URL.Path)
		case !known && auth.IsNodeToken(bearerOf(r)) && s.needViews(topology.AgentNodes) != nil:
			// Nodes' own tokens are known once agent.nodes is read.
			return s.needViews(topology.AgentNodes)
		case !known:
			w.Header().Set("WWW-Authenticate", authRealm+`, error="invalid_token"`)
			return web.Errorf(http.StatusUnauthorized, "the bearer token is not one of the North API's tokens (revoked, mistyped, or for another deployment); ask an administrator for a token")
		case !a.Allows(p.Role):
			return web.Errorf(http.StatusForbidden, "token %s has role %s, which may not call %s %s; it needs one of the roles %s",
				p.Name, p.Role, r.Method, r.URL.Path, a.RoleNames())
		}
		return h(w, r.WithContext(web.WithPrincipal(r.Context(), p)))
	}
}

// authenticate returns the caller named by the request's bearer token,
// whether the token is known and whether the request carried one.
func (s *Server) authenticate(r *http.Request) (p auth.Principal, known, hadToken bool) {
	if s.opts.InsecureNoAuth {
		return anonymous, true, true
	}
	token, ok := auth.BearerToken(r)
	if !ok {
		return auth.Principal{}, false, false
	}
	if auth.IsNodeToken(token) {
		p, known = s.nmp.LookupNodeToken(token)
		return p, known, true
	}
	p, known = s.opts.Tokens.Lookup(token)
	return p, known, true
}

// bearerOf is the request's bearer token ("" for none).
func bearerOf(r *http.Request) string {
	t, _ := auth.BearerToken(r)
	return t
}
