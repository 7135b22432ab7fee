package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/stages"
	"github.com/policyflow/policyflow/topology"
)

// result is what one policyctl invocation showed the operator.
type result struct {
	code        int
	out, errOut string
}

// policyctl runs a command line the way main does and captures its output.
func policyctl(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(withStreams(ctx, &out, &errOut), args)
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

// hermeticEnv keeps PF_* variables of the machine out of the flags, and a
// dev stack's token in the checkout out of the API commands.
func hermeticEnv(t *testing.T) {
	for _, k := range []string{"PF_BROKERS", "PF_TOPIC_PREFIX", "PF_SASL_MECHANISM", "PF_SASL_USER", "PF_SASL_PASSWORD", "PF_TLS", "PF_TLS_CA", "PF_TLS_INSECURE_SKIP_VERIFY",
		"PF_TOKEN", "PF_TOKEN_FILE", "PF_TOKENS_FILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("PF_DEV_DATA_DIR", t.TempDir())
}

// startCluster starts an in-process broker and returns its address and an
// admin client for looking behind policyctl's back.
func startCluster(t *testing.T) (string, *kadm.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("start kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatalf("create kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return addr, kadm.NewClient(cl)
}

func TestTopologyApplyThenVerify(t *testing.T) {
	hermeticEnv(t)
	addr, adm := startCluster(t)
	flags := []string{"--brokers", addr, "--topic-prefix", "cli.", "--timeout", "90s"}
	spec := topology.Default()

	// Before apply, verify finds every topic missing and fails.
	r := policyctl(t, append([]string{"topology", "verify"}, flags...)...)
	if r.code != 1 {
		t.Fatalf("verify on an empty cluster: exit %d, want 1\nstdout: %s\nstderr: %s", r.code, r.out, r.errOut)
	}
	if n := strings.Count(r.out, ": missing; apply creates it"); n != len(spec) {
		t.Errorf("verify on an empty cluster reported %d missing topics, want %d:\n%s", n, len(spec), r.out)
	}
	if !strings.Contains(r.errOut, "'policyctl topology apply' fixes") {
		t.Errorf("verify does not say how to fix it: %q", r.errOut)
	}

	r = policyctl(t, append([]string{"topology", "apply"}, flags...)...)
	if r.code != 0 {
		t.Fatalf("apply: exit %d\nstdout: %s\nstderr: %s", r.code, r.out, r.errOut)
	}
	for _, tp := range spec {
		if !strings.Contains(r.out, "created cli."+tp.Name+":") {
			t.Errorf("apply output does not report creating cli.%s:\n%s", tp.Name, r.out)
		}
	}
	details, err := adm.ListTopics(kadm.WithAuthorizedOps(context.Background()))
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	if got := len(details.Names()); got != len(spec) {
		t.Errorf("cluster has %d topics after apply, want %d: %v", got, len(spec), details.Names())
	}

	r = policyctl(t, append([]string{"topology", "verify"}, flags...)...)
	if r.code != 0 {
		t.Fatalf("verify after apply: exit %d\nstdout: %s\nstderr: %s", r.code, r.out, r.errOut)
	}
	if !strings.Contains(r.out, "match the specification") {
		t.Errorf("verify after apply says %q", r.out)
	}

	// Apply again: nothing to do.
	r = policyctl(t, append([]string{"topology", "apply"}, flags...)...)
	if r.code != 0 || strings.Contains(r.out, "created") || !strings.Contains(r.out, "nothing changed") {
		t.Errorf("second apply: exit %d, output %q; want exit 0 and nothing changed", r.code, r.out)
	}

	// A hand edit makes verify fail with exactly that drift, and apply
	// puts it back.
	resps, err := adm.AlterTopicConfigs(context.Background(),
		[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("60000")}}, "cli.policy.matches")
	if err == nil {
		_, err = resps.On("cli.policy.matches", func(r *kadm.AlterConfigsResponse) error { return r.Err })
	}
	if err != nil {
		t.Fatalf("alter retention.ms of cli.policy.matches: %v", err)
	}
	r = policyctl(t, append([]string{"topology", "verify"}, flags...)...)
	if r.code != 1 {
		t.Fatalf("verify after a hand edit: exit %d, want 1\nstdout: %s\nstderr: %s", r.code, r.out, r.errOut)
	}
	if want := "cli.policy.matches: retention.ms is 60000, spec 604800000; apply sets it\n"; r.out != want {
		t.Errorf("verify after a hand edit printed %q, want %q", r.out, want)
	}
	r = policyctl(t, append([]string{"topology", "apply"}, flags...)...)
	if r.code != 0 || !strings.Contains(r.out, "set cli.policy.matches retention.ms=604800000 (was 60000)") {
		t.Errorf("apply after a hand edit: exit %d, output %q", r.code, r.out)
	}
	r = policyctl(t, append([]string{"topology", "verify"}, flags...)...)
	if r.code != 0 {
		t.Errorf("verify after the fix: exit %d\nstdout: %s\nstderr: %s", r.code, r.out, r.errOut)
	}

	// Verify of named topics only looks at those.
	r = policyctl(t, append(append([]string{"topology", "verify"}, flags...), "policy.catalog", "dlq.matcher")...)
	if r.code != 0 || !strings.Contains(r.out, "2 topics match") {
		t.Errorf("verify of two topics: exit %d, output %q", r.code, r.out)
	}
}

func TestTopologyApplyLeavesWhatItCannotFix(t *testing.T) {
	hermeticEnv(t)
	addr, adm := startCluster(t)
	// A compacted topic with fewer partitions than the spec.
	resps, err := adm.CreateTopics(context.Background(), 2, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "left.policy.catalog")
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatalf("create left.policy.catalog: %v", err)
	}
	r := policyctl(t, "topology", "apply", "--brokers", addr, "--topic-prefix", "left.", "policy.catalog")
	if r.code != 1 {
		t.Fatalf("apply with a compacted topic short of partitions: exit %d, want 1\nstdout: %s\nstderr: %s", r.code, r.out, r.errOut)
	}
	if !strings.Contains(r.out, "left: left.policy.catalog: 2 partitions, spec 6; apply leaves it") {
		t.Errorf("apply output does not show what it left:\n%s", r.out)
	}
	if !strings.Contains(r.errOut, "1 difference apply cannot fix") {
		t.Errorf("apply stderr = %q", r.errOut)
	}
}

func TestTopologyDescribeNeedsNoBroker(t *testing.T) {
	hermeticEnv(t)
	t.Setenv("PF_TOPIC_PREFIX", "env.")
	r := policyctl(t, "topology", "describe", "--partitions", "1")
	if r.code != 0 {
		t.Fatalf("describe: exit %d\nstderr: %s", r.code, r.errOut)
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	spec := topology.Default()
	if len(lines) != len(spec)+1 {
		t.Fatalf("describe printed %d lines, want a header and %d topics:\n%s", len(lines), len(spec), r.out)
	}
	for i, tp := range spec {
		f := strings.Fields(lines[i+1])
		if f[0] != "env."+tp.Name || f[1] != "1" {
			t.Errorf("line %q: want topic env.%s with 1 partition", lines[i+1], tp.Name)
		}
	}

	r = policyctl(t, "topology", "describe", "--topic-prefix", "x.", "schemas")
	if r.code != 0 || !strings.Contains(r.out, "x.schemas") || strings.Contains(r.out, "policy.catalog") {
		t.Errorf("describe of one topic: exit %d, output %q", r.code, r.out)
	}
	// Flags after the argument are honoured as those before it.
	after := policyctl(t, "topology", "describe", "schemas", "--topic-prefix", "x.")
	if after.code != 0 || after.out != r.out {
		t.Errorf("describe with the flag after the topic: exit %d, output %q (stderr %q); want the output of the flag before it, %q", after.code, after.out, after.errOut, r.out)
	}
}

func TestTopologyUsageErrors(t *testing.T) {
	hermeticEnv(t)
	for _, tc := range []struct {
		args []string
		want string // on stderr
	}{
		{[]string{"topology", "describe", "no.such.topic"}, `no topic "no.such.topic"`},
		{[]string{"topology", "describe", "--partitions", "-3"}, "--partitions -3"},
		{[]string{"topology", "describe", "--no-such-flag"}, "flag provided but not defined"},
		{[]string{"topology", "apply", "--replication-factor", "0"}, "--replication-factor 0"},
		{[]string{"topology", "apply", "--brokers", "127.0.0.1:1", "--sasl-mechanism", "GSSAPI"}, "unknown SASL mechanism"},
	} {
		r := policyctl(t, tc.args...)
		wantCode := 2
		if tc.want == "unknown SASL mechanism" {
			wantCode = 1
		}
		if r.code != wantCode || !strings.Contains(r.errOut, tc.want) {
			t.Errorf("policyctl %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), r.code, r.errOut, wantCode, tc.want)
		}
	}
}

func TestTopologyVerifyGivesUpOnAnUnreachableBroker(t *testing.T) {
	hermeticEnv(t)
	// Port 1 on loopback refuses connections.
	r := policyctl(t, "topology", "verify", "--brokers", "127.0.0.1:1", "--timeout", "2s")
	if r.code != 1 || !strings.Contains(r.errOut, "127.0.0.1:1") {
		t.Errorf("verify against no broker: exit %d, stderr %q; want exit 1 naming the broker", r.code, r.errOut)
	}
}

// Wrong SASL credentials make verify fail, saying to check them: the
// broker closes the connection (as kfake does), which looks like a broker
// that is down, so both are named.
func TestTopologyVerifyWithRefusedCredentialsSaysWhatToCheck(t *testing.T) {
	hermeticEnv(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "ops", "right"))
	if err != nil {
		t.Fatalf("start kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	addr := c.ListenAddrs()[0]
	sasl := []string{"--brokers", addr, "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", "ops", "--timeout", "5s"}

	r := policyctl(t, append([]string{"topology", "verify"}, append(sasl, "--sasl-password", "wrong")...)...)
	if r.code != 1 {
		t.Fatalf("verify with a wrong password: exit %d, want 1\nstdout: %s\nstderr: %s", r.code, r.out, r.errOut)
	}
	for _, want := range []string{"brokers not reachable or SASL credentials refused", addr, `user "ops" (SCRAM-SHA-512)`, "--sasl-password"} {
		if !strings.Contains(r.errOut, want) {
			t.Errorf("verify with a wrong password says %q, want it to name %q", r.errOut, want)
		}
	}

	// The right password gets through to the comparison.
	r = policyctl(t, append([]string{"topology", "verify"}, append(sasl, "--sasl-password", "right")...)...)
	if r.code != 1 || !strings.Contains(r.out, ": missing; apply creates it") {
		t.Fatalf("verify with the right password: exit %d, want 1 with the missing topics\nstdout: %s\nstderr: %s", r.code, r.out, r.errOut)
	}
}

// topology members names every stage and how many members it can use:
// the partitions of its busiest input, one for admission's one key.
func TestTopologyMembersNeedsNoBroker(t *testing.T) {
	hermeticEnv(t)
	r := policyctl(t, "topology", "members", "-o", "json")
	if r.code != 0 {
		t.Fatalf("members: exit %d\nstderr: %s", r.code, r.errOut)
	}
	var got struct {
		Stages []topology.StageUse `json:"stages"`
	}
	if err := json.Unmarshal([]byte(r.out), &got); err != nil {
		t.Fatalf("members -o json: %v\n%s", err, r.out)
	}
	by := map[string]int32{}
	for _, s := range got.Stages {
		by[s.Stage] = s.Members
	}
	for _, s := range stages.All() {
		if _, ok := by[s.Name]; !ok {
			t.Errorf("stage %s is not listed", s.Name)
		}
	}
	if by[topology.StageMatcher] != topology.DefaultPartitions || by[topology.StageAdmission] != 1 {
		t.Errorf("matcher %d and admission %d members, want %d and 1", by[topology.StageMatcher], by[topology.StageAdmission], topology.DefaultPartitions)
	}
	if r := policyctl(t, "topology", "members", "--partitions", "24"); r.code != 0 || !strings.Contains(r.out, "the 24 partitions of policy.changes") {
		t.Errorf("members --partitions 24: exit %d, output %q", r.code, r.out)
	}
	if r := policyctl(t, "topology", "members", "extra"); r.code != 2 {
		t.Errorf("members with an argument: exit %d, want 2 (usage)", r.code)
	}
}
