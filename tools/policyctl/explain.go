package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"

	wire "github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/policy"
)

const (
	explainPolicyIDSummary = "print the policy_id of a full policyName, e.g. DCAE.Config_VM_MEMORY.222.xml; needs no server"
	explainLatestSummary   = "read a JSON array of policy bodies on stdin and print the latest and the errored one per policy_id; needs no server"
	explainMatchSummary    = "read {\"policy_filter\": {...}, \"policy_body\": {...}} on stdin and print whether it matches, and why; needs no server"
	explainPolicySummary   = "print the version of a policy_id in force (GET /policy_latest) and, when the PDP's latest version is errored, that version's error"
)

func init() {
	register(command{name: "explain policy-id", summary: explainPolicyIDSummary, run: runExplainPolicyID})
	register(command{name: "explain latest", summary: explainLatestSummary, run: runExplainLatest})
	register(command{name: "explain match", summary: explainMatchSummary, run: runExplainMatch})
	register(command{name: "explain policy", summary: explainPolicySummary, run: runExplainPolicy})
}

// printJSON writes v as indented JSON on stdout.
func printJSON(ctx context.Context, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode the result as JSON: %w", err)
	}
	_, err := stdout(ctx).Write(buf.Bytes())
	return err
}

// readStdin reads all of stdin, refusing an empty one with an example.
func readStdin(ctx context.Context, example string) ([]byte, error) {
	data, err := io.ReadAll(commandInput(ctx))
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("stdin is empty; pipe JSON into it, e.g. echo '%s' | policyctl ...", example)
	}
	return data, nil
}

func runExplainPolicyID(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "explain policy-id", explainPolicyIDSummary, "POLICY_NAME")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("explain policy-id takes one POLICY_NAME, got %d arguments", fs.NArg())
	}
	id, err := policy.PolicyID(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("%w; a policyName is <policy_id>.<version>.<ext>, e.g. DCAE.Config_VM_MEMORY.222.xml", err)
	}
	return printJSON(ctx, map[string]string{"policy_id": id})
}

// latestResult is what explain latest prints.
type latestResult struct {
	Latest  map[string]policy.Body `json:"latest"`
	Errored map[string]policy.Body `json:"errored"`
}

func runExplainLatest(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "explain latest", explainLatestSummary+
		"\n\nThe latest body of a policy_id has the greatest integer policyVersion; when it is invalid"+
		"\n(policyConfigStatus not CONFIG_RETRIEVED, or an empty config) it is errored and no older"+
		"\nversion replaces it. Why each one is errored or skipped is written on stderr.", "< bodies.json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("explain latest reads the bodies on stdin and takes no arguments, got %q", fs.Args())
	}
	data, err := readStdin(ctx, `[{"policyName": "A.Config_X.1.xml", "policyVersion": "1", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"k": "v"}}]`)
	if err != nil {
		return err
	}
	bodies, err := policy.DecodeBodies(data)
	if err != nil {
		return fmt.Errorf("stdin: %w; give a JSON array of policy_body objects as /getConfig returns", err)
	}
	sel := policy.SelectLatest(bodies)
	w := stderr(ctx)
	ids := make([]string, 0, len(sel.Reasons))
	for id := range sel.Reasons {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Fprintf(w, "errored %s: %v\n", id, sel.Reasons[id])
	}
	for _, sk := range sel.Skipped {
		fmt.Fprintf(w, "skipped body %d (%q version %q): %s\n", sk.Index, sk.PolicyName, sk.PolicyVersion, sk.Reason)
	}
	return printJSON(ctx, latestResult{Latest: sel.Latest, Errored: sel.Errored})
}

// matchInput is what explain match reads.
type matchInput struct {
	PolicyFilter *filterInput    `json:"policy_filter"`
	PolicyBody   json.RawMessage `json:"policy_body"`
}

// filterInput is a policy filter as components carry it.
type filterInput struct {
	FilterID         string          `json:"filter_id"`
	PolicyName       string          `json:"policyName"`
	ConfigName       string          `json:"configName"`
	OnapName         string          `json:"onapName"`
	ConfigAttributes json.RawMessage `json:"configAttributes"`
	Unique           bool            `json:"unique"`
}

// matchResult is what explain match prints.
type matchResult struct {
	Matches bool     `json:"matches"`
	Reasons []string `json:"reasons"`
}

const matchExample = `{"policy_filter": {"policyName": "DCAE.Config_.*", "onapName": "DCAE"}, "policy_body": {"policyName": "DCAE.Config_VM.1.xml", "matchingConditions": {"ONAPName": "DCAE"}}}`

func runExplainMatch(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "explain match", explainMatchSummary+
		"\n\nThe filter matches like the PDP's /getConfig: policyName is a regular expression matched from"+
		"\nthe start of the full policyName (or equal to the policy_id); onapName, configName and every"+
		"\nconfigAttributes key must equal the body's matchingConditions.", "< input.json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("explain match reads its input on stdin and takes no arguments, got %q", fs.Args())
	}
	data, err := readStdin(ctx, matchExample)
	if err != nil {
		return err
	}
	var in matchInput
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return fmt.Errorf("stdin is not the input explain match expects: %s; give %s", jsonErrorAt(data, err), matchExample)
	}
	if in.PolicyFilter == nil {
		return fmt.Errorf("stdin has no policy_filter; give %s", matchExample)
	}
	if len(bytes.TrimSpace(in.PolicyBody)) == 0 {
		return fmt.Errorf("stdin has no policy_body; give %s", matchExample)
	}
	body, err := policy.DecodeBody(in.PolicyBody)
	if err != nil {
		return fmt.Errorf("policy_body: %w", err)
	}
	f := in.PolicyFilter
	attrs, err := policy.DecodeConfigAttributes(string(f.ConfigAttributes))
	if err != nil {
		return fmt.Errorf("policy_filter: configAttributes must be a JSON object: %w", err)
	}
	cf, err := policy.CompileFilter(policy.Filter{
		PolicyName: f.PolicyName, ConfigName: f.ConfigName, OnapName: f.OnapName,
		ConfigAttributes: attrs, Unique: f.Unique,
	})
	if err != nil {
		return fmt.Errorf("policy_filter: %w; the North API refuses a component with this filter", err)
	}
	ok, reasons := cf.Match(body)
	if reasons == nil {
		reasons = []string{}
	}
	return printJSON(ctx, matchResult{Matches: ok, Reasons: reasons})
}

// policyInForce is what explain policy prints: the North API's
// /policy_latest answer, and in_force_version, the policyVersion of the
// body in force.
type policyInForce struct {
	wire.LatestPolicy
	InForceVersion string `json:"in_force_version"`
}

func runExplainPolicy(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "explain policy", explainPolicySummary+
		"\n\nWhen the PDP's latest version of the policy is invalid (status ERRORED), the North API keeps"+
		"\nthe last valid version in force: the body printed is that one, and stderr says which version"+
		"\nis errored and why. Fix the policy at the PDP and announce it again.", "POLICY_ID")
	api := registerAPIFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return usageErrorf("explain policy takes one POLICY_ID, got %d arguments", fs.NArg())
	}
	answer, err := api.do(ctx, http.MethodGet, "/policy_latest/"+url.PathEscape(fs.Arg(0)), nil)
	if err != nil {
		return err
	}
	var p policyInForce
	if err := json.Unmarshal(answer, &p); err != nil {
		return fmt.Errorf("the North API's answer is not a policy: %v", err)
	}
	var body struct {
		PolicyVersion json.RawMessage `json:"policyVersion"`
	}
	_ = json.Unmarshal(p.PolicyBody, &body)
	p.InForceVersion = string(bytes.Trim(body.PolicyVersion, `"`))
	if p.Status != "" {
		fmt.Fprintf(stderr(ctx), "%s %s: %s; version %s, the last valid one, stays in force\n", p.Status, p.PolicyID, p.Error, p.InForceVersion)
	}
	return printJSON(ctx, p)
}
