package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/policy/policyapi"
)

// errRefused ends a dry run whose publish would be refused: exit 1, the
// reasons already printed.
var errRefused = &exitError{code: exitFailure}

// whatIfRows is how many components a what-if's table lists.
const whatIfRows = 200

// runWhatIf sends each file to path with ?dry_run=true and prints what
// publishing it would do. A push naming several policy_ids is asked about
// one policy_id at a time (the North API's dry run is about one policy).
func runWhatIf(ctx context.Context, api *apiClient, of *outputFlag, path string, files []string) error {
	format, err := of.check()
	if err != nil {
		return err
	}
	refused := false
	for _, file := range files {
		data, err := readJSONArg(ctx, file)
		if err != nil {
			return err
		}
		reqs := [][]byte{data}
		if path == "/v1/policies" {
			reqs = splitByPolicyID(data)
		}
		for _, req := range reqs {
			answer, err := api.do(ctx, http.MethodPost, path+"?dry_run=true", req)
			if err != nil {
				return err
			}
			var w policyapi.WhatIf
			if err := json.Unmarshal(answer, &w); err != nil {
				return fmt.Errorf("the North API answered something that is not a what-if: %w", err)
			}
			refused = refused || len(w.Refused) > 0
			if err := printOutput(stdout(ctx), format, answer, printWhatIf); err != nil {
				return err
			}
		}
	}
	if refused {
		return errRefused
	}
	return nil
}

// splitByPolicyID cuts an array of policy bodies into one array per
// policy_id, in the order each is first named; anything else (one body,
// or what does not parse, which the North API then refuses with its
// reason) is sent as it is.
func splitByPolicyID(data []byte) [][]byte {
	var list []json.RawMessage
	if !bytes.HasPrefix(bytes.TrimSpace(data), []byte("[")) || json.Unmarshal(data, &list) != nil || len(list) == 0 {
		return [][]byte{data}
	}
	var order []string
	groups := map[string][]json.RawMessage{}
	for _, b := range list {
		var head struct {
			PolicyName string `json:"policyName"`
		}
		_ = json.Unmarshal(b, &head)
		id, err := policy.PolicyID(head.PolicyName)
		if err != nil {
			id = "" // the North API says what is wrong with it
		}
		if _, ok := groups[id]; !ok {
			order = append(order, id)
		}
		groups[id] = append(groups[id], b)
	}
	out := make([][]byte, 0, len(order))
	for _, id := range order {
		b, _ := json.Marshal(groups[id])
		out = append(out, b)
	}
	return out
}

// printWhatIf draws a what-if: the policy and its versions, a row per
// component that would change, the counts, the diff, what would be
// refused and the notes.
func printWhatIf(w io.Writer, data []byte) error {
	var wi policyapi.WhatIf
	if err := json.Unmarshal(data, &wi); err != nil {
		return fmt.Errorf("the North API answered something that is not a what-if: %w", err)
	}
	loaded := "none loaded"
	if wi.LoadedVersion != nil {
		loaded = "loaded: " + *wi.LoadedVersion
	}
	fmt.Fprintf(w, "policy %s version %s (%s) — dry run, nothing was published\n", orDash(wi.PolicyID), orDash(wi.Version), loaded)
	if len(wi.Components) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "COMPONENT\tSERVICE_COMPONENT_NAME\tDEPLOYMENT\tCHANGE\tFROM_VERSION")
		for i, c := range wi.Components {
			if i == whatIfRows {
				fmt.Fprintf(tw, "… %d more (-o json lists every one)\t\t\t\t\n", len(wi.Components)-whatIfRows)
				break
			}
			from := "-"
			if c.FromVersion != nil {
				from = *c.FromVersion
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.ComponentID, c.ServiceComponentName, c.DeploymentID, c.Change, from)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	kinds := map[string]int{}
	for _, c := range wi.Components {
		kinds[c.Change]++
	}
	fmt.Fprintf(w, "%d would change (%d added, %d updated, %d removed), %d unchanged\n", wi.Count,
		kinds[policyapi.ChangeAdded], kinds[policyapi.ChangeUpdated], kinds[policyapi.ChangeRemoved], wi.Unchanged)
	if len(wi.Diff) > 0 {
		fmt.Fprintf(w, "diff against the loaded version:\n")
		for _, op := range wi.Diff {
			line := "  " + op.Op + " " + op.Path
			if len(op.Value) > 0 {
				line += " " + string(op.Value)
			}
			fmt.Fprintln(w, line)
		}
	}
	if len(wi.Refused) > 0 {
		fmt.Fprintln(w, "refused (publishing would change nothing):")
		for _, r := range wi.Refused {
			at := ""
			if r.Index != nil {
				at = fmt.Sprintf("policies[%d] ", *r.Index)
			}
			status := ""
			if r.Status != 0 {
				status = fmt.Sprintf(" %d", r.Status)
			}
			fmt.Fprintf(w, "  %sby %s%s: %s\n", at, r.By, status, r.Reason)
		}
	}
	if len(wi.Notes) > 0 {
		fmt.Fprintf(w, "notes:\n  %s\n", strings.Join(wi.Notes, "\n  "))
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// outputGiven reports whether -o (or --output) was given on the command
// line.
func outputGiven(fs *flag.FlagSet) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "o" || f.Name == "output" })
	return given
}
