package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// workload is the data the stage-alone runs start from. Component i
// belongs to deployment i/perDeployment and wants policy
// BENCH.Config_p<d mod policies> of its deployment d by policy_id; it also
// carries a service filter (policyName BENCH.Svc<i mod 500>_.*), so the
// matcher's index holds one filter per component. The changes update the
// first `changes` policies to version 2; each reaches the components of
// one deployment.
type workload struct {
	Components    int    `json:"components"`
	PerDeployment int    `json:"components_per_deployment"`
	Policies      int    `json:"policies"`
	Changes       int    `json:"changes"`
	BodyBytes     int    `json:"policy_body_bytes"`
	Notify        string `json:"notify"` // NONE or WEBHOOK
	webhook       string
}

func (w workload) deployments() int { return (w.Components + w.PerDeployment - 1) / w.PerDeployment }

func policyIDOf(k int) string { return fmt.Sprintf("BENCH.Config_p%05d", k) }

// body is a policy_body of about size bytes (the config pads it).
func body(id, version string, size int, marker string) string {
	b := map[string]any{
		policy.FieldPolicyName:    id + "." + version + ".xml",
		policy.FieldPolicyVersion: version,
		policy.FieldConfigStatus:  "CONFIG_RETRIEVED",
		policy.FieldConfigMessage: "Config Retrieved! ",
		policy.FieldType:          "JSON",
		policy.FieldMatchingConditions: map[string]any{
			policy.MatchingONAPName: "DCAE", policy.MatchingConfigName: "bench",
		},
		policy.FieldConfig:             map[string]any{"marker": marker, "pad": ""},
		policy.FieldResponseAttributes: map[string]any{},
		policy.FieldProperty:           nil,
	}
	raw, _ := json.Marshal(b)
	if pad := size - len(raw); pad > 0 {
		b[policy.FieldConfig] = map[string]any{"marker": marker, "pad": strings.Repeat("x", pad)}
		raw, _ = json.Marshal(b)
	}
	return string(raw)
}

// version is policy id at version as pdp-ingest takes it in: checked, its
// catalog entry and its header.
func (w workload) version(id, version, marker string, now time.Time) (*events.PolicyCatalogEntry, policy.Header, error) {
	c, err := policy.Check([]byte(body(id, version, w.BodyBytes, marker)))
	if err != nil {
		return nil, policy.Header{}, fmt.Errorf("bench policy %s version %s: %w", id, version, err)
	}
	h := c.Header()
	return &events.PolicyCatalogEntry{PolicyID: id, PolicyName: c.PolicyName, PolicyVersion: c.PolicyVersion,
		Body: string(c.JSON), BodyHash: h.BodyHash, Status: events.StatusValid, UpdatedAt: now}, h, nil
}

func (w workload) component(i int) *events.Component {
	d := i / w.PerDeployment
	id := fmt.Sprintf("c-%06d", i)
	c := &events.Component{
		ComponentID:          id,
		DeploymentID:         fmt.Sprintf("d-%05d", d),
		ServiceComponentName: "scn-" + id,
		Tenant:               "bench",
		PolicyIDs:            []string{policyIDOf(d % w.Policies)},
		PolicyFilters: []events.PolicyFilter{{
			FilterID: "svc", PolicyName: fmt.Sprintf("BENCH.Svc%03d_.*", i%500), OnapName: "DCAE",
			ConfigAttributes: fmt.Sprintf(`{"key1": "value%d"}`, i%5),
		}},
		Notify:     events.NotifyTarget{Kind: events.NotifyNone},
		Config:     `{"app":"bench"}`,
		Generation: 1,
		UpdatedAt:  time.Now().UTC(),
	}
	if w.Notify == events.NotifyWebhook {
		c.Notify = events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: w.webhook + "/" + id, TimeoutMs: 10000}
	}
	return c
}

// producer writes records the way policyflow's writers do (Kafka's key
// hash, explicit partitions when pinned).
func producer(k runtime.Kafka) (*kgo.Client, error) {
	opts, err := k.ClientOpts()
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(append(opts, kgo.RecordPartitioner(runtime.Partitioner()),
		kgo.ProducerBatchMaxBytes(topology.MaxRecordBytes), kgo.MaxBufferedRecords(50_000), kgo.ClientID("pfbench"))...)
}

// produceAll writes recs and fails on the first error.
func produceAll(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) error {
	const chunk = 20_000
	for len(recs) > 0 {
		n := min(chunk, len(recs))
		if err := cl.ProduceSync(ctx, recs[:n]...).FirstErr(); err != nil {
			return err
		}
		recs = recs[n:]
	}
	return nil
}

// encoder makes records of events for the topics of k.
func encoder(k runtime.Kafka, codec *events.Codec) func(topic, key string, ev events.Event) (*kgo.Record, error) {
	return func(topic, key string, ev events.Event) (*kgo.Record, error) {
		b, err := codec.Encode(ev)
		if err != nil {
			return nil, err
		}
		return &kgo.Record{Topic: k.Topic(topic), Key: []byte(key), Value: b}, nil
	}
}

// load writes the catalog (version 1 of every policy), the components and
// the version-2 changes (each copied to every partition, as pdp-ingest
// does). The catalog entries of version 2 come with loadUpdates.
func (w workload) load(ctx context.Context, k runtime.Kafka, codec *events.Codec, partitions int32) error {
	cl, err := producer(k)
	if err != nil {
		return err
	}
	defer cl.Close()
	enc := encoder(k, codec)
	now := time.Now().UTC()
	recs, err := w.catalogRecords(enc, w.Policies, "1", now)
	if err != nil {
		return err
	}
	for i := 0; i < w.Components; i++ {
		c := w.component(i)
		r, err := enc(topology.DeployComponents, c.ComponentID, c)
		if err != nil {
			return err
		}
		recs = append(recs, r)
	}
	if err := produceAll(ctx, cl, recs); err != nil {
		return fmt.Errorf("load catalog and components: %w", err)
	}
	recs = recs[:0]
	v1, v2 := "1", "2"
	for c := 0; c < w.Changes; c++ {
		id := policyIDOf(c)
		_, h, err := w.version(id, "2", "v2", now)
		if err != nil {
			return err
		}
		ch := &events.PolicyChange{ChangeID: fmt.Sprintf("bench-%d", c), PolicyID: id, Action: events.ActionUpdated,
			OldVersion: &v1, NewVersion: &v2, PolicyName: h.PolicyName, MatchingConditions: h.MatchingConditions, BodyHash: h.BodyHash,
			ChangedAt: now}
		for p := int32(0); p < partitions; p++ {
			r, err := enc(topology.PolicyChanges, id, ch)
			if err != nil {
				return err
			}
			runtime.Pin(r, p)
			recs = append(recs, r)
		}
	}
	if err := produceAll(ctx, cl, recs); err != nil {
		return fmt.Errorf("load policy changes: %w", err)
	}
	return nil
}

// catalogRecords are the policy.catalog records of version of the first n
// policies.
func (w workload) catalogRecords(enc func(string, string, events.Event) (*kgo.Record, error), n int, version string, now time.Time) ([]*kgo.Record, error) {
	recs := make([]*kgo.Record, 0, n)
	for p := 0; p < n; p++ {
		id := policyIDOf(p)
		e, _, err := w.version(id, version, "v"+version, now)
		if err != nil {
			return nil, err
		}
		r, err := enc(topology.PolicyCatalog, id, e)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// loadUpdates writes the catalog entries of the version-2 changes.
// pdp-ingest writes each with its change, in one transaction; here they
// come once the matcher has handled the changes, since the matcher's view
// of the catalog, read when it starts, would already hold them. The
// segmenter fills the bodies the matches name in from them.
func (w workload) loadUpdates(ctx context.Context, k runtime.Kafka, codec *events.Codec) error {
	cl, err := producer(k)
	if err != nil {
		return err
	}
	defer cl.Close()
	recs, err := w.catalogRecords(encoder(k, codec), w.Changes, "2", time.Now().UTC())
	if err != nil {
		return err
	}
	if err := produceAll(ctx, cl, recs); err != nil {
		return fmt.Errorf("load the catalog entries of the changes: %w", err)
	}
	return nil
}
