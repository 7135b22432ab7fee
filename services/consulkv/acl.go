package consulkv

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"
)

// ErrTokenRefused is wrapped by the error of a request Consul refused
// because it does not know the request's ACL token (a wrong or deleted
// token): no request with it can succeed until the token is fixed.
var ErrTokenRefused = errors.New("Consul refused the token")

// ErrDenied is wrapped by the error of a write Consul refused because the
// token lacks the right to one of its keys (the token's policy has no
// write rule for the key's prefix): that write cannot succeed until an
// operator grants the right.
var ErrDenied = errors.New("Consul denied the token the right to write")

// Consul's words for the two refusals, in the body of a 403 answer or in
// the reasons of a rolled-back transaction.
const (
	tokenNotFound    = "ACL not found"
	permissionDenied = "Permission denied"
)

// tokenHint says where the token comes from.
const tokenHint = "check --consul-token (PF_CONSUL_TOKEN or CONSUL_HTTP_TOKEN)"

// Token is what Consul says of the configured ACL token.
type Token struct {
	// ACLs is false when the agent has its ACLs off (then any token is
	// accepted and none is needed).
	ACLs bool
	// AccessorID and Description identify the token (ACLs on only).
	AccessorID  string
	Description string
}

// CheckToken asks Consul, once at start, whether it knows the token the
// client sends (a read of /v1/acl/token/self, which needs no right): a
// token it does not know fails with an error wrapping ErrTokenRefused that
// says where to fix it. An agent with its ACLs off accepts any token. A
// client without a token is not checked (Consul runs its requests as the
// anonymous token, with whatever rights the operator gave that). Any other
// error (the agent not reachable) is returned wrapped; the caller decides
// whether to wait.
func CheckToken(ctx context.Context, cl *api.Client, token string) (Token, error) {
	if token == "" {
		return Token{}, nil
	}
	self, _, err := cl.ACL().TokenReadSelf((&api.QueryOptions{}).WithContext(ctx))
	var se api.StatusError
	switch {
	case err == nil:
		return Token{ACLs: true, AccessorID: self.AccessorID, Description: self.Description}, nil
	case errors.As(err, &se) && se.Code == 401 && strings.Contains(se.Body, "ACL support disabled"):
		return Token{}, nil
	case TokenRefused(err):
		return Token{}, fmt.Errorf("%w: %v; %s", ErrTokenRefused, err, tokenHint)
	}
	return Token{}, fmt.Errorf("check the Consul token: %w", err)
}

// TokenRefused reports whether Consul answered err because it does not
// know the request's token ("ACL not found"), as a 403 answer or as the
// failure of a transaction.
func TokenRefused(err error) bool {
	return err != nil && (errors.Is(err, ErrTokenRefused) || strings.Contains(err.Error(), tokenNotFound))
}

// Explain adds to the error of a request Consul refused for an unknown
// token what it means and where to fix it; other errors come back
// unchanged.
func Explain(err error) error {
	if !TokenRefused(err) || errors.Is(err, ErrTokenRefused) {
		return err
	}
	return fmt.Errorf("%w (%s): %w", ErrTokenRefused, tokenHint, err)
}

// Denied reports whether Consul refused err's request because the token
// lacks a right ("Permission denied", a 403 answer).
func Denied(err error) bool {
	var se api.StatusError
	return err != nil && (errors.Is(err, ErrDenied) || errors.As(err, &se) && se.Code == 403 && strings.Contains(se.Body, permissionDenied))
}

// TxnDenied reports whether a rolled-back transaction failed because the
// token lacks the right to one of its operations' keys.
func TxnDenied(resp *api.TxnResponse) bool {
	if resp == nil {
		return false
	}
	for _, e := range resp.Errors {
		if e != nil && strings.HasPrefix(e.What, permissionDenied) {
			return true
		}
	}
	return false
}

// DeniedError is the error of a write to folder that Consul denied: it
// wraps ErrDenied and says which right the token needs; why is Consul's
// reason.
func DeniedError(folder, why string) error {
	return fmt.Errorf("%w under %s: grant the token a policy with key_prefix %q { policy = \"write\" }: %s", ErrDenied, folder, folder, why)
}
