package devstack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/north-api/auth"
)

// Where a dev stack keeps its North API credentials, in its data
// directory; both files have mode 0600.
const (
	// TokenFileName holds the admin token itself; policyctl reads it.
	TokenFileName = "policyctl.token"
	// TokensFileName is the North API's tokens file: the token's hash,
	// never the token.
	TokensFileName = "api-tokens.json"
	// AdminTokenName names the dev stack's admin token in the tokens file.
	AdminTokenName = "dev-admin"
)

// DevToken is a dev stack's admin token and the files it is kept in.
type DevToken struct {
	Token string
	// TokenFile holds the token; policyctl finds it there.
	TokenFile string
	// TokensFile is the hashed tokens file the North API reads.
	TokensFile string
	// Created is true when the token was made by this call (first start).
	Created bool
}

// EnsureDevToken gives the dev stack in dir its admin token: the one kept
// in dir/policyctl.token, or a new one on first start, and makes sure the
// tokens file dir/api-tokens.json lists its hash as the admin token
// "dev-admin". Other entries of the tokens file are kept, so tokens added
// to it (`policyctl token add`) survive restarts.
func EnsureDevToken(dir string) (DevToken, error) {
	t := DevToken{TokenFile: filepath.Join(dir, TokenFileName), TokensFile: filepath.Join(dir, TokensFileName)}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return t, fmt.Errorf("dev token: %w", err)
	}
	data, err := os.ReadFile(t.TokenFile)
	switch {
	case err == nil && strings.TrimSpace(string(data)) != "":
		t.Token = strings.TrimSpace(string(data))
		if err := os.Chmod(t.TokenFile, 0o600); err != nil {
			return t, fmt.Errorf("dev token: %w", err)
		}
	case err == nil || errors.Is(err, fs.ErrNotExist):
		if t.Token, err = auth.NewToken(); err != nil {
			return t, fmt.Errorf("dev token: %w", err)
		}
		if err := auth.WriteSecretFile(t.TokenFile, []byte(t.Token+"\n")); err != nil {
			return t, fmt.Errorf("dev token: %w", err)
		}
		t.Created = true
	default:
		return t, fmt.Errorf("dev token: %w", err)
	}

	var f auth.File
	if _, err := os.Stat(t.TokensFile); err == nil {
		if f, err = auth.ReadFile(t.TokensFile); err != nil {
			return t, fmt.Errorf("dev token: %w; fix it, or delete it to start over with the admin token only", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return t, fmt.Errorf("dev token: %w", err)
	}
	want := auth.Entry{Name: AdminTokenName, Role: auth.RoleAdmin, SHA256: auth.Hash(t.Token)}
	for _, e := range f.Tokens {
		if e == want {
			return t, os.Chmod(t.TokensFile, 0o600)
		}
	}
	// Another entry with the token's hash would clash with the admin's.
	kept := f.Tokens[:0]
	for _, e := range f.Tokens {
		if !strings.EqualFold(e.SHA256, want.SHA256) {
			kept = append(kept, e)
		}
	}
	f.Tokens = kept
	f.Put(want)
	if err := auth.WriteFile(t.TokensFile, f); err != nil {
		return t, fmt.Errorf("dev token: %w", err)
	}
	return t, nil
}

// SigningKeyFileName is the dev stack's agent package signing key in its
// data directory (mode 0600), its public key next to it with ".pub".
const SigningKeyFileName = "package-signing.key"

// EnsureDevSigningKey gives the dev stack in dir a key to sign agent
// packages with: dir/package-signing.key, made on first start, and its
// public key dir/package-signing.key.pub for the edge agents'
// --trusted-key. It returns the private key's path and whether it was
// made now.
func EnsureDevSigningKey(dir string) (string, bool, error) {
	path := filepath.Join(dir, SigningKeyFileName)
	if _, err := os.Stat(path); err == nil {
		if _, err := os.Stat(path + ".pub"); err == nil {
			return path, false, nil
		}
	}
	if _, err := nmp.WriteSigningKey(path); err != nil {
		return "", false, fmt.Errorf("dev %w", err)
	}
	return path, true, nil
}
