package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	wire "github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/north-api/auth"
)

const (
	nodeTokenRotateSummary = "give a registered edge node a new own token (printed once); its old one stops working"
	nodeTokenRevokeSummary = "take a registered edge node's own token away; the org token may then register the node again"
)

func init() {
	register(command{name: "node token rotate", summary: nodeTokenRotateSummary, run: runNodeTokenRotate})
	register(command{name: "node token revoke", summary: nodeTokenRevokeSummary, run: runNodeTokenRevoke})
}

// nodeArg is the ORG/NODE argument of a node command.
func nodeArg(cmd string, args []string) (string, string, error) {
	if len(args) != 1 {
		return "", "", usageErrorf("%s takes one ORG/NODE, got %d arguments", cmd, len(args))
	}
	org, node, ok := strings.Cut(args[0], "/")
	if !ok {
		return "", "", usageErrorf("%s: %q is not ORG/NODE", cmd, args[0])
	}
	if err := nmp.CheckName("org", org); err != nil {
		return "", "", usageErrorf("%s: %v", cmd, err)
	}
	if err := nmp.CheckName("node id", node); err != nil {
		return "", "", usageErrorf("%s: %v", cmd, err)
	}
	return org, node, nil
}

func nodeTokenPath(org, node string) string {
	return "/v1/orgs/" + url.PathEscape(org) + "/nodes/" + url.PathEscape(node) + "/token"
}

func runNodeTokenRotate(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "node token rotate", nodeTokenRotateSummary+
		"\n\nThe node's agent must get the new token (its --node-token-file) before it can talk to the hub again."+
		"\nWith --out the token is written to that file (mode 0600) instead of printed.", "ORG/NODE")
	api := registerAPIFlags(fs)
	out := fs.String("out", "", "write the new token to this file (mode 0600) instead of standard output")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	org, node, err := nodeArg("node token rotate", fs.Args())
	if err != nil {
		return err
	}
	data, err := api.do(ctx, http.MethodPost, nodeTokenPath(org, node), nil)
	if err != nil {
		return err
	}
	var ans wire.NodeTokenChanged
	if err := json.Unmarshal(data, &ans); err != nil || !auth.IsNodeToken(ans.Token) {
		return fmt.Errorf("the North API's answer holds no node token: %s", data)
	}
	if *out != "" {
		if err := auth.WriteSecretFile(*out, []byte(ans.Token+"\n")); err != nil {
			return err
		}
		fmt.Fprintf(stderr(ctx), "node %s/%s has a new token, written to %s; the old one no longer works\n", org, node, *out)
		return nil
	}
	fmt.Fprintf(stderr(ctx), "node %s/%s has a new token; it is shown only now, and the old one no longer works:\n", org, node)
	fmt.Fprintln(stdout(ctx), ans.Token)
	return nil
}

func runNodeTokenRevoke(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "node token revoke", nodeTokenRevokeSummary+
		"\n\nThe node stays registered and keeps its directive; its agent can no longer talk to the hub until it is"+
		"\nregistered again with the org token (which issues a new node token) or given a rotated one.", "ORG/NODE")
	api := registerAPIFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	org, node, err := nodeArg("node token revoke", fs.Args())
	if err != nil {
		return err
	}
	if _, err := api.do(ctx, http.MethodDelete, nodeTokenPath(org, node), nil); err != nil {
		return err
	}
	fmt.Fprintf(stdout(ctx), "node %s/%s's token is revoked\n", org, node)
	return nil
}
