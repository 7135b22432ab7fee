package topology_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/topology"
)

// newAdmin starts an in-process single-broker cluster and returns an admin
// client on it; both are closed when the test ends.
func newAdmin(t *testing.T) *kadm.Client {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("start kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.MetadataMinAge(100*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("create kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// clusterTopics lists the topics on the cluster with their partition counts.
func clusterTopics(t *testing.T, ctx context.Context, adm *kadm.Client) map[string]int {
	t.Helper()
	details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx))
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	out := make(map[string]int)
	for name, d := range details {
		if d.Err != nil {
			t.Fatalf("topic %s: %v", name, d.Err)
		}
		out[name] = len(d.Partitions)
	}
	return out
}

// topicConfig returns the value the broker reports for one config of one
// topic, and whether it reports it at all.
func topicConfig(t *testing.T, ctx context.Context, adm *kadm.Client, topic, key string) (string, bool) {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("describe configs of %s: %v", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe configs of %s: %v %v", topic, err, rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key == key && c.Value != nil {
			return *c.Value, true
		}
	}
	return "", false
}

func setConfig(t *testing.T, ctx context.Context, adm *kadm.Client, topic, key, value string) {
	t.Helper()
	resps, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: kadm.StringPtr(value)}}, topic)
	if err == nil {
		_, err = resps.On(topic, func(r *kadm.AlterConfigsResponse) error { return r.Err })
	}
	if err != nil {
		t.Fatalf("set %s=%s on %s: %v", key, value, topic, err)
	}
}

func mustApply(t *testing.T, ctx context.Context, adm *kadm.Client, topics []topology.Topic, o topology.Options) topology.Report {
	t.Helper()
	rep, err := topology.Apply(ctx, adm, topics, o)
	if err != nil {
		t.Fatalf("apply with prefix %q: %v", o.Prefix, err)
	}
	return rep
}

func mustVerify(t *testing.T, ctx context.Context, adm *kadm.Client, topics []topology.Topic, o topology.Options) []topology.Drift {
	t.Helper()
	drifts, err := topology.Verify(ctx, adm, topics, o)
	if err != nil {
		t.Fatalf("verify with prefix %q: %v", o.Prefix, err)
	}
	return drifts
}

func TestApplyCreatesEveryTopicAsSpecified(t *testing.T) {
	ctx := testContext(t)
	adm := newAdmin(t)
	o := topology.Options{Prefix: "apply."}
	spec := topology.Default()

	rep := mustApply(t, ctx, adm, spec, o)
	if len(rep.Changes) != len(spec) || len(rep.Left) != 0 {
		t.Fatalf("first apply: want %d creations and nothing left, got %d changes, left %v", len(spec), len(rep.Changes), rep.Left)
	}
	for i, c := range rep.Changes {
		if c.Kind != topology.ChangeCreated || c.Topic != o.Name(spec[i]) {
			t.Errorf("change %d: want creation of %s, got %s", i, o.Name(spec[i]), c)
		}
	}

	onCluster := clusterTopics(t, ctx, adm)
	for _, tp := range spec {
		name := o.Name(tp)
		if got := onCluster[name]; got != int(tp.Partitions) {
			t.Errorf("%s: %d partitions, want %d", name, got, tp.Partitions)
		}
		for k, want := range tp.KafkaConfigs() {
			got, ok := topicConfig(t, ctx, adm, name, k)
			if !ok || got != want {
				t.Errorf("%s: %s=%q (reported %v), want %q", name, k, got, ok, want)
			}
		}
	}
	if got, _ := topicConfig(t, ctx, adm, o.Name(mustFind(t, topology.PolicyCatalog)), "cleanup.policy"); got != "compact" {
		t.Errorf("policy.catalog cleanup.policy = %q, want compact", got)
	}
	if got, _ := topicConfig(t, ctx, adm, "apply.dlq.matcher", "retention.ms"); got != "1209600000" {
		t.Errorf("dlq.matcher retention.ms = %q, want 14 days", got)
	}
	if got, _ := topicConfig(t, ctx, adm, "apply.policy.changes", "retention.ms"); got != "604800000" {
		t.Errorf("policy.changes retention.ms = %q, want 7 days", got)
	}

	if drifts := mustVerify(t, ctx, adm, spec, o); len(drifts) != 0 {
		t.Errorf("verify right after apply: want no drift, got %v", drifts)
	}

	again := mustApply(t, ctx, adm, spec, o)
	if again.Changed() || len(again.Left) != 0 {
		t.Errorf("second apply changed %v, left %v; want nothing", again.Changes, again.Left)
	}
	if s := again.String(); !strings.Contains(s, "nothing changed") {
		t.Errorf("second apply report %q does not say nothing changed", s)
	}
}

func mustFind(t *testing.T, name string) topology.Topic {
	t.Helper()
	tp, ok := topology.Find(name)
	if !ok {
		t.Fatalf("topic %s not in the default topology", name)
	}
	return tp
}

func TestVerifyReportsHandMadeDriftAndApplyFixesIt(t *testing.T) {
	ctx := testContext(t)
	adm := newAdmin(t)
	o := topology.Options{Prefix: "drift."}
	spec := topology.Default()
	mustApply(t, ctx, adm, spec, o)

	// An operator shortens the retention of policy.changes and switches
	// policy.catalog to delete by hand.
	setConfig(t, ctx, adm, "drift.policy.changes", "retention.ms", "3600000")
	setConfig(t, ctx, adm, "drift.policy.catalog", "cleanup.policy", "delete")

	drifts := mustVerify(t, ctx, adm, spec, o)
	want := []topology.Drift{
		{Topic: "drift.policy.catalog", Kind: topology.DriftConfig, Config: "cleanup.policy", Want: "compact", Got: "delete", Fixable: true},
		{Topic: "drift.policy.changes", Kind: topology.DriftConfig, Config: "retention.ms", Want: "604800000", Got: "3600000", Fixable: true},
	}
	if !slices.Equal(drifts, want) {
		t.Fatalf("verify after hand edits:\n got  %v\n want %v", drifts, want)
	}
	if s := drifts[1].String(); s != "drift.policy.changes: retention.ms is 3600000, spec 604800000; apply sets it" {
		t.Errorf("drift line = %q", s)
	}

	rep := mustApply(t, ctx, adm, spec, o)
	wantChanges := []topology.Change{
		{Topic: "drift.policy.catalog", Kind: topology.ChangeConfig, Config: "cleanup.policy", From: "delete", To: "compact"},
		{Topic: "drift.policy.changes", Kind: topology.ChangeConfig, Config: "retention.ms", From: "3600000", To: "604800000"},
	}
	if !slices.Equal(rep.Changes, wantChanges) {
		t.Fatalf("apply after hand edits:\n got  %v\n want %v", rep.Changes, wantChanges)
	}
	if s := rep.Changes[0].String(); !strings.Contains(s, "keeps only the latest record per key") {
		t.Errorf("switching cleanup.policy is not called out: %q", s)
	}
	if got, _ := topicConfig(t, ctx, adm, "drift.policy.changes", "retention.ms"); got != "604800000" {
		t.Errorf("retention.ms after apply = %q, want 604800000", got)
	}
	if drifts := mustVerify(t, ctx, adm, spec, o); len(drifts) != 0 {
		t.Errorf("verify after apply: want no drift, got %v", drifts)
	}
}

func TestApplySwitchingCompactToDeleteIsReported(t *testing.T) {
	ctx := testContext(t)
	adm := newAdmin(t)
	o := topology.Options{Prefix: "switch."}
	// A topic that exists compacted, but the spec says delete.
	resps, err := adm.CreateTopics(ctx, 6, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "switch.policy.changes")
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("create compacted policy.changes by hand: %v", err)
	}
	rep := mustApply(t, ctx, adm, []topology.Topic{mustFind(t, topology.PolicyChanges)}, o)
	var switched *topology.Change
	for i, c := range rep.Changes {
		if c.Config == "cleanup.policy" {
			switched = &rep.Changes[i]
		}
	}
	if switched == nil || switched.From != "compact" || switched.To != "delete" {
		t.Fatalf("apply did not report the cleanup.policy switch: %v", rep.Changes)
	}
	if s := switched.String(); !strings.Contains(s, "no longer keeps the latest record per key") {
		t.Errorf("compact to delete is not called out: %q", s)
	}
}

func TestApplyGrowsDeleteTopicsAndLeavesTheRest(t *testing.T) {
	ctx := testContext(t)
	adm := newAdmin(t)
	o := topology.Options{Prefix: "grow."}
	spec := topology.Default()

	// Topics made by hand before the first apply, with the wrong counts
	// and none of the spec's configs.
	for name, parts := range map[string]int32{
		"grow.policy.changes":  2, // delete, spec 6: apply grows it
		"grow.policy.catalog":  2, // compact, spec 6: apply must not grow it
		"grow.policy.segments": 9, // delete, spec 6: cannot shrink
	} {
		resps, err := adm.CreateTopics(ctx, parts, -1, nil, name)
		if err == nil {
			err = resps.Error()
		}
		if err != nil {
			t.Fatalf("create %s by hand: %v", name, err)
		}
	}

	drifts := mustVerify(t, ctx, adm, spec, o)
	var partDrifts []topology.Drift
	for _, d := range drifts {
		if d.Kind == topology.DriftPartitions {
			partDrifts = append(partDrifts, d)
		}
	}
	if len(partDrifts) != 3 {
		t.Fatalf("want 3 partition drifts, got %v", partDrifts)
	}
	hasConfigDrift := false
	for _, d := range drifts {
		if d.Topic == "grow.policy.catalog" && d.Kind == topology.DriftConfig && d.Config == "cleanup.policy" {
			hasConfigDrift = true
		}
	}
	if !hasConfigDrift {
		t.Errorf("verify did not report the hand-made policy.catalog's cleanup.policy: %v", drifts)
	}

	rep, err := topology.Apply(ctx, adm, spec, o)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	onCluster := clusterTopics(t, ctx, adm)
	if got := onCluster["grow.policy.changes"]; got != 6 {
		t.Errorf("policy.changes has %d partitions after apply, want 6", got)
	}
	if got := onCluster["grow.policy.catalog"]; got != 2 {
		t.Errorf("compacted policy.catalog has %d partitions after apply, want it left at 2", got)
	}
	if got := onCluster["grow.policy.segments"]; got != 9 {
		t.Errorf("policy.segments has %d partitions after apply, want it left at 9", got)
	}
	grown := slices.ContainsFunc(rep.Changes, func(c topology.Change) bool {
		return c.Topic == "grow.policy.changes" && c.Kind == topology.ChangePartitions && c.From == "2" && c.To == "6"
	})
	if !grown {
		t.Errorf("report does not show policy.changes grown from 2 to 6: %v", rep.Changes)
	}
	var left []string
	for _, d := range rep.Left {
		left = append(left, d.Topic)
	}
	slices.Sort(left)
	if !slices.Equal(left, []string{"grow.policy.catalog", "grow.policy.segments"}) {
		t.Errorf("left differences: %v, want policy.catalog and policy.segments", rep.Left)
	}
	if got, _ := topicConfig(t, ctx, adm, "grow.policy.catalog", "cleanup.policy"); got != "compact" {
		t.Errorf("hand-made policy.catalog cleanup.policy = %q after apply, want compact", got)
	}

	// What is left is exactly what verify still reports.
	after := mustVerify(t, ctx, adm, spec, o)
	if !slices.Equal(after, rep.Left) {
		t.Errorf("verify after apply:\n got  %v\n want %v", after, rep.Left)
	}
	for _, d := range after {
		if d.Fixable || !strings.Contains(d.String(), "apply leaves it") {
			t.Errorf("drift %q should say apply leaves it", d)
		}
	}
}

func TestPrefixesIsolateEnvironments(t *testing.T) {
	ctx := testContext(t)
	adm := newAdmin(t)
	spec := topology.Default()
	one := topology.Options{Prefix: "one."}
	two := topology.Options{Prefix: "two.", Partitions: 2}

	mustApply(t, ctx, adm, spec, one)
	drifts := mustVerify(t, ctx, adm, spec, two)
	if len(drifts) != len(spec) {
		t.Fatalf("prefix two. sees %d drifts, want every topic missing (%d)", len(drifts), len(spec))
	}
	for _, d := range drifts {
		if d.Kind != topology.DriftMissing || !strings.HasPrefix(d.Topic, "two.") {
			t.Errorf("prefix two. drift %v, want a missing two.* topic", d)
		}
	}

	// Hand drift under one. must survive an apply under two.
	setConfig(t, ctx, adm, "one.agent.status", "segment.ms", "60000")
	rep := mustApply(t, ctx, adm, spec, two)
	for _, c := range rep.Changes {
		if !strings.HasPrefix(c.Topic, "two.") {
			t.Errorf("apply under two. touched %s", c.Topic)
		}
	}
	if got, _ := topicConfig(t, ctx, adm, "one.agent.status", "segment.ms"); got != "60000" {
		t.Errorf("apply under two. changed one.agent.status segment.ms to %q", got)
	}

	onCluster := clusterTopics(t, ctx, adm)
	if len(onCluster) != 2*len(spec) {
		t.Errorf("cluster has %d topics, want %d", len(onCluster), 2*len(spec))
	}
	for _, tp := range spec {
		if got := onCluster[two.Name(tp)]; got != 2 {
			t.Errorf("%s: %d partitions, want the override 2", two.Name(tp), got)
		}
		if got := onCluster[one.Name(tp)]; got != int(tp.Partitions) {
			t.Errorf("%s: %d partitions, want %d", one.Name(tp), got, tp.Partitions)
		}
	}
	if drifts := mustVerify(t, ctx, adm, spec, two); len(drifts) != 0 {
		t.Errorf("verify under two.: want no drift, got %v", drifts)
	}
	drifts = mustVerify(t, ctx, adm, spec, one)
	if len(drifts) != 1 || drifts[0].Topic != "one.agent.status" || drifts[0].Config != "segment.ms" {
		t.Errorf("verify under one.: want only the hand-made segment.ms drift, got %v", drifts)
	}
}

func TestVerifyReportsUnsetConfigs(t *testing.T) {
	ctx := testContext(t)
	adm := newAdmin(t)
	o := topology.Options{Prefix: "unset."}
	catalog := mustFind(t, topology.PolicyCatalog)
	resps, err := adm.CreateTopics(ctx, catalog.Partitions, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, o.Name(catalog))
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("create policy.catalog by hand: %v", err)
	}
	drifts := mustVerify(t, ctx, adm, []topology.Topic{catalog}, o)
	var keys []string
	for _, d := range drifts {
		if d.Kind != topology.DriftConfig {
			t.Errorf("unexpected drift %v", d)
			continue
		}
		keys = append(keys, d.Config)
	}
	// Unset, retention.ms and segment.ms read as the broker's 7 day
	// defaults, max.message.bytes as its 1 MB default, and delete.retention.ms
	// as its 1 day default, which is the
	// spec's value; kfake does not report the other two at all.
	want := []string{"max.message.bytes", "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "retention.ms", "segment.ms"}
	if !slices.Equal(keys, want) {
		t.Errorf("drifted configs %v, want %v", keys, want)
	}
}

func TestDescribeListsEveryTopic(t *testing.T) {
	var buf bytes.Buffer
	o := topology.Options{Prefix: "dev."}
	if err := topology.Describe(&buf, topology.Default(), o); err != nil {
		t.Fatalf("describe: %v", err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	spec := topology.Default()
	if len(lines) != len(spec)+1 {
		t.Fatalf("describe printed %d lines, want a header and %d topics:\n%s", len(lines), len(spec), buf.String())
	}
	if !strings.HasPrefix(lines[0], "TOPIC") {
		t.Errorf("header = %q", lines[0])
	}
	col := strings.Index(lines[0], "KEY")
	for i, tp := range spec {
		fields := strings.Fields(lines[i+1])
		if fields[0] != o.Name(tp) {
			t.Errorf("line %d names %q, want %q", i+1, fields[0], o.Name(tp))
		}
		if !strings.HasPrefix(lines[i+1][col:], tp.Key) {
			t.Errorf("line %q: key column is not %q", lines[i+1], tp.Key)
		}
	}
	for _, want := range []string{
		"dev.policy.catalog", "policyflow.PolicyCatalogEntry", "compact", "unlimited",
		"dev.dlq.consul-writer", "14d", "dev.pdp.notifications", "7d", "pdp-adapter,north-api,policyctl",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("describe output lacks %q", want)
		}
	}
}

func TestDefaultTopologyIsConsistent(t *testing.T) {
	spec := topology.Default()
	if err := topology.Validate(spec); err != nil {
		t.Fatalf("default topology is invalid: %v", err)
	}
	stages := topology.Stages()
	if len(stages) != 9 {
		t.Errorf("%d stages, want the 9 that are built", len(stages))
	}
	for _, s := range stages {
		d, ok := topology.Find(topology.DLQ(s))
		if !ok {
			t.Errorf("stage %s has no dead letter topic", s)
			continue
		}
		if d.Cleanup != topology.CleanupDelete || d.RetentionMs() != (14*24*time.Hour).Milliseconds() || !slices.Equal(d.Writers, []string{s}) {
			t.Errorf("dead letter topic of %s: %+v", s, d)
		}
	}
	// Every stage reads something and, except the sinks, writes something.
	for _, s := range stages {
		reads := slices.ContainsFunc(spec, func(tp topology.Topic) bool { return slices.Contains(tp.Readers, s) })
		if !reads {
			t.Errorf("stage %s reads no topic", s)
		}
	}
	for _, tp := range spec {
		if tp.Cleanup == topology.CleanupCompact {
			if tp.RetentionMs() != -1 {
				t.Errorf("compacted %s keeps data for %dms, want unlimited", tp.Name, tp.RetentionMs())
			}
			if tp.Configs["min.cleanable.dirty.ratio"] == "" || tp.Configs["segment.ms"] == "" {
				t.Errorf("compacted %s lacks compaction tuning: %v", tp.Name, tp.Configs)
			}
		}
		if tp.ValueSchema != "" && !strings.HasPrefix(tp.ValueSchema, "policyflow.") {
			t.Errorf("%s: value schema %q is not in the policyflow namespace", tp.Name, tp.ValueSchema)
		}
	}
	if _, ok := topology.Find("no.such.topic"); ok {
		t.Error("Find found a topic that is not in the topology")
	}
	// Default hands out copies.
	a := topology.Default()
	a[1].Configs["segment.ms"] = "1"
	if b, _ := topology.Find(a[1].Name); b.Configs["segment.ms"] == "1" {
		t.Error("changing one Default() result changed another")
	}
}

func TestValidateRefusesBadSpecs(t *testing.T) {
	good := topology.Topic{Name: "x", Partitions: 1, Cleanup: topology.CleanupDelete}
	for name, tc := range map[string]struct {
		topics []topology.Topic
		want   string
	}{
		"no name":         {[]topology.Topic{{Partitions: 1, Cleanup: "delete"}}, "no name"},
		"illegal name":    {[]topology.Topic{{Name: "a/b", Partitions: 1, Cleanup: "delete"}}, "may only hold"},
		"duplicate":       {[]topology.Topic{good, good}, "collides"},
		"dot underscore":  {[]topology.Topic{{Name: "a.b", Partitions: 1, Cleanup: "delete"}, {Name: "a_b", Partitions: 1, Cleanup: "delete"}}, "collides"},
		"zero partitions": {[]topology.Topic{{Name: "x", Cleanup: "delete"}}, "need at least 1"},
		"bad cleanup":     {[]topology.Topic{{Name: "x", Partitions: 1, Cleanup: "compact,delete"}}, "cleanup"},
		"cleanup in map":  {[]topology.Topic{{Name: "x", Partitions: 1, Cleanup: "delete", Configs: map[string]string{"cleanup.policy": "compact"}}}, "Cleanup and Retention fields"},
	} {
		err := topology.Validate(tc.topics)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want an error containing %q", name, err, tc.want)
		}
	}
	if err := topology.Describe(&bytes.Buffer{}, []topology.Topic{good}, topology.Options{Prefix: "bad prefix "}); err == nil {
		t.Error("Describe accepted a prefix with spaces")
	}
}

// TestREADMETableMatchesTheSpec keeps the documented table honest.
func TestREADMETableMatchesTheSpec(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatalf("read README.md: %v", err)
	}
	rows := make(map[string][]string)
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| topic ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows[cells[0]] = cells
	}
	retention := func(tp topology.Topic) string {
		if tp.RetentionMs() < 0 {
			return "unlimited"
		}
		return fmt.Sprintf("%dd", tp.RetentionMs()/(24*time.Hour).Milliseconds())
	}
	seen := 0
	for _, tp := range topology.Default() {
		name := tp.Name
		writers := strings.Join(tp.Writers, ", ")
		if strings.HasPrefix(name, "dlq.") {
			name, writers = "dlq.&lt;stage&gt;", "that stage"
			if !strings.Contains(string(raw), "`"+strings.TrimPrefix(tp.Name, "dlq.")+"`") {
				t.Errorf("README does not name stage %s", strings.TrimPrefix(tp.Name, "dlq."))
			}
		}
		row, ok := rows[name]
		if !ok {
			t.Errorf("README has no row for %s", name)
			continue
		}
		seen++
		schema := row[3]
		if tp.ValueSchema == "" {
			if !strings.HasPrefix(schema, "raw") {
				t.Errorf("README %s: value %q, want raw", name, schema)
			}
			schema = ""
		}
		got := []string{row[1], row[2], schema, row[4], row[5], row[6], row[7]}
		want := []string{fmt.Sprint(tp.Partitions), tp.Key, tp.ValueSchema, tp.Cleanup, retention(tp), writers, strings.Join(tp.Readers, ", ")}
		if !slices.Equal(got, want) {
			t.Errorf("README row %s:\n got  %q\n want %q", name, got, want)
		}
	}
	dlqs := 0
	for _, tp := range topology.Default() {
		if strings.HasPrefix(tp.Name, "dlq.") {
			dlqs++
		}
	}
	if len(rows) != len(topology.Default())-dlqs+1 {
		t.Errorf("README table has %d rows, the spec %d topics (DLQs in one row)", len(rows), len(topology.Default()))
	}
}

// Several processes may apply the topology at the same start-up; they must
// neither fail on each other's topics nor leave drift.
func TestConcurrentAppliesAgree(t *testing.T) {
	ctx := testContext(t)
	adm := newAdmin(t)
	o := topology.Options{Prefix: "race."}
	spec := topology.Default()
	resps, err := adm.CreateTopics(ctx, 2, -1, nil, "race.policy.changes")
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("create race.policy.changes: %v", err)
	}

	const n = 4
	errs := make(chan error, n)
	reports := make(chan topology.Report, n)
	for range n {
		go func() {
			rep, err := topology.Apply(ctx, adm, spec, o)
			errs <- err
			reports <- rep
		}()
	}
	created := make(map[string]int)
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("concurrent apply: %v", err)
		}
		for _, c := range (<-reports).Changes {
			if c.Kind == topology.ChangeCreated {
				created[c.Topic]++
			}
		}
	}
	for name, times := range created {
		if times != 1 {
			t.Errorf("%s reported created %d times", name, times)
		}
	}
	if len(created) != len(spec)-1 {
		t.Errorf("%d topics reported created, want %d", len(created), len(spec)-1)
	}
	if drifts := mustVerify(t, ctx, adm, spec, o); len(drifts) != 0 {
		t.Errorf("verify after concurrent applies: %v", drifts)
	}
}

// A stage scales to the partitions of its busiest input, and to one member
// where the design gives its input one key.
func TestMembersAStageCanUse(t *testing.T) {
	o := topology.Options{}
	m, err := topology.Members(topology.StageMatcher, []string{topology.PolicyChanges, topology.DeployComponents, topology.CatchupRequests}, o)
	if err != nil {
		t.Fatal(err)
	}
	if m.Members != topology.DefaultPartitions || len(m.Inputs) != 3 {
		t.Errorf("matcher: %d members over %d inputs, want %d over 3", m.Members, len(m.Inputs), topology.DefaultPartitions)
	}
	a, err := topology.Members(topology.StageAdmission, []string{topology.DeployRequests, topology.AppPolicies}, o)
	if err != nil {
		t.Fatal(err)
	}
	if a.Members != 1 || !strings.Contains(a.Why, topology.DeployRequests) {
		t.Errorf("admission: %d members (%s), want 1 for the one key of %s", a.Members, a.Why, topology.DeployRequests)
	}
	wide, err := topology.Members(topology.StageMatcher, []string{topology.PolicyChanges}, topology.Options{Partitions: 24})
	if err != nil {
		t.Fatal(err)
	}
	if wide.Members != 24 {
		t.Errorf("matcher over 24 partitions: %d members, want 24", wide.Members)
	}
	if a, _ := topology.Members(topology.StageAdmission, []string{topology.DeployRequests, topology.AppPolicies}, topology.Options{Partitions: 24}); a.Members != 1 {
		t.Errorf("admission over 24 partitions: %d members (%s), want 1: its requests have one key", a.Members, a.Why)
	}
	if _, err := topology.Members("x", []string{"no.such.topic"}, o); err == nil {
		t.Error("a stage reading a topic the topology lacks was not refused")
	}
}
