package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/devstack"
)

const tokenAddSummary = "make a North API bearer token and add its hash to a tokens file; prints the token once"

func init() {
	register(command{name: "token add", summary: tokenAddSummary, run: runTokenAdd})
}

// defaultTokenFile is where `policyctl dev` keeps its admin token:
// policyctl.token in the dev stack's default data directory
// (PF_DEV_DATA_DIR, else .data in the repository root); "" when there is
// no such directory to name.
func defaultTokenFile() string {
	dir := runtime.EnvOr("PF_DEV_DATA_DIR", "")
	if dir == "" {
		d, err := defaultDataDir()
		if err != nil {
			return ""
		}
		dir = d
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	return filepath.Join(abs, devstack.TokenFileName)
}

// bearer returns the token to send to the North API and where it came
// from: --token (PF_TOKEN), else the file of --token-file (PF_TOKEN_FILE),
// else the dev stack's token file when it exists. No token is not an
// error: the API then says what it wants.
func (c *apiClient) bearer() (token, from string, err error) {
	if c.token != "" {
		return c.token, "--token / PF_TOKEN", nil
	}
	path, explicit := c.tokenFile, c.tokenFile != ""
	if !explicit {
		if path = defaultTokenFile(); path == "" {
			return "", "", nil
		}
	}
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
	case !explicit && errors.Is(err, os.ErrNotExist):
		return "", "", nil
	default:
		return "", "", fmt.Errorf("read the North API token from --token-file: %w", err)
	}
	token = strings.TrimSpace(string(data))
	if token == "" {
		return "", "", fmt.Errorf("token file %s is empty; it must hold the bearer token", path)
	}
	return token, path, nil
}

// tokenAdvice says how to give policyctl a token, after a 401.
func tokenAdvice(from string) string {
	if from == "" {
		dev := defaultTokenFile()
		if dev == "" {
			dev = ".data/" + devstack.TokenFileName
		}
		return fmt.Sprintf("policyctl sent no token: give one with --token, PF_TOKEN or --token-file (PF_TOKEN_FILE); `policyctl dev` writes its admin token to %s, where policyctl finds it.", dev)
	}
	return fmt.Sprintf("The token from %s is not one the North API knows: check it, or ask an administrator for one (`policyctl token add` makes them).", from)
}

func runTokenAdd(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "token add", tokenAddSummary+
		"\n\nThe tokens file holds each token's name, role, tenant and SHA-256, never the token; the North API"+
		"\nreads it with --tokens-file and reloads it within seconds of a change. Roles: "+roleNames()+"."+
		"\nA tenant token (--role tenant --tenant T) may write and read only components whose tenant is T.", "")
	file := fs.String("file", runtime.EnvOr("PF_TOKENS_FILE", ""), "tokens file to add the token to; created (mode 0600) when missing (env PF_TOKENS_FILE)")
	name := fs.String("name", "", "name of the token's holder, shown in the API's logs (required)")
	role := fs.String("role", "", "role of the token: "+roleNames()+" (required)")
	tenant := fs.String("tenant", "", "tenant a token of role tenant is scoped to (for role agent, an org token that registers nodes: the org it may register them in, optional)")
	replace := fs.Bool("replace", false, "replace the token of the same name (rotation); without it, an existing name is refused")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("token add takes no arguments, got %q", fs.Args())
	}
	if *file == "" || *name == "" || *role == "" {
		return usageErrorf("token add needs --file, --name and --role")
	}
	var f auth.File
	if _, err := os.Stat(*file); err == nil {
		if f, err = auth.ReadFile(*file); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read tokens file: %w", err)
	}
	if !*replace {
		for _, e := range f.Tokens {
			if e.Name == *name {
				return usageErrorf("%s already has a token named %s; give --replace to replace it (its old token stops working)", *file, *name)
			}
		}
	}
	token, err := auth.NewToken()
	if err != nil {
		return err
	}
	f.Put(auth.Entry{Name: *name, Role: auth.Role(*role), Tenant: *tenant, SHA256: auth.Hash(token)})
	if err := f.Check(); err != nil {
		return usageErrorf("%v", err)
	}
	if err := auth.WriteFile(*file, f); err != nil {
		return err
	}
	fmt.Fprintf(stderr(ctx), "token %s (role %s) added to %s; it is shown only now:\n", *name, *role, *file)
	fmt.Fprintln(stdout(ctx), token)
	return nil
}

func roleNames() string {
	s := make([]string, len(auth.Roles))
	for i, r := range auth.Roles {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}
