package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/policyflow/policyflow/services/placement"
)

const (
	dcApplySummary  = "store a datacenter model from a JSON file (- for stdin): PUT /v1/datacenters/{id}, checked here first"
	dcGetSummary    = "show one datacenter model"
	dcListSummary   = "list the datacenter models (GET /v1/datacenters)"
	dcDeleteSummary = "delete a datacenter model"
	placeSummary    = "propose a placement for the resources of a template or deployment request file (- for stdin): POST /v1/placements"
)

func init() {
	register(command{name: "dc apply", summary: dcApplySummary, run: runDCApply})
	register(command{name: "dc get", summary: dcGetSummary, run: runDCGet})
	register(command{name: "dc list", summary: dcListSummary, run: runDCList})
	register(command{name: "dc delete", summary: dcDeleteSummary, run: runDCDelete})
	register(command{name: "place", summary: placeSummary, run: runPlace})
}

func runDCApply(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "dc apply", dcApplySummary+
		"\n\nThe file is the model: {\"id\", \"levels\": [{\"name\", \"within\": [coarser levels]}], \"dimensions\": [...],"+
		"\n\"location\": [{\"id\", \"level\", \"parent\", \"capacity\" (leaves)}], \"network\": [{\"id\", \"parent\", \"bandwidth\"}]}"+
		"\n(services/placement/README.md). Every problem is listed before anything is sent.", "FILE|-")
	api := registerAPIFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("dc apply takes one FILE (or - for stdin), got %d arguments", fs.NArg())
	}
	data, err := readJSONArg(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	m, err := placement.ParseDatacenter(data)
	if err != nil {
		var inv *placement.Invalid
		if errors.As(err, &inv) {
			var b bytes.Buffer
			fmt.Fprintf(&b, "%s is not a valid datacenter model; fix:", fs.Arg(0))
			for _, p := range inv.Problems {
				fmt.Fprintf(&b, "\n  %s", p)
			}
			if inv.More > 0 {
				fmt.Fprintf(&b, "\n  and %d more problems", inv.More)
			}
			return &exitError{code: exitUsage, err: errors.New(b.String())}
		}
		return err
	}
	answer, err := api.do(ctx, http.MethodPut, "/v1/datacenters/"+url.PathEscape(m.ID()), data)
	if err != nil {
		return err
	}
	return printAnswer(ctx, answer)
}

// runDCIDCommand runs a command on one datacenter id.
func runDCIDCommand(ctx context.Context, args []string, name, summary, method string) error {
	return runOneIDCommand(ctx, args, name, summary, "DATACENTER_ID", func(api *apiClient, id string) ([]byte, error) {
		return api.do(ctx, method, "/v1/datacenters/"+url.PathEscape(id), nil)
	})
}

func runDCGet(ctx context.Context, args []string) error {
	return runDCIDCommand(ctx, args, "dc get", dcGetSummary, http.MethodGet)
}

func runDCDelete(ctx context.Context, args []string) error {
	return runDCIDCommand(ctx, args, "dc delete", dcDeleteSummary, http.MethodDelete)
}

func runDCList(ctx context.Context, args []string) error {
	return runListCommand(ctx, args, "dc list", dcListSummary, "/v1/datacenters")
}

// templateFields are the fields of a deployment request that POST
// /v1/placements takes.
var templateFields = []string{"datacenter", "resources", "groups", "relationships", "placement_policies", "placement", "current_placement", "heat_template_version", "description"}

func runPlace(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "place", placeSummary+
		"\n\nThe file holds datacenter, resources, groups, relationships and placement_policies (a deployment request's"+
		"\nplacement fields; its other fields are left out of the question), in the flat syntax or the seed's (a Heat template"+
		"\nwith Proposal A's groups, as written: give the datacenter with --dc). Resources it already places stay where they are."+
		"\nPrints the proposal; with --request, the file itself with its placement filled in, ready for policyctl deploy."+
		"\nExit status 1 when no placement meets the hard policies together (the reason names them).", "FILE|-")
	api := registerAPIFlags(fs)
	asRequest := fs.Bool("request", false, "print the file with \"placement\" set to the proposal instead of the proposal")
	dc := fs.String("dc", "", "the datacenter to place on, when the file names none (a Heat template as written)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("place takes one FILE (or - for stdin), got %d arguments", fs.NArg())
	}
	data, err := readJSONArg(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return usageErrorf("%s must hold a JSON object (a template or a deployment request): %v", fs.Arg(0), err)
	}
	question := map[string]json.RawMessage{}
	for _, f := range templateFields {
		if v, ok := doc[f]; ok {
			question[f] = v
		}
	}
	if *dc != "" {
		named, _ := json.Marshal(*dc)
		if given, ok := question["datacenter"]; ok && string(given) != string(named) {
			return usageErrorf("%s names datacenter %s and --dc %s: give one", fs.Arg(0), given, named)
		}
		question["datacenter"], doc["datacenter"] = named, named
	}
	if _, ok := question["datacenter"]; !ok {
		return usageErrorf("%s names no datacenter: add \"datacenter\": \"<id>\" or give --dc <id> (policyctl dc list shows them)", fs.Arg(0))
	}
	body, err := json.Marshal(question)
	if err != nil {
		return err
	}
	answer, err := api.do(ctx, http.MethodPost, "/v1/placements", body)
	if err != nil {
		return err
	}
	if !*asRequest {
		return printAnswer(ctx, answer)
	}
	var p struct {
		Placement json.RawMessage `json:"placement"`
	}
	if err := json.Unmarshal(answer, &p); err != nil || len(p.Placement) == 0 {
		return fmt.Errorf("the North API answered something that is not a placement: %s", answer)
	}
	doc["placement"] = p.Placement
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return printAnswer(ctx, out)
}
