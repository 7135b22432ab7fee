package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

const (
	policyPushSummary = "push full policy bodies (a JSON array or one object; - for stdin) with no PDP behind them"
	pdpNotifySummary  = "send a PDP notification {loadedPolicies, removedPolicies} (ONAP shape; - for stdin)"
	catchupSummary    = "ask for a catch-up of every deployment, or of one with --deployment"
)

func init() {
	register(command{name: "policy push", summary: policyPushSummary, run: runPolicyPush})
	register(command{name: "pdp notify", summary: pdpNotifySummary, run: runPdpNotify})
	register(command{name: "catchup", summary: catchupSummary, run: runCatchup})
}

// runFileCommand runs a command that sends FILE|- to a North API path.
// Given several files, it sends them one after the other with a progress
// bar on a terminal (a line per file otherwise) and a summary, and fails
// after trying every one when one was refused.
func runFileCommand(ctx context.Context, args []string, name, summary, path string) error {
	fs := newFlagSet(ctx, name, summary+
		"\n\nGiven several files, it sends each in its own request, with a progress bar on a terminal (a line"+
		"\nper file otherwise) and a summary; it exits 1 when one was refused, after trying every one.", "FILE|- [FILE...]")
	api := registerAPIFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageErrorf("%s takes a FILE (or - for stdin), or several FILEs", name)
	}
	send := func(file string) ([]byte, error) {
		data, err := readJSONArg(ctx, file)
		if err != nil {
			return nil, err
		}
		return api.do(ctx, http.MethodPost, path, data)
	}
	if fs.NArg() == 1 {
		answer, err := send(fs.Arg(0))
		if err != nil {
			return err
		}
		return printAnswer(ctx, answer)
	}
	p := newProgress(ctx, "file", fs.NArg())
	for _, f := range fs.Args() {
		_, err := send(f)
		p.step(f, err)
	}
	return p.finish()
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
	fs := newFlagSet(ctx, "catchup", catchupSummary+
		"\n\nEvery component's policies are compared with the latest ones and only differences are sent.", "")
	api := registerAPIFlags(fs)
	deployment := fs.String("deployment", "", "catch up only this deployment_id")
	reason := fs.String("reason", "", "why, for the logs")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("catchup takes no arguments, got %q; use --deployment ID for one deployment", fs.Args())
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
