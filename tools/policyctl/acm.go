package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	wire "github.com/policyflow/policyflow/services/api"
)

const (
	participantsListSummary = "list automation-composition participants with their replicas (state, last heartbeat) through the North API"
	participantsShowSummary = "show one participant and its replicas"
	participantsSyncSummary = "have replica-sync write a participant's state (every participant's without PARTICIPANT_ID) to acm.sync again"
	acmPrimeSummary         = "prime a composition definition on a participant: --elements FILE|- holds [{id, type, properties}]"
	acmDeploySummary        = "deploy an instance's elements with their properties on a participant (any of its replicas takes it)"
	acmUpdateSummary        = "update an instance's elements' properties on a participant"
	acmUndeploySummary      = "undeploy an instance (its elements as the replicas hold them, or --elements)"
	acmStatusSummary        = "show an instance's elements (or, with --composition and no INSTANCE_ID, a composition): state, properties, revision, replica"
)

func init() {
	register(command{name: "participants list", summary: participantsListSummary, run: runParticipantsList})
	register(command{name: "participants show", summary: participantsShowSummary, run: runParticipantsShow})
	register(command{name: "participants sync", summary: participantsSyncSummary, run: runParticipantsSync})
	register(command{name: "acm prime", summary: acmPrimeSummary, run: func(ctx context.Context, args []string) error {
		return runACMOperation(ctx, args, "PRIME", "acm prime", acmPrimeSummary)
	}})
	register(command{name: "acm deploy", summary: acmDeploySummary, run: func(ctx context.Context, args []string) error {
		return runACMOperation(ctx, args, "DEPLOY", "acm deploy", acmDeploySummary)
	}})
	register(command{name: "acm update", summary: acmUpdateSummary, run: func(ctx context.Context, args []string) error {
		return runACMOperation(ctx, args, "UPDATE", "acm update", acmUpdateSummary)
	}})
	register(command{name: "acm undeploy", summary: acmUndeploySummary, run: func(ctx context.Context, args []string) error {
		return runACMOperation(ctx, args, "UNDEPLOY", "acm undeploy", acmUndeploySummary)
	}})
	register(command{name: "acm status", summary: acmStatusSummary, run: runACMStatus})
}

func runParticipantsList(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "participants list", participantsListSummary, "")
	api := registerAPIFlags(fs)
	out := registerOutputFlag(fs, outputJSON)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	format, err := out.check()
	if err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageErrorf("participants list takes no arguments, got %q", fs.Args())
	}
	answer, err := api.do(ctx, http.MethodGet, "/v2/participants", nil)
	if err != nil {
		return err
	}
	return printOutput(stdout(ctx), format, answer, nil)
}

func runParticipantsShow(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "participants show", participantsShowSummary, "PARTICIPANT_ID")
	api := registerAPIFlags(fs)
	out := registerOutputFlag(fs, outputJSON)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	format, err := out.check()
	if err != nil {
		return err
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return usageErrorf("participants show takes one PARTICIPANT_ID, got %d arguments", fs.NArg())
	}
	answer, err := api.do(ctx, http.MethodGet, "/v2/participants/"+url.PathEscape(fs.Arg(0)), nil)
	if err != nil {
		return err
	}
	return printOutput(stdout(ctx), format, answer, nil)
}

func runParticipantsSync(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "participants sync", participantsSyncSummary, "[PARTICIPANT_ID]")
	api := registerAPIFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	path := "/v2/participants/sync"
	switch {
	case fs.NArg() == 1 && fs.Arg(0) != "":
		path = "/v2/participants/" + url.PathEscape(fs.Arg(0)) + "/sync"
	case fs.NArg() > 1 || fs.NArg() == 1:
		return usageErrorf("participants sync takes at most one PARTICIPANT_ID, got %q", fs.Args())
	}
	answer, err := api.do(ctx, http.MethodPut, path, nil)
	if err != nil {
		return err
	}
	return printAnswer(ctx, answer)
}

const elementsExample = `[{"id": "e1", "type": "org.policyflow.ConsulKV", "properties": {"key": "value"}}]`

// readElements reads --elements: a JSON array of elements.
func readElements(ctx context.Context, arg string) ([]wire.OperationElement, error) {
	data, err := readJSONArg(ctx, arg)
	if err != nil {
		return nil, err
	}
	var els []wire.OperationElement
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&els); err != nil {
		return nil, fmt.Errorf("--elements %s must hold a JSON array of elements such as %s: %w", arg, elementsExample, err)
	}
	if len(els) == 0 {
		return nil, fmt.Errorf("--elements %s holds no element; give at least one, e.g. %s", arg, elementsExample)
	}
	return els, nil
}

// runACMOperation sends one operation: PARTICIPANT_ID then COMPOSITION_ID
// (PRIME) or INSTANCE_ID (with --composition).
func runACMOperation(ctx context.Context, args []string, kind, name, summary string) error {
	usage := "[--composition COMPOSITION_ID] --elements FILE|- PARTICIPANT_ID INSTANCE_ID"
	switch kind {
	case "PRIME":
		usage = "--elements FILE|- PARTICIPANT_ID COMPOSITION_ID"
	case "UNDEPLOY":
		usage = "[--composition COMPOSITION_ID] [--elements FILE|-] PARTICIPANT_ID INSTANCE_ID"
	}
	fs := newFlagSet(ctx, name, summary, usage)
	api := registerAPIFlags(fs)
	composition := fs.String("composition", "", "the composition definition the instance is of (default: the one the participant's replicas hold the instance under)")
	elements := fs.String("elements", "", "FILE (or - for stdin) holding the elements as a JSON array, e.g. "+elementsExample)
	timeoutMs := fs.Int64("operation-timeout-ms", 0, "how long the participant may take before the operation is TIMEOUT (0: the participant's default)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 || fs.Arg(0) == "" || fs.Arg(1) == "" {
		return usageErrorf("%s takes %s, got %d arguments", name, usage, fs.NArg())
	}
	req := wire.OperationRequest{Kind: kind, TimeoutMs: *timeoutMs}
	if kind == "PRIME" {
		req.CompositionID = fs.Arg(1)
	} else {
		// Without --composition the North API takes it from the
		// instance the participant holds.
		req.CompositionID, req.InstanceID = *composition, fs.Arg(1)
	}
	switch {
	case *elements != "":
		els, err := readElements(ctx, *elements)
		if err != nil {
			return err
		}
		req.Elements = els
	case kind != "UNDEPLOY":
		return usageErrorf("%s needs --elements FILE|-, a JSON array such as %s", name, elementsExample)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode the request: %w", err)
	}
	answer, err := api.do(ctx, http.MethodPost, "/v2/participants/"+url.PathEscape(fs.Arg(0))+"/operations", body)
	if err != nil {
		return err
	}
	return printAnswer(ctx, answer)
}

func runACMStatus(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "acm status", acmStatusSummary, "PARTICIPANT_ID INSTANCE_ID | --composition COMPOSITION_ID PARTICIPANT_ID")
	api := registerAPIFlags(fs)
	composition := fs.String("composition", "", "show this composition definition instead of an instance")
	out := registerOutputFlag(fs, outputJSON)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	format, err := out.check()
	if err != nil {
		return err
	}
	var path string
	switch {
	case fs.NArg() == 2 && *composition == "":
		path = "/v2/participants/" + url.PathEscape(fs.Arg(0)) + "/instances/" + url.PathEscape(fs.Arg(1))
	case fs.NArg() == 1 && *composition != "":
		path = "/v2/participants/" + url.PathEscape(fs.Arg(0)) + "/compositions/" + url.PathEscape(*composition)
	default:
		return usageErrorf("acm status takes PARTICIPANT_ID INSTANCE_ID, or --composition COMPOSITION_ID PARTICIPANT_ID; got %q", fs.Args())
	}
	answer, err := api.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	return printOutput(stdout(ctx), format, answer, nil)
}
