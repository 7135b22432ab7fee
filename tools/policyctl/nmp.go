package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"

	wire "github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/runtime"
)

const (
	nmpListSummary     = "list the node management policies (NMPs) of an org"
	nmpNewSummary      = "print an NMP template to fill in, as 'hzn exchange nm new' does; nmp publish takes it with its comments"
	nmpPublishSummary  = "create or replace an NMP from a JSON file (- for stdin); --dry-run shows the nodes it applies to and the conflicts"
	nmpRemoveSummary   = "remove an NMP"
	nmpEnableSummary   = "enable an NMP: the nodes it applies to start upgrading"
	nmpDisableSummary  = "disable an NMP: nodes that have not started do not start"
	nmpStatusSummary   = "show an NMP's rollout: nodes per state, the failing nodes, whether it is paused"
	nmpNodesSummary    = "list the nodes an NMP applies to and where it would be ignored for a conflict (--versions: which agent version each runs); without NAME, the org's nodes with their last state, filtered and paged"
	nmpResumeSummary   = "resume a rollout paused by its failure threshold (failures so far no longer count)"
	nmpRollbackSummary = "order the nodes an NMP upgraded back to their previous version; nodes it did not upgrade do not start"
)

func init() {
	register(command{name: "nmp list", summary: nmpListSummary, run: runNMPList})
	register(command{name: "nmp new", summary: nmpNewSummary, run: runNMPNew})
	register(command{name: "nmp publish", summary: nmpPublishSummary, run: runNMPPublish})
	register(command{name: "nmp remove", summary: nmpRemoveSummary, run: nmpOne("remove", nmpRemoveSummary, http.MethodDelete, "")})
	register(command{name: "nmp enable", summary: nmpEnableSummary, run: runNMPEnable})
	register(command{name: "nmp disable", summary: nmpDisableSummary, run: nmpOne("disable", nmpDisableSummary, http.MethodPost, "/disable")})
	register(command{name: "nmp resume", summary: nmpResumeSummary, run: nmpOne("resume", nmpResumeSummary, http.MethodPost, "/resume")})
	register(command{name: "nmp rollback", summary: nmpRollbackSummary, run: nmpOne("rollback", nmpRollbackSummary, http.MethodPost, "/rollback")})
	register(command{name: "nmp status", summary: nmpStatusSummary, run: runNMPStatus})
	register(command{name: "nmp nodes", summary: nmpNodesSummary, run: runNMPNodes})
}

// nmpTemplate is what `nmp new` prints: every field, with its meaning.
const nmpTemplate = `{
  "label": "",                           /* (optional) a short description */
  "description": "",                     /* (optional) a longer description */
  "constraints": [                       /* nodes using a node policy are selected by these (and their own constraints on "properties") */
    "myproperty == myvalue"
  ],
  "properties": [                        /* (optional) properties node constraints may test */
    {"name": "", "value": null}
  ],
  "patterns": [                          /* (optional) nodes using one of these patterns (org/name; "*": any pattern) */
    ""
  ],
  "enabled": false,                      /* a disabled NMP selects no node for an upgrade */
  "agentUpgradePolicy": {
    "atLeastVersion": "current",         /* the version to reach (1.2.3), or "current": the newest package on the hub */
    "start": "now",                      /* RFC3339 time to start, or "now" */
    "duration": 0,                       /* seconds: each node starts at a time of its own in [start, start+duration] */
    "allowDowngrade": false,             /* the version may be older than a node's */
    "fromVersions": ""                   /* (optional) the versions a node may upgrade from, e.g. ">=1.2.0 <2.0.0"; "": any */
  },
  "failureThreshold": {                  /* (optional) pause the rollout when this many, or this ratio of started nodes, failed */
    "count": 0,
    "ratio": 0,
    "minStarted": 0
  }
}
`

// stripComments drops the /* ... */ comments of a template from `nmp
// new` (outside strings), so that it publishes as printed once filled in.
func stripComments(b []byte) []byte {
	out := make([]byte, 0, len(b))
	inString, escaped := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			out = append(out, c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
			out = append(out, c)
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			end := bytes.Index(b[i+2:], []byte("*/"))
			if end < 0 {
				return append(out, b[i:]...) // unterminated: let the JSON check say where
			}
			i += end + 3
		default:
			out = append(out, c)
		}
	}
	return out
}

func registerOrgFlag(fs *flag.FlagSet) *string {
	return fs.String("org", runtime.EnvOr("PF_ORG", ""), "the org (env PF_ORG)")
}

func nmpPath(org, name string) string {
	return "/v1/orgs/" + url.PathEscape(org) + "/nmps/" + url.PathEscape(name)
}

func needOrg(org string) error {
	if org == "" {
		return usageErrorf("give the org with --org or PF_ORG")
	}
	return nil
}

func runNMPNew(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "nmp new", nmpNewSummary+"\n\nFill it in and remove the fields you do not need; 'nmp publish' drops the /* */ comments.", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	_, err := fmt.Fprint(stdout(ctx), nmpTemplate)
	return err
}

type nmpItem struct {
	Name string `json:"name"`
	NMP  struct {
		Label              string `json:"label"`
		Enabled            bool   `json:"enabled"`
		AgentUpgradePolicy *struct {
			AtLeastVersion string `json:"atLeastVersion"`
			Start          string `json:"start"`
			Duration       *int64 `json:"duration"`
		} `json:"agentUpgradePolicy"`
		LastUpdated string `json:"lastUpdated"`
	} `json:"nmp"`
}

func runNMPList(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "nmp list", nmpListSummary, "")
	api := registerAPIFlags(fs)
	org := registerOrgFlag(fs)
	out := registerOutputFlag(fs, outputTable).withJSONFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	format, err := out.check()
	if err != nil {
		return err
	}
	if err := needOrg(*org); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageErrorf("nmp list takes no arguments, got %q", fs.Args())
	}
	data, err := api.do(ctx, http.MethodGet, "/v1/orgs/"+url.PathEscape(*org)+"/nmps", nil)
	if err != nil {
		return err
	}
	return printOutput(stdout(ctx), format, data, nmpListTable)
}

// nmpListTable draws the answer of GET /v1/orgs/{org}/nmps.
func nmpListTable(w io.Writer, data []byte) error {
	var ans struct {
		NMPs []nmpItem `json:"nmps"`
	}
	if err := json.Unmarshal(data, &ans); err != nil {
		return fmt.Errorf("the North API's answer is not the list expected: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tENABLED\tVERSION\tSTART\tDURATION\tLAST UPDATED\tLABEL")
	for _, p := range ans.NMPs {
		v, s, d := "-", "-", "-"
		if u := p.NMP.AgentUpgradePolicy; u != nil {
			v, s = u.AtLeastVersion, u.Start
			if u.Duration != nil {
				d = fmt.Sprintf("%ds", *u.Duration)
			}
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.NMP.Enabled, v, s, d, p.NMP.LastUpdated, p.NMP.Label)
	}
	return tw.Flush()
}

// publishAnswer is what publishing (or a dry run) answers.
type publishAnswer struct {
	Nodes     []string          `json:"nodes"`
	Conflicts map[string]string `json:"conflicts"`
	DryRun    bool              `json:"dryRun"`
}

func printPublish(ctx context.Context, org, name string, data []byte) error {
	var a publishAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		return printAnswer(ctx, data)
	}
	w := stdout(ctx)
	verb := "published"
	if a.DryRun {
		verb = "would be published (dry run, nothing stored)"
	}
	fmt.Fprintf(w, "NMP %s/%s %s; it applies to %d node(s)\n", org, name, verb, len(a.Nodes))
	for _, n := range a.Nodes {
		fmt.Fprintf(w, "  %s\n", n)
	}
	if len(a.Conflicts) > 0 {
		keys := make([]string, 0, len(a.Conflicts))
		for k := range a.Conflicts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(w, "It is ignored on %d node(s) where a conflicting NMP is already enacted:\n", len(keys))
		for _, k := range keys {
			fmt.Fprintf(w, "  %s (enacted: %s)\n", k, a.Conflicts[k])
		}
	}
	return nil
}

// confirmHint turns the API's refusal of an unconfirmed all-node NMP into
// what to type.
func confirmHint(err error) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusConflict && strings.Contains(ae.reason, "confirmAllNodes") {
		return fmt.Errorf("%w\nIf every such node should upgrade, run the command again with --yes-all-nodes", err)
	}
	return err
}

func runNMPPublish(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "nmp publish", nmpPublishSummary+
		"\n\nAn enabled NMP with no constraints, or with the pattern \"*\", reaches every node of its kind and is refused"+
		"\nunless --yes-all-nodes confirms it. 'policyctl nmp new' prints a template.", "NAME FILE|-")
	api := registerAPIFlags(fs)
	org := registerOrgFlag(fs)
	yes := fs.Bool("yes-all-nodes", false, "confirm an enabled NMP that applies to every node of its kind")
	dry := fs.Bool("dry-run", false, "show the nodes it applies to and the conflicts; store nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := needOrg(*org); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usageErrorf("nmp publish takes NAME and FILE (or - for stdin), got %d arguments", fs.NArg())
	}
	name := fs.Arg(0)
	raw, err := readFileArg(ctx, fs.Arg(1))
	if err != nil {
		return err
	}
	data, err := checkJSON(fs.Arg(1), stripComments(raw))
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s must hold one JSON object (the NMP): %w", fs.Arg(1), err)
	}
	if *yes {
		doc["confirmAllNodes"] = json.RawMessage("true")
	}
	body, _ := json.Marshal(doc)
	path := nmpPath(*org, name)
	if *dry {
		path += "?dryRun=true"
	}
	ans, err := api.do(ctx, http.MethodPut, path, body)
	if err != nil {
		return confirmHint(err)
	}
	return printPublish(ctx, *org, name, ans)
}

func runNMPEnable(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "nmp enable", nmpEnableSummary, "NAME")
	api := registerAPIFlags(fs)
	org := registerOrgFlag(fs)
	yes := fs.Bool("yes-all-nodes", false, "confirm an NMP that applies to every node of its kind")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := needOrg(*org); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("nmp enable takes the NMP's NAME, got %d arguments", fs.NArg())
	}
	body := []byte(`{}`)
	if *yes {
		body = []byte(`{"confirmAllNodes": true}`)
	}
	ans, err := api.do(ctx, http.MethodPost, nmpPath(*org, fs.Arg(0))+"/enable", body)
	if err != nil {
		return confirmHint(err)
	}
	return printPublish(ctx, *org, fs.Arg(0), ans)
}

// parseNMPCommand parses the flags of a command on one NMP (more adds the
// command's own) and answers the API client, the org and the NMP's name.
func parseNMPCommand(ctx context.Context, verb, summary string, args []string, more func(*flag.FlagSet)) (*apiClient, string, string, error) {
	fs := newFlagSet(ctx, "nmp "+verb, summary, "NAME")
	api := registerAPIFlags(fs)
	org := registerOrgFlag(fs)
	if more != nil {
		more(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return nil, "", "", err
	}
	if err := needOrg(*org); err != nil {
		return nil, "", "", err
	}
	if fs.NArg() != 1 {
		return nil, "", "", usageErrorf("nmp %s takes the NMP's NAME, got %d arguments", verb, fs.NArg())
	}
	return api, *org, fs.Arg(0), nil
}

// runNMPNodes is `nmp nodes NAME` (an NMP's nodes) or `nmp nodes` (the
// org's nodes, GET /v1/orgs/{org}/nodes, whose filters and paging are
// flags here).
func runNMPNodes(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "nmp nodes", nmpNodesSummary, "[NAME]")
	api := registerAPIFlags(fs)
	org := registerOrgFlag(fs)
	versions := fs.Bool("versions", false, "with NAME: print each node with the agent version it runs (the same as -o table)")
	out := registerOutputFlag(fs, outputJSON)
	// The org's nodes: the query parameters of GET /v1/orgs/{org}/nodes.
	filters := []struct{ flag, param, usage string }{
		{"software-version", "software_version", "without NAME: only the nodes that registered this agent version"},
		{"status", "status", "without NAME: only the nodes whose last report is in this state (waiting: none)"},
		{"pattern", "pattern", "without NAME: only the nodes of this pattern (name or org/name)"},
		{"property", "property", "without NAME: only the nodes whose property name equals value (name=value)"},
		{"limit", "limit", "without NAME: nodes a page (the API's default when not given)"},
		{"page-token", "page_token", "without NAME: the page after the one that answered this nextPageToken"},
	}
	vals := make([]*string, len(filters))
	for i, f := range filters {
		vals[i] = fs.String(f.flag, "", f.usage)
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	format, err := out.check()
	if err != nil {
		return err
	}
	if err := needOrg(*org); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		q := url.Values{}
		for i, f := range filters {
			if *vals[i] != "" {
				q.Set(f.param, *vals[i])
			}
		}
		path := "/v1/orgs/" + url.PathEscape(*org) + "/nodes"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		ans, err := api.do(ctx, http.MethodGet, path, nil)
		if err != nil {
			return err
		}
		return printOutput(stdout(ctx), format, ans, orgNodesTable)
	}
	if fs.NArg() != 1 {
		return usageErrorf("nmp nodes takes an NMP's NAME, or none for the org's nodes, got %d arguments", fs.NArg())
	}
	for i, f := range filters {
		if *vals[i] != "" {
			return usageErrorf("--%s lists the org's nodes: give it without an NMP's NAME", f.flag)
		}
	}
	if *versions {
		format = outputTable
	}
	name := fs.Arg(0)
	ans, err := api.do(ctx, http.MethodGet, nmpPath(*org, name)+"/nodes", nil)
	if err != nil {
		return err
	}
	return printOutput(stdout(ctx), format, ans, func(w io.Writer, ans []byte) error { return nmpNodesTable(w, *org, ans) })
}

// orgNodesTable draws the answer of GET /v1/orgs/{org}/nodes: each node
// with its version, pattern and last state, then how to ask for the next
// page.
func orgNodesTable(w io.Writer, ans []byte) error {
	var on wire.OrgNodes
	if err := json.Unmarshal(ans, &on); err != nil {
		return fmt.Errorf("the North API's answer is not the node list expected: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tVERSION\tPATTERN\tSTATUS\tPOLICY\tERROR")
	for _, n := range on.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, n.SoftwareVersion, n.Pattern, n.Status, n.Policy, n.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if on.NextPageToken != "" {
		fmt.Fprintf(w, "More nodes: the same command with --page-token %s\n", on.NextPageToken)
	}
	return nil
}

// nmpNodesTable draws the answer of GET .../nmps/{name}/nodes: each node
// with its agent version and why it is ignored, if it is.
func nmpNodesTable(w io.Writer, org string, ans []byte) error {
	var nn wire.NMPNodes
	if err := json.Unmarshal(ans, &nn); err != nil {
		return fmt.Errorf("the North API's answer is not the node list expected: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tVERSION\tIGNORED FOR")
	for _, n := range nn.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", n, nn.Versions[n], nn.Conflicts[org+"/"+n])
	}
	return tw.Flush()
}

// nmpOne is a command on one NMP that prints the API's answer.
func nmpOne(verb, summary, method, suffix string) func(ctx context.Context, args []string) error {
	return func(ctx context.Context, args []string) error {
		api, org, name, err := parseNMPCommand(ctx, verb, summary, args, nil)
		if err != nil {
			return err
		}
		var body []byte
		if method == http.MethodPost {
			body = []byte(`{}`)
		}
		ans, err := api.do(ctx, method, nmpPath(org, name)+suffix, body)
		if err != nil {
			return err
		}
		return printAnswer(ctx, ans)
	}
}

func runNMPStatus(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "nmp status", nmpStatusSummary, "NAME")
	api := registerAPIFlags(fs)
	org := registerOrgFlag(fs)
	out := registerOutputFlag(fs, outputTable).withJSONFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	format, err := out.check()
	if err != nil {
		return err
	}
	if err := needOrg(*org); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("nmp status takes the NMP's NAME, got %d arguments", fs.NArg())
	}
	data, err := api.do(ctx, http.MethodGet, nmpPath(*org, fs.Arg(0))+"/status", nil)
	if err != nil {
		return err
	}
	name := *org + "/" + fs.Arg(0)
	return printOutput(stdout(ctx), format, data, func(w io.Writer, data []byte) error { return nmpStatusTable(w, name, data) })
}

// nmpStatusTable draws the answer of GET .../nmps/{name}/status.
func nmpStatusTable(w io.Writer, name string, data []byte) error {
	var st wire.NMPStatus
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("the North API's answer is not the status expected: %w", err)
	}
	fmt.Fprintf(w, "NMP %s: enabled %v, %d node(s)\n", name, st.Enabled, st.Nodes)
	if st.Rollout.Paused {
		fmt.Fprintf(w, "PAUSED: %s\n", st.Rollout.Reason)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tNODES")
	states := make([]string, 0, len(st.States))
	for s := range st.States {
		states = append(states, s)
	}
	sort.Strings(states)
	for _, s := range states {
		fmt.Fprintf(tw, "%s\t%d\n", s, st.States[s])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Failing) > 0 {
		fmt.Fprintln(w, "Failing nodes:")
		for _, f := range st.Failing {
			fmt.Fprintf(w, "  %s\n", failingLine(f))
		}
	}
	if len(st.PrecheckFailed) > 0 {
		fmt.Fprintln(w, "Nodes that cannot take the upgrade (precheck failed; not counted as failures):")
		for _, f := range st.PrecheckFailed {
			fmt.Fprintf(w, "  %s\n", precheckLine(f))
		}
	}
	if len(st.RolledBack) > 0 {
		fmt.Fprintln(w, "Nodes rolled back on order:")
		for _, f := range st.RolledBack {
			fmt.Fprintf(w, "  %s: back to %s\n", f.Node, f.Version)
		}
	}
	return nil
}

// failingLine is one failing node: its state, the version that failed
// when the report names one (a failed download does not), and the error.
func failingLine(f wire.NodeState) string {
	line := f.Node + ": " + f.Status
	if f.FailedVersion != "" {
		line += " (version " + f.FailedVersion + ")"
	}
	if f.Error != "" {
		line += ": " + f.Error
	}
	return line
}

// precheckLine is one node whose precheck failed: the version it runs
// (when reported) and the agent's reason, which does not repeat it.
func precheckLine(f wire.NodeState) string {
	line := f.Node
	if f.Version != "" {
		line += " (running " + f.Version + ")"
	}
	if f.Error != "" {
		line += ": " + f.Error
	}
	return line
}
