package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/stages"
	"github.com/policyflow/policyflow/topology"
)

const (
	topologyApplySummary    = "create missing topics, set their configs and grow delete topics to the specification"
	topologyVerifySummary   = "compare the cluster with the topic specification; exit 1 on any difference"
	topologyDescribeSummary = "print the topic specification (a table, or -o json|yaml); needs no broker"
	topologyArgs            = "[topic...]  (base names, e.g. policy.catalog; default: all)"
	topologyMembersSummary  = "how many consumer-group members each stage can use, and what bounds it; needs no broker"
)

func init() {
	register(command{name: "topology apply", summary: topologyApplySummary, run: runTopologyApply})
	register(command{name: "topology verify", summary: topologyVerifySummary, run: runTopologyVerify})
	register(command{name: "topology describe", summary: topologyDescribeSummary, run: runTopologyDescribe})
	register(command{name: "topology members", summary: topologyMembersSummary, run: runTopologyMembers})
}

// runTopologyMembers prints, for every stage, the partitions of the topics
// its consumer group reads and how many members it can use
// (topology.Members): a member beyond that number gets no partition.
func runTopologyMembers(ctx context.Context, args []string) error {
	var f topologyFlags
	fs := newFlagSet(ctx, "topology members", topologyMembersSummary, "")
	f.registerPartitions(fs)
	out := registerOutputFlag(fs, outputTable)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	format, err := out.check()
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("topology members takes no arguments, got %q", fs.Args())
	}
	f.replication = -1
	o, err := f.options()
	if err != nil {
		return err
	}
	var uses []topology.StageUse
	for _, s := range stages.All() {
		u, err := topology.Members(s.Name, s.Inputs, o)
		if err != nil {
			return err
		}
		uses = append(uses, u)
	}
	if format == outputTable {
		w := tabwriter.NewWriter(stdout(ctx), 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "STAGE\tMEMBERS\tINPUTS (PARTITIONS)\tBOUNDED BY")
		for _, u := range uses {
			ins := make([]string, len(u.Inputs))
			for i, in := range u.Inputs {
				ins[i] = fmt.Sprintf("%s (%d)", in.Topic, in.Partitions)
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", u.Stage, u.Members, strings.Join(ins, ", "), u.Why)
		}
		return w.Flush()
	}
	data, err := json.Marshal(struct {
		Stages []topology.StageUse `json:"stages"`
	}{uses})
	if err != nil {
		return err
	}
	return printOutput(stdout(ctx), format, data, nil)
}

// topologyFlags are the flags the topology commands share.
type topologyFlags struct {
	kafka       runtime.Kafka
	partitions  int
	replication int
	timeout     time.Duration
}

func (f *topologyFlags) registerPartitions(fs *flag.FlagSet) {
	fs.IntVar(&f.partitions, "partitions", 0, "give every topic this many partitions instead of the specification's count (dev and tests); 0 keeps the specification")
}

// registerBroker adds the flags of commands that talk to the cluster.
func (f *topologyFlags) registerBroker(fs *flag.FlagSet) {
	f.kafka.RegisterFlags(fs)
	f.registerPartitions(fs)
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "give up when the cluster has not answered within this time")
}

// options turns the flags into topology options.
func (f *topologyFlags) options() (topology.Options, error) {
	if f.partitions < 0 || f.partitions > math.MaxInt32 {
		return topology.Options{}, usageErrorf("--partitions %d: want 0 (the specification's counts) or a positive count", f.partitions)
	}
	if f.replication < -1 || f.replication == 0 || f.replication > math.MaxInt16 {
		return topology.Options{}, usageErrorf("--replication-factor %d: want -1 (the broker default) or a positive count", f.replication)
	}
	return topology.Options{
		Prefix:            f.kafka.Prefix,
		Partitions:        int32(f.partitions),
		ReplicationFactor: int16(f.replication),
	}, nil
}

// selectTopics returns the topics named by base name in args, or the whole
// topology when args is empty.
func selectTopics(args []string) ([]topology.Topic, error) {
	if len(args) == 0 {
		return topology.Default(), nil
	}
	var out []topology.Topic
	for _, name := range args {
		t, ok := topology.Find(name)
		if !ok {
			return nil, usageErrorf("no topic %q in the topology; 'policyctl topology describe' lists them (base names, without the prefix)", name)
		}
		out = append(out, t)
	}
	return out, nil
}

// newAdmin connects an admin client to the cluster the flags name.
func newAdmin(k runtime.Kafka) (*kadm.Client, error) {
	opts, err := k.ClientOpts()
	if err != nil {
		return nil, fmt.Errorf("kafka configuration: %w", err)
	}
	opts = append(opts, kgo.ClientID("policyctl"))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("create kafka client for %s: %w", strings.Join(k.Brokers, ","), err)
	}
	return kadm.NewClient(cl), nil
}

// withBrokerHint says what to check when the brokers could not be talked
// to (runtime's Kafka.Explain), and adds how long they were waited for to
// a timeout.
func withBrokerHint(err error, f *topologyFlags) error {
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (no complete answer from brokers %s within %s)", err, strings.Join(f.kafka.Brokers, ","), f.timeout)
	}
	return f.kafka.Explain(err)
}

// brokerCommand parses the flags and arguments of a command that talks to
// the cluster and connects to it.
func brokerCommand(ctx context.Context, name, summary string, args []string, withReplication bool) (*topologyFlags, []topology.Topic, topology.Options, *kadm.Client, error) {
	var f topologyFlags
	fs := newFlagSet(ctx, name, summary, topologyArgs)
	f.registerBroker(fs)
	if withReplication {
		fs.IntVar(&f.replication, "replication-factor", -1, "replication factor of created topics; -1 uses the broker default")
	} else {
		f.replication = -1
	}
	if err := parseFlags(fs, args); err != nil {
		return nil, nil, topology.Options{}, nil, err
	}
	topics, err := selectTopics(fs.Args())
	if err != nil {
		return nil, nil, topology.Options{}, nil, err
	}
	o, err := f.options()
	if err != nil {
		return nil, nil, topology.Options{}, nil, err
	}
	if f.timeout <= 0 {
		return nil, nil, topology.Options{}, nil, usageErrorf("--timeout %s: want a positive duration", f.timeout)
	}
	adm, err := newAdmin(f.kafka)
	if err != nil {
		return nil, nil, topology.Options{}, nil, err
	}
	return &f, topics, o, adm, nil
}

func runTopologyApply(ctx context.Context, args []string) error {
	f, topics, o, adm, err := brokerCommand(ctx, "topology apply", topologyApplySummary, args, true)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()

	rep, err := topology.Apply(ctx, adm, topics, o)
	out := stdout(ctx)
	for _, c := range rep.Changes {
		fmt.Fprintln(out, c)
	}
	for _, d := range rep.Left {
		fmt.Fprintln(out, "left:", d)
	}
	if err != nil {
		fmt.Fprintln(out, rep)
		return withBrokerHint(err, f)
	}
	fmt.Fprintln(out, rep)
	if len(rep.Left) > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("%d %s apply cannot fix; an operator has to", len(rep.Left), pluralWord(len(rep.Left), "difference", "differences"))}
	}
	return nil
}

func runTopologyVerify(ctx context.Context, args []string) error {
	f, topics, o, adm, err := brokerCommand(ctx, "topology verify", topologyVerifySummary, args, false)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()

	drifts, err := topology.Verify(ctx, adm, topics, o)
	if err != nil {
		return withBrokerHint(err, f)
	}
	out := stdout(ctx)
	for _, d := range drifts {
		fmt.Fprintln(out, d)
	}
	if len(drifts) == 0 {
		fmt.Fprintf(out, "%d %s match the specification\n", len(topics), pluralWord(len(topics), "topic", "topics"))
		return nil
	}
	fixable := 0
	for _, d := range drifts {
		if d.Fixable {
			fixable++
		}
	}
	msg := fmt.Sprintf("%d %s from the specification", len(drifts), pluralWord(len(drifts), "difference", "differences"))
	if fixable > 0 {
		msg += fmt.Sprintf("; 'policyctl topology apply' fixes %d", fixable)
	}
	return &exitError{code: exitFailure, err: errors.New(msg)}
}

func runTopologyDescribe(ctx context.Context, args []string) error {
	var f topologyFlags
	fs := newFlagSet(ctx, "topology describe", topologyDescribeSummary, topologyArgs)
	fs.StringVar(&f.kafka.Prefix, "topic-prefix", runtime.EnvOr("PF_TOPIC_PREFIX", ""), "prefix for every topic name, e.g. \"staging.\" (env PF_TOPIC_PREFIX)")
	f.registerPartitions(fs)
	out := registerOutputFlag(fs, outputTable)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	format, err := out.check()
	if err != nil {
		return err
	}
	topics, err := selectTopics(fs.Args())
	if err != nil {
		return err
	}
	f.replication = -1
	o, err := f.options()
	if err != nil {
		return err
	}
	var table bytes.Buffer
	if err := topology.Describe(&table, topics, o); err != nil {
		return fmt.Errorf("describe topics with prefix %q: %w", o.Prefix, err)
	}
	if format == outputTable {
		_, err := stdout(ctx).Write(table.Bytes())
		return err
	}
	// The same facts as data: {"topics": [...]}, retention in ms (-1:
	// unlimited) and no schema as "".
	type topicFacts struct {
		Topic       string   `json:"topic"`
		Partitions  int32    `json:"partitions"`
		Key         string   `json:"key"`
		ValueSchema string   `json:"value_schema"`
		Cleanup     string   `json:"cleanup"`
		RetentionMs int64    `json:"retention_ms"`
		Writers     []string `json:"writers"`
		Readers     []string `json:"readers"`
	}
	facts := struct {
		Topics []topicFacts `json:"topics"`
	}{Topics: []topicFacts{}}
	for _, t := range topics {
		facts.Topics = append(facts.Topics, topicFacts{Topic: o.Name(t), Partitions: o.PartitionsOf(t), Key: t.Key, ValueSchema: t.ValueSchema,
			Cleanup: t.Cleanup, RetentionMs: t.RetentionMs(), Writers: nonNil(t.Writers), Readers: nonNil(t.Readers)})
	}
	data, err := json.Marshal(facts)
	if err != nil {
		return err
	}
	return printOutput(stdout(ctx), format, data, nil)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
