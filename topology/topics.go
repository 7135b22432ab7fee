package topology

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"
)

// Base names of the topics, without any environment prefix. Use
// Options.Name or runtime.Kafka.Topic to get the name on the cluster.
const (
	PDPNotifications  = "pdp.notifications"
	PolicyCatalog     = "policy.catalog"
	PolicyChanges     = "policy.changes"
	DeployComponents  = "deploy.components"
	CatchupRequests   = "catchup.requests"
	CatchupProgress   = "catchup.progress"
	PolicyMatches     = "policy.matches"
	PolicySegments    = "policy.segments"
	ComponentPolicies = "component.policies"
	ComponentApplied  = "component.applied"
	ACMParticipant    = "acm.participant"
	ACMRuntime        = "acm.runtime"
	ACMSync           = "acm.sync"
	NMPPolicies       = "nmp.policies"
	AgentNodes        = "agent.nodes"
	AgentDirectives   = "agent.directives"
	AgentStatus       = "agent.status"
	AgentPackages     = "agent.packages"
	NMPRecompute      = "nmp.recompute"
	Schemas           = "schemas"
	DeployRequests    = "deploy.requests"
	AdmissionVerdicts = "admission.verdicts"
	AdmissionNotices  = "admission.notices"
	AdmissionAudit    = "admission.audit"
	AppPolicies       = "app.policies"
	Datacenters       = "placement.datacenters"
	Deployments       = "deploy.deployments"
	BillingEvents     = "billing.events"
	PolicyRollouts    = "policy.rollouts"
	MatcherHoldings   = "matcher.holdings"
)

// DeployRequestsKey is the key of every deploy.requests record: the
// requests of all deployments share one partition, so the admission
// stage decides them one at a time in one order. Whatever counts what is
// already deployed (capacity on a datacenter, quotas per environment and
// per tenant, required applications per environment, and who holds which
// name) is decided against every decision before it: two requests racing
// for the last capacity cannot both be admitted, on one stage member or
// several.
const DeployRequestsKey = "deployments"

// The pipeline stages that are built; each is its own binary and consumer
// group and owns one dead letter topic, DLQ(stage).
const (
	StagePDPIngest     = "pdp-ingest"
	StageMatcher       = "matcher"
	StageSegmenter     = "segmenter"
	StageExecutor      = "executor"
	StageConsulWriter  = "consul-writer"
	StageAgentNotifier = "agent-notifier"
	StageReplicaSync   = "replica-sync"
	StageNMPHub        = "nmp-hub"
	StageAdmission     = "admission"
)

// Roles outside the stages that write or read topics.
const (
	RolePDPAdapter       = "pdp-adapter"
	RoleNorthAPI         = "north-api"
	RolePolicyctl        = "policyctl"
	RoleDeploymentSystem = "deployment-system"
	RoleScheduler        = "scheduler"
	RoleACMRuntime       = "acm-runtime"
	RoleParticipants     = "participants"
	RoleAgents           = "agents"
	RoleOperators        = "operators"
	// RoleEveryStage stands for all of Stages().
	RoleEveryStage = "every-stage"
)

// Cleanup policies.
const (
	CleanupDelete  = "delete"
	CleanupCompact = "compact"
)

// Retentions used when a Topic leaves Retention at zero, and for dead
// letters.
const (
	DefaultDeleteRetention = 7 * 24 * time.Hour
	DLQRetention           = 14 * 24 * time.Hour
)

// Partition counts of the starting topology: busy topics get
// DefaultPartitions so a stage can spread over several members; topics that
// see a handful of records a day get one, which also keeps them in order.
// The co-partitioned topics (policy.changes, deploy.components,
// catchup.requests, component.policies, matcher.holdings; pdp.notifications and
// policy.catalog; agent.nodes, agent.status and nmp.recompute) must keep
// equal partition counts.
const (
	DefaultPartitions   int32 = 6
	ACMPartitions       int32 = 3
	LowVolumePartitions int32 = 1
)

// Topic is the specification of one topic.
type Topic struct {
	Name        string            // base name without prefix, e.g. "policy.catalog"
	Partitions  int32             // partition count
	Key         string            // what the record key is, e.g. "policy_id"
	ValueSchema string            // Avro schema full name, e.g. "policyflow.PolicyCatalogEntry"; "" for raw bytes (DLQ, schemas)
	Cleanup     string            // CleanupDelete or CleanupCompact
	Retention   time.Duration     // retention.ms; 0 means unlimited (-1) for compacted topics and DefaultDeleteRetention for delete topics
	Writers     []string          // roles that write it
	Readers     []string          // roles that read it
	Configs     map[string]string // extra topic configs, e.g. min.compaction.lag.ms
	Doc         string            // one line
	// Keys is how many distinct keys the topic's records have when the
	// design fixes it (deploy.requests: one, so that one member decides
	// every request in one order); 0 when it is unbounded. Records of
	// one key share a partition, so a group reading the topic can use at
	// most this many members (Members).
	Keys int
}

// compactConfigs make compaction run promptly without churning: the active
// segment rolls hourly so recent records become cleanable, a log is cleaned
// once a tenth of it is superseded, a record stays readable for at least a
// minute before it can be compacted away (so a consumer a little behind
// still sees every change), and tombstones stay a day so a stage that
// rebuilds its state within a day still sees removals.
func compactConfigs() map[string]string {
	return map[string]string{
		"min.cleanable.dirty.ratio": "0.1",
		"segment.ms":                strconv.FormatInt(time.Hour.Milliseconds(), 10),
		"min.compaction.lag.ms":     strconv.FormatInt(time.Minute.Milliseconds(), 10),
		"delete.retention.ms":       strconv.FormatInt((24 * time.Hour).Milliseconds(), 10),
	}
}

// MaxRecordBytes is the largest record policyflow writes (64 MiB), the one
// record limit: every topic is created with it as max.message.bytes, every
// producer takes batches up to it, and the segmenter cuts deltas under it.
// A component's full policy collection, and a delta before the segmenter
// cuts it, can be several MiB.
const MaxRecordBytes = 64 << 20

// MaxMessageBytes is MaxRecordBytes as the max.message.bytes topic config.
var MaxMessageBytes = strconv.Itoa(MaxRecordBytes)

// Stages returns the names of the built pipeline stages in pipeline order.
func Stages() []string {
	return []string{
		StageAdmission,
		StagePDPIngest,
		StageMatcher,
		StageSegmenter,
		StageExecutor,
		StageConsulWriter,
		StageAgentNotifier,
		StageReplicaSync,
		StageNMPHub,
	}
}

// DLQ returns the base name of the dead letter topic of a stage.
func DLQ(stage string) string { return "dlq." + stage }

// Default returns the whole starting topology: the pipeline topics, the
// schemas topic and one dead letter topic per stage. Each call returns a
// fresh copy the caller may change.
func Default() []Topic {
	compact := func(t Topic) Topic {
		t.Cleanup = CleanupCompact
		t.Configs = compactConfigs()
		t.Configs["max.message.bytes"] = MaxMessageBytes
		return t
	}
	del := func(t Topic) Topic {
		t.Cleanup = CleanupDelete
		t.Configs = map[string]string{"max.message.bytes": MaxMessageBytes}
		return t
	}
	l := func(s ...string) []string { return s }

	topics := []Topic{
		del(Topic{
			Name: PDPNotifications, Partitions: DefaultPartitions, Key: "policy_id", ValueSchema: "policyflow.PdpNotification",
			Writers: l(RolePDPAdapter, RoleNorthAPI, RolePolicyctl, StagePDPIngest, StageAdmission), Readers: l(StagePDPIngest),
			Doc: "policy engine notifications: loaded and removed policies with name, version and matching conditions",
		}),
		compact(Topic{
			Name: PolicyCatalog, Partitions: DefaultPartitions, Key: "policy_id", ValueSchema: "policyflow.PolicyCatalogEntry",
			Writers: l(StagePDPIngest), Readers: l(StageMatcher, StageSegmenter, RoleNorthAPI),
			Doc: "latest valid policy body per policy_id and its body_hash; tombstone when the policy is removed",
		}),
		del(Topic{
			Name: PolicyChanges, Partitions: DefaultPartitions, Key: "policy_id", ValueSchema: "policyflow.PolicyChange",
			Writers: l(StagePDPIngest), Readers: l(StageMatcher),
			Doc: "what changed for a policy: updated, removed or errored, old and new version; an update carries the new version's header (name, matching conditions, body_hash), not its body",
		}),
		compact(Topic{
			Name: DeployComponents, Partitions: DefaultPartitions, Key: "component_id", ValueSchema: "policyflow.Component",
			Writers: l(RoleDeploymentSystem, RoleNorthAPI, RolePolicyctl, StageAdmission), Readers: l(StageMatcher, StageExecutor),
			Doc: "deployed components with their policy ids, policy filters and notify target; tombstone when uninstalled",
		}),
		del(Topic{
			Name: DeployRequests, Partitions: DefaultPartitions, Key: "deployments (constant)", Keys: 1, ValueSchema: "policyflow.DeploymentRequest",
			Writers: l(RoleNorthAPI), Readers: l(StageAdmission),
			Doc: "deployment requests (tenant, environment, applications) and deletions, to be admitted or denied by the tenant's application policies against what is deployed",
		}),
		compact(Topic{
			Name: Deployments, Partitions: LowVolumePartitions, Key: "deployment_id", ValueSchema: "policyflow.Deployment",
			Writers: l(StageAdmission), Readers: l(StageAdmission, RoleNorthAPI),
			Doc: "what each admitted deployment holds (environment, applications, instances, resources on leaves with demands, bandwidth, the admitted request); tombstone when deleted",
		}),
		del(Topic{
			Name: BillingEvents, Partitions: DefaultPartitions, Key: "deployment_id", ValueSchema: "policyflow.BillingEvent",
			Writers: l(StageAdmission), Readers: l(RoleOperators),
			Doc: "one event per admitted and per deleted deployment: tenant, environment, applications with instances and flavours, time",
		}),
		compact(Topic{
			Name: AdmissionVerdicts, Partitions: DefaultPartitions, Key: "deployment_id", ValueSchema: "policyflow.AdmissionVerdict",
			Writers: l(StageAdmission), Readers: l(RoleNorthAPI),
			Doc: "the latest verdict on each deployment: admitted (with the mutated request and the components registered) or denied with every violation",
		}),
		del(Topic{
			Name: AdmissionNotices, Partitions: DefaultPartitions, Key: "deployment_id", ValueSchema: "policyflow.AdmissionNotice",
			Writers: l(StageAdmission), Readers: l(RoleOperators),
			Doc: "notices raised on deployment requests (an environment's instances over an InstanceNotice threshold, an InstanceQuota exceeded), written with the verdict; the admission stage also delivers each to its policy's webhook",
		}),
		compact(Topic{
			Name: AdmissionAudit, Partitions: DefaultPartitions, Key: "policy_id/deployment_id", ValueSchema: "policyflow.AuditEntry",
			Writers: l(StageAdmission), Readers: l(StageAdmission, RoleNorthAPI),
			Doc: "audit reports: each admitted deployment an application policy would deny now, refreshed when the policy changes and when the deployment is decided; tombstone when it no longer would, or either is deleted",
		}),
		compact(Topic{
			Name: AppPolicies, Partitions: LowVolumePartitions, Key: "policy_id", ValueSchema: "policyflow.AppPolicy",
			Writers: l(RoleNorthAPI), Readers: l(StageAdmission, RoleNorthAPI),
			Doc: "tenant application policies (seed 001): kind, parameters, tenants, mode; tombstone when deleted",
		}),
		compact(Topic{
			Name: Datacenters, Partitions: LowVolumePartitions, Key: "datacenter_id", ValueSchema: "policyflow.Datacenter",
			Writers: l(RoleNorthAPI), Readers: l(StageAdmission, RoleNorthAPI),
			Doc: "datacenter models (seed 002): location tree with levels, network tree on the same leaves, capacities and bandwidths; tombstone when deleted",
		}),
		del(Topic{
			Name: CatchupRequests, Partitions: DefaultPartitions, Key: "scope", ValueSchema: "policyflow.CatchupRequest",
			Writers: l(RoleScheduler, RoleNorthAPI, StagePDPIngest), Readers: l(StageMatcher, StageConsulWriter, StageAgentNotifier),
			Doc: "catch-up requests for everything or for one deployment",
		}),
		del(Topic{
			Name: CatchupProgress, Partitions: DefaultPartitions, Key: "request_id", ValueSchema: "policyflow.CatchupProgress",
			Writers: l(StageMatcher, StageConsulWriter, StageAgentNotifier), Readers: l(RoleNorthAPI),
			Doc: "what the matcher, the consul-writer and the agent-notifier did for a catch-up request, per catchup.requests partition, once done there",
		}),
		del(Topic{
			Name: PolicyMatches, Partitions: DefaultPartitions, Key: "deployment_id", ValueSchema: "policyflow.PolicyMatch",
			Writers: l(StageMatcher), Readers: l(StageSegmenter),
			Doc: "per-deployment policy delta, policies named by reference (policy_id, version, body_hash; no body): updated, added by filter, removed; catch_up flag and update_id",
		}),
		del(Topic{
			Name: PolicySegments, Partitions: DefaultPartitions, Key: "deployment_id", ValueSchema: "policyflow.PolicySegment",
			Writers: l(StageSegmenter), Readers: l(StageExecutor),
			Doc: "size-bounded pieces i/n of one per-deployment delta, policy bodies filled in from policy.catalog",
		}),
		compact(Topic{
			Name: ComponentPolicies, Partitions: DefaultPartitions, Key: "component_id", ValueSchema: "policyflow.ComponentPolicies",
			Writers: l(StageExecutor), Readers: l(StageMatcher, StageExecutor, StageConsulWriter),
			Doc: "a component's full policy collection, the last delta and its update_id",
		}),
		compact(Topic{
			Name: MatcherHoldings, Partitions: DefaultPartitions, Key: "component_id", ValueSchema: "policyflow.ComponentPolicies",
			Writers: l(StageMatcher), Readers: l(StageMatcher),
			Doc: "the matcher's changelog: what it has sent each component (policies by reference, no body), written in the transaction of the delta and read when a member is given the component's partition, so that the next member decides from exactly what was committed",
		}),
		compact(Topic{
			Name: ComponentApplied, Partitions: DefaultPartitions, Key: "component_id", ValueSchema: "policyflow.ComponentApplied",
			Writers: l(StageConsulWriter), Readers: l(StageAgentNotifier, RoleNorthAPI),
			Doc: "what was written to Consul for a component: update_id and Consul index",
		}),
		del(Topic{
			Name: ACMParticipant, Partitions: ACMPartitions, Key: "instance_id (composition_id for priming)", ValueSchema: "policyflow.ParticipantOperation",
			Writers: l(RoleACMRuntime, RoleNorthAPI), Readers: l(RoleParticipants),
			Doc: "operations from the automation composition runtime to participants; a participant's replicas share one consumer group, so each operation goes to one of them and one instance's operations stay in order",
		}),
		del(Topic{
			Name: ACMRuntime, Partitions: ACMPartitions, Key: "participant_id", ValueSchema: "policyflow.ParticipantMessage",
			Writers: l(RoleParticipants, RoleNorthAPI, StageReplicaSync), Readers: l(StageReplicaSync),
			Doc: "registrations, heartbeats, results and property changes from participant replicas; resync requests from the runtime; replica-sync's own ticks (one per partition)",
		}),
		compact(Topic{
			Name: ACMSync, Partitions: ACMPartitions, Key: "participant/replica/id, participant/composition/id or participant/instance/id/element", ValueSchema: "policyflow.ReplicaState",
			Writers: l(StageReplicaSync), Readers: l(RoleParticipants, StageReplicaSync, RoleNorthAPI),
			Doc: "replicated participant state and the registry of replicas; every replica reads all of it from the start with its own reader",
		}),
		compact(Topic{
			Name: NMPPolicies, Partitions: LowVolumePartitions, Key: "org/name", ValueSchema: "policyflow.NodeManagementPolicy",
			Writers: l(RoleNorthAPI), Readers: l(StageNMPHub, RoleNorthAPI),
			Doc: "node management policies with their agent upgrade policy and failure threshold; tombstone when removed",
		}),
		compact(Topic{
			Name: AgentNodes, Partitions: DefaultPartitions, Key: "org/node", ValueSchema: "policyflow.AgentNode",
			Writers: l(RoleNorthAPI), Readers: l(StageNMPHub, RoleNorthAPI),
			Doc: "edge nodes registered by their agents: pattern or node policy, agent version; tombstone when unregistered",
		}),
		compact(Topic{
			Name: AgentDirectives, Partitions: DefaultPartitions, Key: "org/node", ValueSchema: "policyflow.AgentDirective",
			Writers: l(StageNMPHub), Readers: l(RoleNorthAPI),
			Doc: "per-node agent directive: version to reach, start time in the policy's window, conflicts; agents long-poll it through the North API",
		}),
		compact(Topic{
			Name: AgentStatus, Partitions: DefaultPartitions, Key: "org/node", ValueSchema: "policyflow.AgentStatus",
			Writers: l(RoleNorthAPI), Readers: l(StageNMPHub, RoleNorthAPI),
			Doc: "agent upgrade status and agent versions reported by each node",
		}),
		compact(Topic{
			Name: AgentPackages, Partitions: LowVolumePartitions, Key: "version", ValueSchema: "policyflow.AgentPackage",
			Writers: l(RoleNorthAPI), Readers: l(StageNMPHub, RoleNorthAPI),
			Doc: "agent packages on the hub: manifest, SHA-256 and size (the tar.gz is in the North API's package store); tombstone when removed",
		}),
		del(Topic{
			Name: NMPRecompute, Partitions: DefaultPartitions, Key: "org", ValueSchema: "policyflow.NodeRecompute",
			Writers: l(StageNMPHub), Readers: l(StageNMPHub),
			Doc: "a changed NMP, package or rollout pause copied to every partition, so that the owner of each agent.nodes partition recomputes its nodes' directives (co-partitioned with agent.nodes and agent.status)",
		}),
		compact(Topic{
			Name: PolicyRollouts, Partitions: LowVolumePartitions, Key: "policy_id", ValueSchema: "policyflow.PolicyRollout",
			Writers: l(RoleNorthAPI), Readers: l(StageMatcher, StageSegmenter, RoleNorthAPI),
			Doc: "the staged rollout of a policy version: plan, previous version, current step, state and per step counts (see docs/rollouts.md)",
		}),
		compact(Topic{
			Name: Schemas, Partitions: LowVolumePartitions, Key: "schema fingerprint (hex)", ValueSchema: "",
			Writers: l(RoleEveryStage), Readers: l(RoleEveryStage),
			Doc: "canonical Avro schema JSON by fingerprint, so a reader can resolve any writer schema",
		}),
	}
	for _, stage := range Stages() {
		topics = append(topics, del(Topic{
			Name: DLQ(stage), Partitions: LowVolumePartitions, Key: "original key", ValueSchema: "",
			Retention: DLQRetention,
			Writers:   l(stage), Readers: l(RoleOperators),
			Doc: "records " + stage + " could not process: original bytes, the reason in headers",
		}))
	}
	// Participant replicas are no stage but dead-letter too: operations
	// and acm.sync records they cannot process, with the reason.
	topics = append(topics, del(Topic{
		Name: DLQ(RoleParticipants), Partitions: LowVolumePartitions, Key: "original key", ValueSchema: "",
		Retention: DLQRetention,
		Writers:   l(RoleParticipants), Readers: l(RoleOperators),
		Doc: "operations and acm.sync records a participant replica could not process: original bytes, the reason in headers",
	}))
	return topics
}

// Find returns the topic of the starting topology with the given base name
// (no prefix).
func Find(name string) (Topic, bool) {
	for _, t := range Default() {
		if t.Name == name {
			return t, true
		}
	}
	return Topic{}, false
}

// RetentionMs is the retention.ms the topic gets on the cluster.
func (t Topic) RetentionMs() int64 {
	switch {
	case t.Retention > 0:
		return t.Retention.Milliseconds()
	case t.Cleanup == CleanupCompact:
		return -1
	default:
		return DefaultDeleteRetention.Milliseconds()
	}
}

// KafkaConfigs returns every topic config the topic gets on the cluster:
// cleanup.policy, retention.ms and the extra Configs.
func (t Topic) KafkaConfigs() map[string]string {
	m := make(map[string]string, len(t.Configs)+2)
	maps.Copy(m, t.Configs)
	m["cleanup.policy"] = t.Cleanup
	m["retention.ms"] = strconv.FormatInt(t.RetentionMs(), 10)
	return m
}

// legalTopicChar reports whether Kafka accepts c in a topic name.
func legalTopicChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// Validate says what is wrong with a list of topic specifications: empty or
// illegal names, duplicates (including names Kafka treats as colliding,
// which differ only in '.' versus '_'), partition counts below one, unknown
// cleanup policies, negative retention, and extra configs that try to set
// cleanup.policy or retention.ms, which have their own fields.
func Validate(topics []Topic) error {
	var errs []error
	seen := make(map[string]string)
	for _, t := range topics {
		switch {
		case t.Name == "":
			errs = append(errs, errors.New("a topic has no name"))
			continue
		case strings.IndexFunc(t.Name, func(c rune) bool { return !legalTopicChar(c) }) >= 0:
			errs = append(errs, fmt.Errorf("topic %q: name may only hold letters, digits, '.', '_' and '-'", t.Name))
		}
		norm := strings.ReplaceAll(t.Name, "_", ".")
		if prev, dup := seen[norm]; dup {
			errs = append(errs, fmt.Errorf("topic %q: collides with %q", t.Name, prev))
		}
		seen[norm] = t.Name
		if t.Partitions < 1 {
			errs = append(errs, fmt.Errorf("topic %q: %d partitions, need at least 1", t.Name, t.Partitions))
		}
		if t.Cleanup != CleanupDelete && t.Cleanup != CleanupCompact {
			errs = append(errs, fmt.Errorf("topic %q: cleanup %q, want %q or %q", t.Name, t.Cleanup, CleanupDelete, CleanupCompact))
		}
		if t.Retention < 0 {
			errs = append(errs, fmt.Errorf("topic %q: negative retention %s", t.Name, t.Retention))
		}
		for _, k := range []string{"cleanup.policy", "retention.ms"} {
			if _, ok := t.Configs[k]; ok {
				errs = append(errs, fmt.Errorf("topic %q: set %s through the Cleanup and Retention fields, not Configs", t.Name, k))
			}
		}
	}
	return errors.Join(errs...)
}
