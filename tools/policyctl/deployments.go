package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

const (
	deploySummary          = "submit a deployment request from a JSON file (- for stdin) for admission; --dry-run shows the verdict and the mutated request without deploying"
	appPolicyListSummary   = "list the tenant application policies (GET /policies)"
	appPolicyGetSummary    = "show one application policy with its objectModel"
	appPolicyCreateSummary = "create an application policy from a JSON file (- for stdin): description, name, tenantIds, mode, priority, objectModel"
	appPolicyUpdateSummary = "replace an application policy from a JSON file (- for stdin)"
	appPolicyDeleteSummary = "delete an application policy"
	appPolicyAuditSummary  = "list the admitted deployments an application policy would deny now"
	undeploySummary        = "delete a deployment: release its capacity, instances and names, and remove its components (DELETE /v1/deployments/{id})"
	appPolicyReportSummary = "show an application policy's audit report as the admission stage keeps it (GET /policies/{id}/report)"
)

func init() {
	register(command{name: "deploy", summary: deploySummary, run: runDeploy})
	register(command{name: "undeploy", summary: undeploySummary, run: runUndeploy})
	register(command{name: "app-policy list", summary: appPolicyListSummary, run: runAppPolicyList})
	register(command{name: "app-policy get", summary: appPolicyGetSummary, run: runAppPolicyGet})
	register(command{name: "app-policy create", summary: appPolicyCreateSummary, run: runAppPolicyCreate})
	register(command{name: "app-policy update", summary: appPolicyUpdateSummary, run: runAppPolicyUpdate})
	register(command{name: "app-policy delete", summary: appPolicyDeleteSummary, run: runAppPolicyDelete})
	register(command{name: "app-policy violations", summary: appPolicyAuditSummary, run: runAppPolicyViolations})
	register(command{name: "app-policy report", summary: appPolicyReportSummary, run: runAppPolicyReport})
}

// verdictHead is what deploy reads of an answer.
type verdictHead struct {
	RequestID    string `json:"request_id"`
	DeploymentID string `json:"deployment_id"`
	Admitted     *bool  `json:"admitted"`
	Violations   []struct {
		Message string `json:"message"`
	} `json:"violations"`
}

// errDenied ends deploy with status 1 after the verdict was printed.
var errDenied = &exitError{code: exitFailure}

func runDeploy(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "deploy", deploySummary+
		"\n\nThe file is the deployment request: deployment_id, tenant (a tenant token's own when left out), environment and"+
		"\napplications [{name, package, class, inherits, instances, flavor, image, properties, scripts, component}]."+
		"\nWithout --dry-run it waits up to --wait for the admission stage's verdict and prints it (0: print the request id and go)."+
		"\nExit status 1 when the deployment is denied.", "FILE|-")
	api := registerAPIFlags(fs)
	dry := fs.Bool("dry-run", false, "show the verdict and the mutated request; nothing is deployed")
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for the verdict (0: do not wait)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("deploy takes one FILE (or - for stdin), got %d arguments", fs.NArg())
	}
	if *wait < 0 {
		return usageErrorf("--wait %s is negative", *wait)
	}
	data, err := readJSONArg(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	path := "/v1/deployments"
	if *dry {
		path += "?dry_run=true"
	}
	answer, err := api.do(ctx, http.MethodPost, path, data)
	if err != nil {
		return err
	}
	var head verdictHead
	if err := json.Unmarshal(answer, &head); err != nil {
		return fmt.Errorf("the North API answered something that is not a verdict: %w", err)
	}
	if *dry || *wait == 0 {
		if err := printAnswer(ctx, answer); err != nil {
			return err
		}
		return deniedErr(ctx, head)
	}
	deadline := time.Now().Add(*wait)
	for {
		got, err := api.do(ctx, http.MethodGet, "/v1/deployments/"+url.PathEscape(head.DeploymentID), nil)
		var ae *apiError
		switch {
		case err == nil:
			var v verdictHead
			if json.Unmarshal(got, &v) == nil && v.RequestID == head.RequestID {
				if err := printAnswer(ctx, got); err != nil {
					return err
				}
				return deniedErr(ctx, v)
			}
		case errors.As(err, &ae) && ae.status == http.StatusNotFound:
		default:
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("request %s of deployment %s is queued, but no verdict came within %s; see it later with GET /v1/deployments/%s, or give a longer --wait",
				head.RequestID, head.DeploymentID, *wait, head.DeploymentID)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deniedErr says on stderr why a verdict denies, and makes policyctl exit 1.
func deniedErr(ctx context.Context, v verdictHead) error {
	if v.Admitted == nil || *v.Admitted {
		return nil
	}
	fmt.Fprintf(stderr(ctx), "deployment %s is denied:\n", v.DeploymentID)
	for _, f := range v.Violations {
		fmt.Fprintf(stderr(ctx), "  %s\n", f.Message)
	}
	return errDenied
}

func runAppPolicyList(ctx context.Context, args []string) error {
	return runListCommand(ctx, args, "app-policy list", appPolicyListSummary, "/policies")
}

// runPolicyIDCommand runs a command on one application policy id.
func runPolicyIDCommand(ctx context.Context, args []string, name, summary, method, suffix string) error {
	return runOneIDCommand(ctx, args, name, summary, "POLICY_ID", func(api *apiClient, id string) ([]byte, error) {
		return api.do(ctx, method, "/policies/"+url.PathEscape(id)+suffix, nil)
	})
}

func runAppPolicyGet(ctx context.Context, args []string) error {
	return runPolicyIDCommand(ctx, args, "app-policy get", appPolicyGetSummary, http.MethodGet, "")
}

func runAppPolicyDelete(ctx context.Context, args []string) error {
	return runPolicyIDCommand(ctx, args, "app-policy delete", appPolicyDeleteSummary, http.MethodDelete, "")
}

func runAppPolicyViolations(ctx context.Context, args []string) error {
	return runPolicyIDCommand(ctx, args, "app-policy violations", appPolicyAuditSummary, http.MethodGet, "/violations")
}

func runAppPolicyReport(ctx context.Context, args []string) error {
	return runPolicyIDCommand(ctx, args, "app-policy report", appPolicyReportSummary, http.MethodGet, "/report")
}

const appPolicyFileHelp = "\n\nThe file is the policy as JSON: {\"description\": ..., \"name\": ..., \"tenantIds\": [...] (null or left out: every tenant)," +
	"\n\"mode\": \"enforce\"|\"audit\", \"priority\": N (default 0; mutations run lowest first, so the highest wins; ties by creation time)," +
	"\n\"objectModel\": {<parameters>, \"?\": {\"type\": <policy kind>}}}."

func runAppPolicyCreate(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "app-policy create", appPolicyCreateSummary+appPolicyFileHelp, "FILE|-")
	api := registerAPIFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("app-policy create takes one FILE (or - for stdin), got %d arguments", fs.NArg())
	}
	data, err := readJSONArg(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	answer, err := api.do(ctx, http.MethodPost, "/policies", data)
	if err != nil {
		return err
	}
	return printAnswer(ctx, answer)
}

func runAppPolicyUpdate(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "app-policy update", appPolicyUpdateSummary+appPolicyFileHelp, "POLICY_ID FILE|-")
	api := registerAPIFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 || fs.Arg(0) == "" {
		return usageErrorf("app-policy update takes POLICY_ID and one FILE (or - for stdin), got %d arguments", fs.NArg())
	}
	data, err := readJSONArg(ctx, fs.Arg(1))
	if err != nil {
		return err
	}
	answer, err := api.do(ctx, http.MethodPut, "/policies/"+url.PathEscape(fs.Arg(0)), data)
	if err != nil {
		return err
	}
	return printAnswer(ctx, answer)
}

func runUndeploy(ctx context.Context, args []string) error {
	return runOneIDCommand(ctx, args, "undeploy", undeploySummary, "DEPLOYMENT_ID", func(api *apiClient, id string) ([]byte, error) {
		return api.do(ctx, http.MethodDelete, "/v1/deployments/"+url.PathEscape(id), nil)
	})
}
