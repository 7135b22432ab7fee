package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

// The typical component, the one pfbench's catch-up measures Consul and
// the stages with (tools/pfbench, catchupComponent), with one change: its
// second filter is one every component has, so that one policy reaches
// the whole fleet. Component i is in deployment i/10, is its own
// service_component_name, is notified by webhook, and holds five
// policies of bodyBytes: three by id (of byID), one by the filter of its
// family (of families) and the fleet's policy by the filter every
// component has.
const (
	byID        = 40
	families    = 10
	perComp     = 5
	fleetPolicy = "CS.Fleet"
	deployment  = 10 // components per deployment
)

// body is a policy's canonical body, as pdp-ingest writes it to the
// catalog, and its header.
type body struct {
	json   string
	header policy.Header
}

// makeBody is version v of policy id, about size bytes once canonical.
// Its config is hex digits drawn from the policy's name, so that it
// compresses about as a body of varied values does (by about half), not
// as a run of one letter (Consul's snapshots and Kafka's batches are
// compressed).
func makeBody(id string, v int64, size int) (body, error) {
	name := fmt.Sprintf("%s.%d.xml", id, v)
	want := max(size-200, 0)
	var pad []byte
	for block := 0; len(pad) < want; block++ {
		sum := sha256.Sum256([]byte(name + "/" + strconv.Itoa(block)))
		pad = hex.AppendEncode(pad, sum[:])
	}
	raw := fmt.Sprintf(`{"policyName":%q,"policyVersion":"%d","policyConfigStatus":"CONFIG_RETRIEVED","type":"JSON",`+
		`"matchingConditions":{"ONAPName":"DCAE","ConfigName":"capsim"},"config":{"pad":"%s"}}`,
		name, v, pad[:want])
	c, err := policy.Check([]byte(raw))
	if err != nil {
		return body{}, fmt.Errorf("body of %s version %d: %w", id, v, err)
	}
	return body{json: string(c.JSON), header: c.Header()}, nil
}

// catalogIDs are the workload's policy ids: the by-id ones, the
// families' and the fleet's.
func catalogIDs() []string {
	var ids []string
	for k := range byID {
		ids = append(ids, fmt.Sprintf("CS.Config_p%02d", k))
	}
	for k := range families {
		ids = append(ids, fmt.Sprintf("CS.Filt_f%d", k))
	}
	return append(ids, fleetPolicy)
}

func componentID(i int) string  { return fmt.Sprintf("cs-%08d", i) }
func deploymentID(i int) string { return fmt.Sprintf("csd-%07d", i/deployment) }

// component is component i's record of deploy.components.
func component(i int, at time.Time) *events.Component {
	id := componentID(i)
	c := &events.Component{ComponentID: id, DeploymentID: deploymentID(i), ServiceComponentName: id,
		Tenant: "capsim", Config: "{}", Generation: 1, UpdatedAt: at,
		Notify: events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: "http://127.0.0.1:8099/hook/" + id, TimeoutMs: 10000}}
	for _, k := range wantedByID(i) {
		c.PolicyIDs = append(c.PolicyIDs, fmt.Sprintf("CS.Config_p%02d", k))
	}
	f := i % families
	c.PolicyFilters = []events.PolicyFilter{
		{FilterID: fmt.Sprintf("f%d", f), PolicyName: fmt.Sprintf(`CS\.Filt_f%d\..*`, f), OnapName: "DCAE"},
		{FilterID: "fleet", PolicyName: `CS\.Fleet\..*`, OnapName: "DCAE"},
	}
	return c
}

func wantedByID(i int) []int { return []int{i % byID, (i + 13) % byID, (i + 27) % byID} }

// holds are the policy ids component i holds, sorted.
func holds(i int) []string {
	ids := []string{fleetPolicy, fmt.Sprintf("CS.Filt_f%d", i%families)}
	for _, k := range wantedByID(i) {
		ids = append(ids, fmt.Sprintf("CS.Config_p%02d", k))
	}
	slices.Sort(ids)
	return ids
}
