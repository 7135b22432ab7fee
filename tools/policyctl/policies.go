package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	wire "github.com/policyflow/policyflow/services/api"
)

const (
	policyPushSummary = "push full policy bodies (a JSON array or one object; - for stdin) with no PDP behind them"
	pdpNotifySummary  = "send a PDP notification {loadedPolicies, removedPolicies} (ONAP shape; - for stdin)"
	catchupSummary    = "ask for a catch-up of every deployment, or of one with --deployment"
	rolloutSummary    = "where the latest version of a policy is: components that should hold it, in Consul, notified, failed (with ids), pending; and its staged rollout's steps (rollout promote|pause|resume|abort act on it)"
)

func init() {
	register(command{name: "policy push", summary: policyPushSummary, run: runPolicyPush})
	register(command{name: "pdp notify", summary: pdpNotifySummary, run: runPdpNotify})
	register(command{name: "catch-up", summary: catchupSummary, run: runCatchup})
	register(command{name: "catchup", summary: "the same as catch-up (its former name)", run: runCatchup})
	register(command{name: "rollout", summary: rolloutSummary, run: runRollout})
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
	dry := fs.Bool("dry-run", false, "publish nothing: show what publishing would do (the components added, updated and removed, the diff, what would be refused), one policy_id at a time")
	// -o: a dry run's what-if is a table by default; an accepted publish
	// is printed as JSON unless -o says otherwise.
	out := registerOutputFlag(fs, outputTable)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageErrorf("%s takes a FILE (or - for stdin), or several FILEs", name)
	}
	if *dry {
		return runWhatIf(ctx, api, out, path, fs.Args())
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
		if outputGiven(fs) {
			format, err := out.check()
			if err != nil {
				return err
			}
			return printOutput(stdout(ctx), format, answer, nil)
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
	fs := newFlagSet(ctx, "catch-up", catchupSummary+
		"\n\nEvery component's policies are compared with the latest ones and only differences are sent."+
		"\npdp-ingest also runs one when it starts and every --catchup-interval (15m), first"+
		"\nrepairing the catalog from the PDP's full state (missed updates and removals); follow one"+
		"\nof those with --follow pdp-ingest-<n> (the request_id in pdp-ingest's log).", "")
	api := registerAPIFlags(fs)
	deployment := fs.String("deployment", "", "catch up only this deployment_id")
	reason := fs.String("reason", "", "why, for the logs")
	wait := fs.Bool("wait", true, "show the progress until every partition is done, then print a summary; --wait=false prints the accepted request at once")
	timeout := fs.Duration("wait-timeout", 10*time.Minute, "with --wait, give up waiting after this long (the catch-up goes on)")
	follow := fs.String("follow", "", "ask for nothing: show the progress of the catch-up with this request_id, e.g. pdp-ingest-<n> from pdp-ingest's log")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *follow != "" {
		if *deployment != "" || *reason != "" || fs.NArg() > 0 {
			return usageErrorf("--follow shows a catch-up already asked for; leave out --deployment, --reason and arguments")
		}
		if *timeout <= 0 {
			return usageErrorf("--wait-timeout %s: want a positive duration", *timeout)
		}
		return waitCatchup(ctx, api, *follow, *timeout)
	}
	if *wait && *timeout <= 0 {
		return usageErrorf("--wait-timeout %s: want a positive duration", *timeout)
	}
	if fs.NArg() > 0 {
		return usageErrorf("catch-up takes no arguments, got %q; use --deployment ID for one deployment", fs.Args())
	}
	req := wire.CatchupBody{DeploymentID: *deployment, Reason: *reason}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode catch-up request: %w", err)
	}
	answer, err := api.do(ctx, http.MethodPost, "/v1/catchup", body)
	if err != nil {
		return err
	}
	if !*wait {
		return printAnswer(ctx, answer)
	}
	var accepted wire.CatchupAccepted
	if err := json.Unmarshal(answer, &accepted); err != nil || accepted.RequestID == "" {
		return fmt.Errorf("the North API accepted the catch-up but named no request_id (%s); follow it with GET /v1/catchup/{request_id}", answer)
	}
	return waitCatchup(ctx, api, accepted.RequestID, *timeout)
}

// waitCatchup polls the catch-up's status, writing a progress line to
// stderr whenever it moves, until it is done (the summary goes to stdout)
// or the timeout passes.
func waitCatchup(ctx context.Context, api *apiClient, id string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		answer, err := api.do(ctx, http.MethodGet, "/v1/catchup/"+url.PathEscape(id), nil)
		if err != nil && ctx.Err() == nil {
			return err
		}
		var p wire.CatchupStatus
		if err == nil {
			if err := json.Unmarshal(answer, &p); err != nil {
				return fmt.Errorf("catch-up %s: the status answer is not JSON: %w", id, err)
			}
			catalog := ""
			if c := p.PDPIngest; c != nil {
				catalog = fmt.Sprintf("pdp-ingest (%d policies listed by the PDP, %d read again, %d removed), ", c.Listed, c.Differed, c.Removed)
				if c.RemovalWithheld != "" {
					catalog = fmt.Sprintf("pdp-ingest (%d policies listed by the PDP, %d read again, REMOVALS WITHHELD: %s), ", c.Listed, c.Differed, c.RemovalWithheld)
				}
			}
			line := fmt.Sprintf("catch-up %s: %smatcher %d/%d partitions (%d components compared, %d differed), consul-writer %d/%d (%d folders compared, %d written back), agent-notifier %d/%d (%d notifications run again)",
				id, catalog, p.Matcher.PartitionsDone, p.Partitions, p.Matcher.Compared, p.Matcher.Differed,
				p.ConsulWriter.PartitionsDone, p.Partitions, p.ConsulWriter.Compared, p.ConsulWriter.Differed,
				p.AgentNotifier.PartitionsDone, p.Partitions, p.AgentNotifier.Differed)
			if line != last {
				fmt.Fprintln(stderr(ctx), line)
				last = line
			}
			if p.Done {
				sum := map[string]any{
					"request_id": id, "components_compared": p.Matcher.Compared, "components_that_differed": p.Matcher.Differed,
					"folders_compared": p.ConsulWriter.Compared, "folders_written_back": p.ConsulWriter.Differed,
					"consul_keys_written": p.ConsulWriter.KeysWritten, "notifications_run_again": p.AgentNotifier.Differed,
					"notifications": "each component that differed is written to Consul and notified as any update, each folder written back is notified again, " +
						"and each failed notification is run again; see policyctl rollout or component status",
				}
				if c := p.PDPIngest; c != nil {
					sum["policies_listed_by_pdp"], sum["policies_read_again"], sum["policies_removed"] = c.Listed, c.Differed, c.Removed
					if c.RemovalWithheld != "" {
						sum["removals_withheld"] = c.RemovalWithheld
					}
				}
				summary, _ := json.MarshalIndent(sum, "", "  ")
				fmt.Fprintln(stdout(ctx), string(summary))
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("catch-up %s not done after %s (%s); it goes on: follow it with GET /v1/catchup/%s, or wait longer with --wait-timeout", id, timeout, last, id)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func runRollout(ctx context.Context, args []string) error {
	if action, ok := rolloutAction(args); ok {
		return runRolloutAction(ctx, action, rolloutActions[action], args[1:])
	}
	fs := newFlagSet(ctx, "rollout", rolloutSummary+
		"\n\nComponents should hold a policy when they name its policy_id or one of their filters"+
		"\nmatches its latest body; the lists of failed and pending components hold at most --limit ids."+
		"\nA version published with a plan also shows its staged rollout (docs/rollouts.md); act on it with"+
		"\npolicyctl rollout promote|pause|resume|abort POLICY_ID [--reason TEXT].", "POLICY_ID")
	api := registerAPIFlags(fs)
	limit := fs.Int("limit", 100, "most component ids listed as failed and as pending (0 to 10000)")
	out := registerOutputFlag(fs, outputJSON)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	format, err := out.check()
	if err != nil {
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
	return printOutput(stdout(ctx), format, answer, rolloutTable)
}
