package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

const (
	policyPushSummary = "push full policy bodies (a JSON array or one object; - for stdin) with no PDP behind them"
	pdpNotifySummary  = "send a PDP notification {loadedPolicies, removedPolicies} (ONAP shape; - for stdin)"
	catchupSummary    = "ask for a catch-up of every deployment, or of one with --deployment"
	rolloutSummary    = "where the latest version of a policy is: components that should hold it, in Consul, notified, failed (with ids), pending"
)

func init() {
	register(command{name: "policy push", summary: policyPushSummary, run: runPolicyPush})
	register(command{name: "pdp notify", summary: pdpNotifySummary, run: runPdpNotify})
	register(command{name: "catch-up", summary: catchupSummary, run: runCatchup})
	register(command{name: "catchup", summary: "the same as catch-up (its former name)", run: runCatchup})
	register(command{name: "rollout", summary: rolloutSummary, run: runRollout})
}

// runFileCommand runs a command that sends FILE|- to a North API path.
func runFileCommand(ctx context.Context, args []string, name, summary, path string) error {
	fs := newFlagSet(ctx, name, summary, "FILE|-")
	api := registerAPIFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("%s takes one FILE (or - for stdin), got %d arguments", name, fs.NArg())
	}
	data, err := readJSONArg(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	answer, err := api.do(ctx, http.MethodPost, path, data)
	if err != nil {
		return err
	}
	return printAnswer(ctx, answer)
}

func runPolicyPush(ctx context.Context, args []string) error {
	return runFileCommand(ctx, args, "policy push", policyPushSummary+
		"\n\nEach body needs policyName <policy_id>.<version>.<ext> (ASCII letters, digits, '.', '_', '-'"+
		"\nand ':' only, no \"..\", at most 255 bytes), policyConfigStatus CONFIG_RETRIEVED and a non-empty"+
		"\nconfig. policyVersion, when given, equals the version in policyName; matchingConditions, when"+
		"\ngiven, is an object; no object has a key twice; at most 512 KiB as canonical JSON.", "/v1/policies")
}

func runPdpNotify(ctx context.Context, args []string) error {
	return runFileCommand(ctx, args, "pdp notify", pdpNotifySummary+
		"\n\npdp-ingest fetches the named policies from the PDP (--pdp-url of pdp-ingest).", "/v1/pdp/notifications")
}

func runCatchup(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "catch-up", catchupSummary+
		"\n\nEvery component's policies are compared with the latest ones and only differences are sent."+
		"\npdp-ingest also runs one when it starts and every --catchup-interval (15m), first"+
		"\nrepairing the catalog from the PDP's full state.", "")
	api := registerAPIFlags(fs)
	deployment := fs.String("deployment", "", "catch up only this deployment_id")
	reason := fs.String("reason", "", "why, for the logs")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("catch-up takes no arguments, got %q; use --deployment ID for one deployment", fs.Args())
	}
	req := map[string]string{}
	if *deployment != "" {
		req["deployment_id"] = *deployment
	}
	if *reason != "" {
		req["reason"] = *reason
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode catch-up request: %w", err)
	}
	answer, err := api.do(ctx, http.MethodPost, "/v1/catchup", body)
	if err != nil {
		return err
	}
	return printAnswer(ctx, answer)
}

func runRollout(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "rollout", rolloutSummary+
		"\n\nComponents should hold a policy when they name its policy_id or one of their filters"+
		"\nmatches its latest body; the lists of failed and pending components hold at most --limit ids.", "POLICY_ID")
	api := registerAPIFlags(fs)
	limit := fs.Int("limit", 100, "most component ids listed as failed and as pending (0 to 10000)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return usageErrorf("rollout takes one POLICY_ID, got %d arguments", fs.NArg())
	}
	if *limit < 0 || *limit > 10000 {
		return usageErrorf("--limit %d is not from 0 to 10000", *limit)
	}
	answer, err := api.do(ctx, http.MethodGet, "/v1/policies/"+url.PathEscape(fs.Arg(0))+"/rollout?limit="+strconv.Itoa(*limit), nil)
	if err != nil {
		return err
	}
	return printAnswer(ctx, answer)
}
