package topology

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// maxTopicNameLen is the longest topic name Kafka accepts.
const maxTopicNameLen = 249

// Options say where on the cluster the topology lives.
type Options struct {
	// Prefix goes in front of every base name, so several environments
	// (or tests) can share one cluster, e.g. "staging.".
	Prefix string
	// Partitions, when above zero, replaces every topic's partition count;
	// tests and the dev stack use it. Zero keeps the counts of the spec.
	Partitions int32
	// ReplicationFactor for created topics; -1 (or 0) lets the broker
	// choose its default.
	ReplicationFactor int16
}

// Name returns the name of t on the cluster: the prefix and the base name.
func (o Options) Name(t Topic) string { return o.Prefix + t.Name }

// PartitionsOf returns the partition count t should have under o.
func (o Options) PartitionsOf(t Topic) int32 {
	if o.Partitions > 0 {
		return o.Partitions
	}
	return t.Partitions
}

func (o Options) replicationFactor() int16 {
	if o.ReplicationFactor <= 0 {
		return -1
	}
	return o.ReplicationFactor
}

func (o Options) validate(topics []Topic) error {
	var errs []error
	if strings.IndexFunc(o.Prefix, func(c rune) bool { return !legalTopicChar(c) }) >= 0 {
		errs = append(errs, fmt.Errorf("topic prefix %q may only hold letters, digits, '.', '_' and '-'", o.Prefix))
	}
	if o.Partitions < 0 {
		errs = append(errs, fmt.Errorf("partition override %d is negative; use 0 to keep the spec's counts", o.Partitions))
	}
	if o.ReplicationFactor < -1 {
		errs = append(errs, fmt.Errorf("replication factor %d: use -1 for the broker default or a positive count", o.ReplicationFactor))
	}
	for _, t := range topics {
		if n := o.Name(t); len(n) > maxTopicNameLen {
			errs = append(errs, fmt.Errorf("topic %q is %d characters long, Kafka allows %d", n, len(n), maxTopicNameLen))
		}
	}
	if err := Validate(topics); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("topology: invalid specification: %w", err)
	}
	return nil
}

// DriftKind says what part of a topic differs from its specification.
type DriftKind string

// The kinds of drift Verify reports.
const (
	DriftMissing    DriftKind = "missing"    // the topic does not exist
	DriftPartitions DriftKind = "partitions" // the partition count differs
	DriftConfig     DriftKind = "config"     // a config of the spec has another value, or none
)

// Drift is one difference between the cluster and the specification.
type Drift struct {
	Topic  string    // name on the cluster
	Kind   DriftKind // what differs
	Config string    // the config key, for DriftConfig
	Want   string    // the spec: partition count, config value, or for a missing topic a summary
	Got    string    // what the cluster has; empty when the config is not set
	// Fixable says whether Apply fixes this drift; Reason says why not
	// when it does not.
	Fixable bool
	Reason  string
}

// String says in one line what is wrong and what Apply does about it.
func (d Drift) String() string {
	var what, fix string
	switch d.Kind {
	case DriftMissing:
		what = "missing"
		fix = "apply creates it with " + d.Want
	case DriftPartitions:
		what = fmt.Sprintf("%s partitions, spec %s", d.Got, d.Want)
		fix = "apply adds partitions up to " + d.Want
	case DriftConfig:
		got := d.Got
		if got == "" {
			got = "unset"
		}
		what = fmt.Sprintf("%s is %s, spec %s", d.Config, got, d.Want)
		fix = "apply sets it"
	default:
		what = string(d.Kind)
	}
	if !d.Fixable {
		fix = "apply leaves it: " + d.Reason
	}
	return fmt.Sprintf("%s: %s; %s", d.Topic, what, fix)
}

// ChangeKind says what Apply did to a topic.
type ChangeKind string

// The changes Apply makes.
const (
	ChangeCreated    ChangeKind = "created"
	ChangeConfig     ChangeKind = "config"
	ChangePartitions ChangeKind = "partitions"
)

// Change is one thing Apply did.
type Change struct {
	Topic  string     // name on the cluster
	Kind   ChangeKind // what was done
	Config string     // the config key, for ChangeConfig
	From   string     // the value before; empty for a created topic or a config that was not set
	To     string     // the value after; for a created topic, its partitions and configs
}

// String says in one line what Apply did.
func (c Change) String() string {
	switch c.Kind {
	case ChangeCreated:
		return fmt.Sprintf("created %s: %s", c.Topic, c.To)
	case ChangePartitions:
		return fmt.Sprintf("grew %s from %s to %s partitions (new records of a key may land on another partition than its older ones)", c.Topic, c.From, c.To)
	case ChangeConfig:
		from := c.From
		if from == "" {
			from = "unset"
		}
		s := fmt.Sprintf("set %s %s=%s (was %s)", c.Topic, c.Config, c.To, from)
		if c.Config == "cleanup.policy" {
			switch {
			case strings.Contains(c.From, CleanupCompact) && !strings.Contains(c.To, CleanupCompact):
				s += "; the topic no longer keeps the latest record per key: records older than retention.ms will be deleted"
			case !strings.Contains(c.From, CleanupCompact) && strings.Contains(c.To, CleanupCompact):
				s += "; the topic now keeps only the latest record per key and rejects records without a key"
			}
		}
		return s
	default:
		return fmt.Sprintf("%s %s %s", c.Kind, c.Topic, c.To)
	}
}

// Report is what Apply did and what it left as it was.
type Report struct {
	Topics  int      // how many topics were checked
	Changes []Change // what Apply changed, in specification order
	Left    []Drift  // differences Apply does not fix
}

// Changed reports whether Apply changed anything on the cluster.
func (r Report) Changed() bool { return len(r.Changes) > 0 }

// String summarizes the report in one line.
func (r Report) String() string {
	var created, configs, grown int
	for _, c := range r.Changes {
		switch c.Kind {
		case ChangeCreated:
			created++
		case ChangeConfig:
			configs++
		case ChangePartitions:
			grown++
		}
	}
	var parts []string
	if created > 0 {
		parts = append(parts, plural(created, "topic", "topics")+" created")
	}
	if configs > 0 {
		parts = append(parts, plural(configs, "config", "configs")+" set")
	}
	if grown > 0 {
		parts = append(parts, plural(grown, "topic", "topics")+" grown")
	}
	if len(r.Left) > 0 {
		parts = append(parts, plural(len(r.Left), "difference", "differences")+" left as is")
	}
	if len(parts) == 0 {
		return plural(r.Topics, "topic", "topics") + ": all as specified, nothing changed"
	}
	return plural(r.Topics, "topic", "topics") + ": " + strings.Join(parts, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// observed is what the cluster has for one topic.
type observed struct {
	exists     bool
	partitions int32
	configs    map[string]string // only configs the broker reported
}

// inspect reads the existence, partition count and configs of the named
// topics from the cluster.
func inspect(ctx context.Context, adm *kadm.Client, names []string) (map[string]observed, error) {
	out := make(map[string]observed, len(names))
	if len(names) == 0 {
		return out, nil
	}
	// kadm answers ListTopics from the client's metadata cache, which can
	// be older than a topic just created or grown; asking for authorized
	// operations makes it send a fresh metadata request instead.
	details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), names...)
	if err != nil {
		return nil, fmt.Errorf("topology: list topics: %w", err)
	}
	var existing []string
	var errs []error
	for _, n := range names {
		d, ok := details[n]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			out[n] = observed{}
		case d.Err != nil:
			errs = append(errs, fmt.Errorf("topology: describe topic %s: %w", n, d.Err))
		default:
			out[n] = observed{exists: true, partitions: int32(len(d.Partitions)), configs: map[string]string{}}
			existing = append(existing, n)
		}
	}
	if len(existing) > 0 {
		rcs, err := adm.DescribeTopicConfigs(ctx, existing...)
		if err != nil {
			errs = append(errs, fmt.Errorf("topology: describe configs of %d topics: %w", len(existing), err))
		}
		got := make(map[string]bool, len(rcs))
		for _, rc := range rcs {
			o, ok := out[rc.Name]
			if !ok || !o.exists {
				continue
			}
			got[rc.Name] = true
			if rc.Err != nil {
				errs = append(errs, fmt.Errorf("topology: describe configs of topic %s: %w", rc.Name, withMessage(rc.Err, rc.ErrMessage)))
				continue
			}
			for _, c := range rc.Configs {
				if c.Value != nil {
					o.configs[c.Key] = *c.Value
				}
			}
		}
		if err == nil {
			for _, n := range existing {
				if !got[n] {
					errs = append(errs, fmt.Errorf("topology: describe configs of topic %s: the broker did not answer for it", n))
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func withMessage(err error, msg string) error {
	if msg == "" {
		return err
	}
	return fmt.Errorf("%w: %s", err, msg)
}

// diff compares one topic with what the cluster has.
func diff(t Topic, o Options, obs observed) []Drift {
	name := o.Name(t)
	want := o.PartitionsOf(t)
	if !obs.exists {
		return []Drift{{Topic: name, Kind: DriftMissing, Want: summary(t, o), Fixable: true}}
	}
	var ds []Drift
	if obs.partitions != want {
		d := Drift{
			Topic: name, Kind: DriftPartitions,
			Want: strconv.Itoa(int(want)), Got: strconv.Itoa(int(obs.partitions)),
			Fixable: true,
		}
		switch {
		case obs.partitions > want:
			d.Fixable, d.Reason = false, "Kafka cannot remove partitions; recreate the topic to shrink it"
		case t.Cleanup == CleanupCompact:
			d.Fixable, d.Reason = false, "adding partitions to a compacted topic strands each key's history on its old partition, "+
				"where compaction can no longer replace it; recreate the topic and replay its data instead"
		}
		ds = append(ds, d)
	}
	cfg := t.KafkaConfigs()
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		got, ok := obs.configs[k]
		if ok && sameConfig(cfg[k], got) {
			continue
		}
		ds = append(ds, Drift{Topic: name, Kind: DriftConfig, Config: k, Want: cfg[k], Got: got, Fixable: true})
	}
	return ds
}

// summary describes a topic to create: partitions and every config.
func summary(t Topic, o Options) string {
	cfg := t.KafkaConfigs()
	parts := []string{plural(int(o.PartitionsOf(t)), "partition", "partitions")}
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		parts = append(parts, k+"="+cfg[k])
	}
	return strings.Join(parts, ", ")
}

// sameConfig compares config values the way the broker means them: numbers
// by value ("0.10" is "0.1") and lists without regard to order or spaces.
func sameConfig(want, got string) bool {
	if want == got {
		return true
	}
	if a, err := strconv.ParseFloat(want, 64); err == nil {
		if b, err := strconv.ParseFloat(got, 64); err == nil {
			return a == b
		}
	}
	norm := func(s string) string {
		items := strings.Split(s, ",")
		for i := range items {
			items[i] = strings.TrimSpace(items[i])
		}
		slices.Sort(items)
		return strings.Join(items, ",")
	}
	return norm(want) == norm(got)
}

// Verify compares the cluster with the specification and returns every
// difference: missing topics, partition counts, and values of
// cleanup.policy, retention.ms and the extra configs. Configs the
// specification does not name are not compared. An empty result means the
// cluster matches.
func Verify(ctx context.Context, adm *kadm.Client, topics []Topic, o Options) ([]Drift, error) {
	if err := o.validate(topics); err != nil {
		return nil, err
	}
	obs, err := inspect(ctx, adm, names(topics, o))
	if err != nil {
		return nil, err
	}
	var drifts []Drift
	for _, t := range topics {
		drifts = append(drifts, diff(t, o, obs[o.Name(t)])...)
	}
	return drifts, nil
}

func names(topics []Topic, o Options) []string {
	out := make([]string, len(topics))
	for i, t := range topics {
		out[i] = o.Name(t)
	}
	return out
}

// Apply makes the cluster match the specification: it creates missing
// topics with their configs, sets every config whose value differs, and
// adds partitions to delete-policy topics that have fewer than specified.
// It never removes partitions and never adds them to a compacted topic;
// those differences come back in Report.Left. Running it again changes
// nothing. Every topic's own error is checked: Apply carries on with the
// other topics and returns all errors joined, with the report of what it
// did.
func Apply(ctx context.Context, adm *kadm.Client, topics []Topic, o Options) (Report, error) {
	if err := o.validate(topics); err != nil {
		return Report{}, err
	}
	rep := Report{Topics: len(topics)}
	byName := make(map[string]Topic, len(topics))
	for _, t := range topics {
		byName[o.Name(t)] = t
	}

	obs, err := inspect(ctx, adm, names(topics, o))
	if err != nil {
		return rep, err
	}
	var missing []Topic
	for _, t := range topics {
		if !obs[o.Name(t)].exists {
			missing = append(missing, t)
		}
	}
	created, raced, createErr := create(ctx, adm, missing, o)
	rep.Changes = append(rep.Changes, created...)

	// A topic someone else created between our look and our create is
	// inspected again and fixed like any existing one.
	var errs []error
	if createErr != nil {
		errs = append(errs, createErr)
	}
	if len(raced) > 0 {
		again, err := inspect(ctx, adm, raced)
		if err != nil {
			errs = append(errs, err)
		} else {
			maps.Copy(obs, again)
		}
	}

	grow := make(map[int32][]string) // wanted count -> topics
	from := make(map[string]string)
	for _, t := range topics {
		name := o.Name(t)
		ob := obs[name]
		if !ob.exists {
			continue // created above, or its creation failed and was reported
		}
		var sets []Drift
		for _, d := range diff(t, o, ob) {
			switch {
			case !d.Fixable:
				rep.Left = append(rep.Left, d)
			case d.Kind == DriftConfig:
				sets = append(sets, d)
			case d.Kind == DriftPartitions:
				want := o.PartitionsOf(t)
				grow[want] = append(grow[want], name)
				from[name] = d.Got
			}
		}
		if len(sets) > 0 {
			changes, err := setConfigs(ctx, adm, name, sets)
			rep.Changes = append(rep.Changes, changes...)
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	grown, growErrs := growPartitions(ctx, adm, grow, from)
	rep.Changes = append(rep.Changes, grown...)
	errs = append(errs, growErrs...)
	order := make(map[string]int, len(topics))
	for i, t := range topics {
		order[o.Name(t)] = i
	}
	slices.SortStableFunc(rep.Changes, func(a, b Change) int { return order[a.Topic] - order[b.Topic] })
	return rep, errors.Join(errs...)
}

// growPartitions grows topics to the wanted partition counts (grow: the
// topics by wanted count; from: each topic's count as seen), one request
// per count, and returns what it changed and every topic's error.
func growPartitions(ctx context.Context, adm *kadm.Client, grow map[int32][]string, from map[string]string) ([]Change, []error) {
	var changes []Change
	var errs []error
	for _, want := range slices.Sorted(maps.Keys(grow)) {
		topicNames := grow[want]
		resps, err := adm.UpdatePartitions(ctx, int(want), topicNames...)
		if err != nil {
			errs = append(errs, fmt.Errorf("topology: grow %s to %d partitions: %w", strings.Join(topicNames, ", "), want, err))
			continue
		}
		for _, n := range topicNames {
			r, ok := resps[n]
			if ok && errors.Is(r.Err, kerr.InvalidPartitions) && grownMeanwhile(ctx, adm, n, want) {
				continue // another apply grew it between our look and our request
			}
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("topology: grow topic %s to %d partitions: the broker did not answer for it", n, want))
			case r.Err != nil:
				errs = append(errs, fmt.Errorf("topology: grow topic %s to %d partitions: %w", n, want, withMessage(r.Err, r.ErrMessage)))
			default:
				changes = append(changes, Change{Topic: n, Kind: ChangePartitions, From: from[n], To: strconv.Itoa(int(want))})
			}
		}
	}
	return changes, errs
}

// grownMeanwhile reports whether the topic now has at least want
// partitions, which is what a refused grow request means when several
// applies run at once.
func grownMeanwhile(ctx context.Context, adm *kadm.Client, name string, want int32) bool {
	obs, err := inspect(ctx, adm, []string{name})
	return err == nil && obs[name].partitions >= want
}

// create creates the given topics, one request per distinct partition
// count and config set. It returns what it created, the names that already
// existed by the time the request arrived, and every other per-topic error.
func create(ctx context.Context, adm *kadm.Client, topics []Topic, o Options) ([]Change, []string, error) {
	type group struct {
		partitions int32
		configs    map[string]*string
		topics     []Topic
	}
	groups := make(map[string]*group)
	var keys []string
	for _, t := range topics {
		cfg := t.KafkaConfigs()
		key := strconv.Itoa(int(o.PartitionsOf(t)))
		for _, k := range slices.Sorted(maps.Keys(cfg)) {
			key += "\x00" + k + "=" + cfg[k]
		}
		g, ok := groups[key]
		if !ok {
			g = &group{partitions: o.PartitionsOf(t), configs: make(map[string]*string, len(cfg))}
			for k, v := range cfg {
				g.configs[k] = kadm.StringPtr(v)
			}
			groups[key] = g
			keys = append(keys, key)
		}
		g.topics = append(g.topics, t)
	}

	var (
		changes []Change
		raced   []string
		errs    []error
	)
	for _, key := range keys {
		g := groups[key]
		topicNames := names(g.topics, o)
		resps, err := adm.CreateTopics(ctx, g.partitions, o.replicationFactor(), g.configs, topicNames...)
		if err != nil {
			errs = append(errs, fmt.Errorf("topology: create topics %s: %w", strings.Join(topicNames, ", "), err))
			continue
		}
		for _, t := range g.topics {
			n := o.Name(t)
			r, ok := resps[n]
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("topology: create topic %s: the broker did not answer for it", n))
			case errors.Is(r.Err, kerr.TopicAlreadyExists):
				raced = append(raced, n)
			case r.Err != nil:
				errs = append(errs, fmt.Errorf("topology: create topic %s: %w", n, withMessage(r.Err, r.ErrMessage)))
			default:
				changes = append(changes, Change{Topic: n, Kind: ChangeCreated, To: summary(t, o)})
			}
		}
	}
	return changes, raced, errors.Join(errs...)
}

// setConfigs sets the drifted configs of one topic in one incremental
// alter request.
func setConfigs(ctx context.Context, adm *kadm.Client, name string, drifts []Drift) ([]Change, error) {
	ops := make([]kadm.AlterConfig, len(drifts))
	keys := make([]string, len(drifts))
	for i, d := range drifts {
		ops[i] = kadm.AlterConfig{Op: kadm.SetConfig, Name: d.Config, Value: kadm.StringPtr(d.Want)}
		keys[i] = d.Config
	}
	resps, err := adm.AlterTopicConfigs(ctx, ops, name)
	if err != nil {
		return nil, fmt.Errorf("topology: set %s of topic %s: %w", strings.Join(keys, ", "), name, err)
	}
	r, err := resps.On(name, nil)
	if err != nil {
		return nil, fmt.Errorf("topology: set %s of topic %s: the broker did not answer for it", strings.Join(keys, ", "), name)
	}
	if r.Err != nil {
		return nil, fmt.Errorf("topology: set %s of topic %s: %w", strings.Join(keys, ", "), name, withMessage(r.Err, r.ErrMessage))
	}
	changes := make([]Change, len(drifts))
	for i, d := range drifts {
		changes[i] = Change{Topic: name, Kind: ChangeConfig, Config: d.Config, From: d.Got, To: d.Want}
	}
	return changes, nil
}
