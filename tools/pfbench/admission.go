package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// admissionWork is the admission section's workload: policies spread
// evenly over tenants (every kind, enforce and audit, a tenth of them
// global), and deployment requests of three applications each, tenant by
// tenant in turn.
type admissionWork struct {
	Policies int `json:"policies"`
	Tenants  int `json:"tenants"`
	Requests int `json:"requests"`
	Reps     int `json:"latency_reps"`
}

// AdmissionRun is the admission section of the report.
type AdmissionRun struct {
	Work admissionWork `json:"workload"`
	// Alone is the admission stage alone on a backlog of requests, with
	// its pass-through ceilings: verdicts/s against the transactional
	// copy of the same records.
	Alone    StageRun `json:"alone"`
	Admitted int      `json:"admitted"`
	Denied   int      `json:"denied"`
	// LatencyMs is from a request written to deploy.requests to its
	// verdict read from admission.verdicts (read committed), one request
	// at a time, with a running admission process.
	LatencyMs Latencies `json:"latency_ms"`
	// DecideMs is admit.Evaluate alone, in this process, on the same
	// policies: the decision without Kafka.
	DecideMs Latencies `json:"decide_ms"`
}

// admissionPolicy is policy i of n over tenants tenants.
func admissionPolicy(i, tenants int) *events.AppPolicy {
	tenant := fmt.Sprintf("tenant-%03d", i%tenants)
	var model string
	switch i % 10 {
	case 0:
		model = `{"maxFlavor":"m1.large","approvedApplications":["com.bench.Analytics"],"?":{"type":"io.policyflow.admission.FlavorLimit"}}`
	case 1:
		model = fmt.Sprintf(`{"applications":["com.bench.Forbidden%d"],"namespaces":["org.untrusted%d"],"?":{"type":"io.policyflow.admission.Blacklist"}}`, i, i)
	case 2:
		model = `{"maxInstances":8,"?":{"type":"io.policyflow.admission.InstanceQuota"}}`
	case 3:
		model = `{"application":"io.murano.Application","?":{"type":"io.policyflow.admission.RequiredApplication"}}`
	case 4:
		model = `{"field":"image","value":"ubuntu-24.04-promoted","from":"ubuntu-22.04","applications":["io.murano.apps.linux.Instance"],"?":{"type":"io.policyflow.admission.DefaultOverride"}}`
	case 5:
		model = fmt.Sprintf(`{"script":"harden-%d.sh","?":{"type":"io.policyflow.admission.ScriptInjection"}}`, i)
	case 6:
		model = `{"maxInstances":12,"?":{"type":"io.policyflow.admission.InstanceNotice"}}`
	case 7:
		model = `{"validations":[{"expression":"app.instances <= 6 || app.flavor == 'm1.small'","message":"more than 6 instances only on m1.small"},{"expression":"request.applications.all(a, a.name.size() < 64)","message":"short names","scope":"request"}],"?":{"type":"io.policyflow.admission.CEL"}}`
	case 8:
		model = `{"mutations":[{"field":"properties.owner","expression":"request.tenant + '/' + app.name"}],"?":{"type":"io.policyflow.admission.CEL"}}`
	default:
		model = `{"maxFlavor":"m1.medium","?":{"type":"io.policyflow.admission.FlavorLimit"}}`
	}
	p := &events.AppPolicy{PolicyID: fmt.Sprintf("bench-policy-%05d", i), ObjectModel: model, Mode: admit.ModeEnforce,
		Created: time.Now().UTC(), Updated: time.Now().UTC()}
	switch {
	case i%10 == 9:
		p.Mode = admit.ModeAudit // the tightest flavor limit only reports
	case i%97 == 0:
		// global: applies to every tenant
	default:
		p.TenantIDs = &[]string{tenant}
	}
	return p
}

// admissionRequest is request i: three applications, one of which a
// tenth of the time asks for a flavor its tenant's limit denies.
func admissionRequest(i, tenants int, id string) *admit.Request {
	flavor := "m1.medium"
	if i%10 == 0 {
		flavor = "m1.xlarge"
	}
	return &admit.Request{
		DeploymentID: id, Tenant: fmt.Sprintf("tenant-%03d", i%tenants), Environment: "bench",
		Applications: []admit.Application{
			{Name: "web", Package: "io.murano.apps.apache", Class: "io.murano.apps.apache.ApacheHttpServer",
				Inherits: []string{"io.murano.apps.linux.Instance", "io.murano.Application"}, Instances: 3, Flavor: flavor, Image: "ubuntu-22.04",
				Properties: map[string]any{"port": 8080}},
			{Name: "db", Class: "com.bench.Postgres", Inherits: []string{"io.murano.databases.SqlDatabase", "io.murano.Application"}, Instances: 2, Flavor: "m1.large"},
			{Name: "an", Class: "com.bench.Analytics", Inherits: []string{"io.murano.Application"}, Instances: 1, Flavor: "m1.xlarge"},
		},
	}
}

func requestRecord(enc func(string, string, events.Event) (*kgo.Record, error), r *admit.Request, requestID string) (*kgo.Record, error) {
	body, err := r.JSON()
	if err != nil {
		return nil, err
	}
	return enc(topology.DeployRequests, topology.DeployRequestsKey, &events.DeploymentRequest{
		RequestID: requestID, DeploymentID: r.DeploymentID, Tenant: r.Tenant, Request: string(body), Action: events.ActionDeploy,
		SubmittedBy: "pfbench", SubmittedAt: time.Now().UTC(),
	})
}

// admission measures the admission stage: alone on a backlog, against
// its pass-through ceilings, then one request at a time.
func (b *bench) admission(ctx context.Context, w admissionWork, progress func(string, ...any)) (AdmissionRun, error) {
	run := AdmissionRun{Work: w}
	enc := encoder(b.kafka, b.codec)
	var recs []*kgo.Record
	compiled := make([]*admit.Compiled, 0, w.Policies)
	for i := 0; i < w.Policies; i++ {
		p := admissionPolicy(i, w.Tenants)
		c, err := admit.CompilePolicy(p)
		if err != nil {
			return run, fmt.Errorf("admission: bench policy %s: %w", p.PolicyID, err)
		}
		compiled = append(compiled, c)
		r, err := enc(topology.AppPolicies, p.PolicyID, p)
		if err != nil {
			return run, err
		}
		recs = append(recs, r)
	}
	for i := 0; i < w.Requests; i++ {
		r, err := requestRecord(enc, admissionRequest(i, w.Tenants, fmt.Sprintf("bench-dep-%06d", i)), fmt.Sprintf("bench-req-%06d", i))
		if err != nil {
			return run, err
		}
		// Old requests: the stage decides the backlog without catching
		// up with app.policies before each one (admission.ClockSkew).
		r.Timestamp = time.Now().Add(-time.Hour)
		recs = append(recs, r)
	}
	if err := produceAll(ctx, b.prod, recs); err != nil {
		return run, fmt.Errorf("admission: load: %w", err)
	}

	// The decision alone, in this process.
	var decide []time.Duration
	for i := 0; i < max(w.Reps, 1000); i++ {
		req := admissionRequest(i, w.Tenants, fmt.Sprintf("decide-%d", i))
		if err := req.Normalize(); err != nil {
			return run, err
		}
		t0 := time.Now()
		if _, err := admit.Evaluate(context.Background(), req, compiled); err != nil {
			return run, err
		}
		decide = append(decide, time.Since(t0))
	}
	run.DecideMs = summarize(decide)

	progress("admission alone on %s: %d requests, %d policies over %d tenants", topology.DeployRequests, w.Requests, w.Policies, w.Tenants)
	alone, in, _, err := b.runAlone(ctx, topology.StageAdmission, topology.DeployRequests, 1)
	// No target: a request writes up to seven records for the one it
	// reads, so a one-for-one copy is no fair bar to reach; the ratio is
	// reported to follow it from run to run.
	alone.Stage = topology.StageAdmission
	if err != nil {
		return run, err
	}
	if err := runtime.ReadPartitions(ctx, b.kafka, topology.AdmissionVerdicts, nil, func(r *kgo.Record) error {
		v, err := b.codec.Decode(ctx, r.Value)
		if err != nil {
			return err
		}
		if av, ok := v.(*events.AdmissionVerdict); ok {
			alone.OutputRecords++
			if av.Admitted {
				run.Admitted++
			} else {
				run.Denied++
			}
		}
		return nil
	}); err != nil {
		return run, fmt.Errorf("admission: read the verdicts: %w", err)
	}
	progress("admission ceilings: pass-through of %d-byte records", in.meanBytes())
	if err := b.ceilings(ctx, &alone, in); err != nil {
		return run, fmt.Errorf("admission: %w", err)
	}
	run.Alone = alone
	progress("admission: %.0f verdicts/s, ratio %.4f", alone.RecordsPerSec, alone.Ratio)

	progress("admission latency: %d requests one at a time", w.Reps)
	lat, err := b.admissionLatency(ctx, w, enc)
	if err != nil {
		return run, err
	}
	run.LatencyMs = lat
	return run, nil
}

// admissionLatency runs an admission process and times requests written
// one at a time until each one's verdict is read.
func (b *bench) admissionLatency(ctx context.Context, w admissionWork, enc func(string, string, events.Event) (*kgo.Record, error)) (Latencies, error) {
	p, err := startStageLogged(ctx, b.binDir, b.memberLog(topology.StageAdmission+".latency", 0, 1), topology.StageAdmission, b.kafka, b.consulAddr)
	if err != nil {
		return Latencies{}, err
	}
	defer stopAll([]*stageProc{p})
	opts, err := b.kafka.ClientOpts()
	if err != nil {
		return Latencies{}, err
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(b.kafka.Topic(topology.AdmissionVerdicts)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(10*time.Millisecond))...)
	if err != nil {
		return Latencies{}, err
	}
	defer cl.Close()
	wait := func(requestID string, deadline time.Time) error {
		for {
			if err := p.exited(); err != nil {
				return err
			}
			pctx, cancel := context.WithDeadline(ctx, deadline)
			fs := cl.PollFetches(pctx)
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			found := false
			fs.EachRecord(func(r *kgo.Record) {
				var v events.AdmissionVerdict
				if b.codec.DecodeInto(ctx, r.Value, &v) == nil && v.RequestID == requestID {
					found = true
				}
			})
			if found {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no verdict on %s within %s; see %s", requestID, b.timeout, p.logFile)
			}
		}
	}
	// The first request waits for the process to join its group.
	var out []time.Duration
	for i := -1; i < w.Reps; i++ {
		id := fmt.Sprintf("lat-%06d", i+1)
		r, err := requestRecord(enc, admissionRequest(i+1, w.Tenants, "lat-dep-"+id), id)
		if err != nil {
			return Latencies{}, err
		}
		t0 := time.Now()
		if err := b.prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			return Latencies{}, err
		}
		if err := wait(id, time.Now().Add(b.timeout)); err != nil {
			return Latencies{}, err
		}
		if i >= 0 {
			out = append(out, time.Since(t0))
		}
	}
	return summarize(out), nil
}

// admissionTable prints the admission section.
func (r Report) admissionTable(w io.Writer) {
	a := r.Admission
	if a == nil {
		return
	}
	fmt.Fprintf(w, "admission: %d policies over %d tenants, %d requests of 3 applications (%d admitted, %d denied)\n",
		a.Work.Policies, a.Work.Tenants, a.Work.Requests, a.Admitted, a.Denied)
	ceiling := 0.0
	if a.Alone.CeilingTransactional != nil {
		ceiling = a.Alone.CeilingTransactional.RecordsPerSec
	}
	avro := ""
	if c := a.Alone.CeilingAvro; c != nil {
		avro = fmt.Sprintf("; with Avro %.0f rec/s: ratio %.4f", c.RecordsPerSec, a.Alone.RatioAvro)
	}
	fmt.Fprintf(w, "  alone: %.0f verdicts/s, transactional pass-through %.0f rec/s of %d-byte records: ratio %.4f%s; stage CPU %.1f s, broker %.1f s in %.1f s; peak RSS %.0f MiB\n",
		a.Alone.RecordsPerSec, ceiling, a.Alone.InputRecordBytes, a.Alone.Ratio, avro, a.Alone.StageCPU, a.Alone.BenchCPU, a.Alone.Seconds, a.Alone.PeakRSSMiB)
	fmt.Fprintf(w, "  latency, request written -> verdict read, %d one at a time: p50 %.1f ms  p99 %.1f ms  max %.1f ms\n",
		a.Work.Reps, a.LatencyMs.P50, a.LatencyMs.P99, a.LatencyMs.Max)
	fmt.Fprintf(w, "  decision alone (admit.Evaluate, in process): p50 %.3f ms  p99 %.3f ms\n", a.DecideMs.P50, a.DecideMs.P99)
}
