package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
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
	wait := fs.Bool("wait", false, "wait until the pipeline has handled the catch-up (every stage read its input: lag 0), showing the records still to handle (needs a token of role admin, operator or read-only)")
	waitFor := fs.Duration("wait-timeout", 30*time.Minute, "with --wait, give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("catchup takes no arguments, got %q; use --deployment ID for one deployment", fs.Args())
	}
	var before map[string]float64
	if *wait {
		st, err := pipelineStages(ctx, api)
		if err != nil {
			return err
		}
		before = recordsIn(st)
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
	if err := printAnswer(ctx, answer); err != nil || !*wait {
		return err
	}
	var accepted struct {
		Partitions int `json:"partitions"`
	}
	_ = json.Unmarshal(answer, &accepted)
	return waitCatchup(ctx, api, before, accepted.Partitions, *waitFor)
}

// stageFigures is what policyctl reads of GET /v1/status.
type stageFigures struct {
	Name      string  `json:"name"`
	Ready     bool    `json:"ready"`
	Lag       float64 `json:"lag"`
	RecordsIn float64 `json:"records_in"`
}

func pipelineStages(ctx context.Context, api *apiClient) ([]stageFigures, error) {
	raw, err := api.do(ctx, http.MethodGet, "/v1/status", nil)
	if err != nil {
		return nil, fmt.Errorf("--wait follows the pipeline through GET /v1/status: %w", err)
	}
	var st struct {
		Stages []stageFigures `json:"stages"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("GET /v1/status: %w", err)
	}
	if len(st.Stages) == 0 {
		return nil, fmt.Errorf("--wait follows the stages through GET /v1/status, which reports none: give the North API the stages' ops listeners (--stage-ops)")
	}
	return st.Stages, nil
}

func recordsIn(st []stageFigures) map[string]float64 {
	out := map[string]float64{}
	for _, s := range st {
		out[s.Name] = s.RecordsIn
	}
	return out
}

// waitCatchup waits until the matcher has read the catch-up request (one
// copy per partition: its records in grew by that many) and then every
// stage's lag is 0, showing the records still to handle.
func waitCatchup(ctx context.Context, api *apiClient, before map[string]float64, copies int, timeout time.Duration) error {
	w := stderr(ctx)
	tty := isTerminal(w)
	deadline := time.Now().Add(timeout)
	last := -1.0
	for {
		st, err := pipelineStages(ctx, api)
		if err != nil {
			return err
		}
		read, lag := true, 0.0
		for _, s := range st {
			lag += s.Lag
			if s.Name == "matcher" && s.RecordsIn-before[s.Name] < float64(max(copies, 1)) {
				read = false
			}
		}
		switch {
		case read && lag == 0:
			if tty {
				fmt.Fprintln(w)
			}
			fmt.Fprintln(w, "catch-up handled: every stage has read its input")
			return nil
		case tty:
			fmt.Fprintf(w, "\rcatch-up: %.0f records still to handle across the stages   ", lag)
		case lag != last:
			fmt.Fprintf(w, "catch-up: %.0f records still to handle across the stages\n", lag)
		}
		last = lag
		if time.Now().After(deadline) {
			return fmt.Errorf("catch-up not handled within %s (--wait-timeout): %.0f records still to handle; see the status page /ui/", timeout, lag)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
