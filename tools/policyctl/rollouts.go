package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
)

// The actions on a staged rollout (docs/rollouts.md).
var rolloutActions = map[string]string{
	"promote": "start the next step of a policy's staged rollout now",
	"pause":   "pause a policy's staged rollout: no further step starts",
	"resume":  "resume a paused staged rollout (earlier failures no longer count against max_failed)",
	"abort":   "abort a staged rollout: every component that got the version goes back to the previous one, as a new revision",
}

// rolloutAction says whether the arguments of rollout name an action
// (rollout promote POLICY_ID ...) rather than a policy to show: the
// command registry lets no command name start another's, so the actions
// are rollout's first argument (a policy named like an action is shown
// with rollout -- NAME).
func rolloutAction(args []string) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	_, ok := rolloutActions[args[0]]
	return args[0], ok
}

func runRolloutAction(ctx context.Context, action, summary string, args []string) error {
	fs := newFlagSet(ctx, "rollout "+action, summary+
		"\n\nIt prints the rollout after the change; policyctl rollout POLICY_ID follows its progress.", "POLICY_ID")
	api := registerAPIFlags(fs)
	reason := fs.String("reason", "", "why, recorded with the change")
	out := registerOutputFlag(fs, outputTable)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	format, err := out.check()
	if err != nil {
		return err
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return usageErrorf("rollout %s takes one POLICY_ID, got %d arguments", action, fs.NArg())
	}
	var body []byte
	if *reason != "" {
		body, _ = json.Marshal(map[string]string{"reason": *reason})
	}
	answer, err := api.do(ctx, http.MethodPost, "/v1/policies/"+url.PathEscape(fs.Arg(0))+"/rollout/"+action, body)
	if err != nil {
		return err
	}
	return printOutput(stdout(ctx), format, answer, func(w io.Writer, data []byte) error {
		var s stagedView
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("the North API's answer is not a rollout: %w", err)
		}
		return s.table(w)
	})
}

// rolloutTable draws the answer of GET /v1/policies/{policy_id}/rollout:
// where the version is, then its staged rollout when it has one.
func rolloutTable(w io.Writer, data []byte) error {
	var r struct {
		PolicyID   string      `json:"policy_id"`
		Version    string      `json:"version"`
		Components int         `json:"components"`
		InConsul   int         `json:"in_consul"`
		Notified   int         `json:"notified"`
		Failed     int         `json:"failed"`
		Pending    int         `json:"pending"`
		Staged     *stagedView `json:"staged"`
	}
	if err := json.Unmarshal(data, &r); err != nil || r.PolicyID == "" {
		return printTable(w, data) // an answer of another shape: the generic table
	}
	fmt.Fprintf(w, "%s version %s: %d components should hold it, %d in Consul, %d notified, %d failed, %d pending\n",
		r.PolicyID, r.Version, r.Components, r.InConsul, r.Notified, r.Failed, r.Pending)
	if r.Staged == nil {
		return nil
	}
	return r.Staged.table(w)
}

// stagedView is the staged rollout of an answer, for its table.
type stagedView struct {
	RolloutID       string `json:"rollout_id"`
	Version         string `json:"version"`
	PreviousVersion string `json:"previous_version"`
	State           string `json:"state"`
	Reason          string `json:"reason"`
	CurrentStep     int    `json:"current_step"`
	Plan            struct {
		Auto      bool  `json:"auto"`
		PauseS    int64 `json:"pause_s"`
		MaxFailed int64 `json:"max_failed"`
	} `json:"plan"`
	Steps []struct {
		Step       int     `json:"step"`
		Share      float64 `json:"share"`
		Components int64   `json:"components"`
		Notified   int64   `json:"notified"`
		Failed     int64   `json:"failed"`
	} `json:"steps"`
}

// table draws the rollout: a line of state, then one row per step, the
// current one marked.
func (s stagedView) table(w io.Writer) error {
	prev := s.PreviousVersion
	if prev == "" {
		prev = "none"
	}
	fmt.Fprintf(w, "version %s (previous %s): %s at step %d of %d; auto %t, pause %ds, max failed %d\n",
		s.Version, prev, strings.ToUpper(s.State), s.CurrentStep, len(s.Steps), s.Plan.Auto, s.Plan.PauseS, s.Plan.MaxFailed)
	if s.Reason != "" {
		fmt.Fprintf(w, "%s\n", s.Reason)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tSTEP\tSHARE\tCOMPONENTS\tNOTIFIED\tFAILED")
	for _, st := range s.Steps {
		mark := ""
		if st.Step == s.CurrentStep {
			mark = ">"
		}
		fmt.Fprintf(tw, "%s\t%d\t%g%%\t%d\t%d\t%d\n", mark, st.Step, st.Share*100, st.Components, st.Notified, st.Failed)
	}
	return tw.Flush()
}
