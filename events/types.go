package events

import "time"

// Event is implemented by every record type carried on a policyflow topic.
type Event interface {
	// SchemaName is the Avro full name of the event's schema.
	SchemaName() string
}

// Notify kinds (NotifyTarget.Kind).
const (
	NotifyNone    = "NONE"
	NotifyScript  = "SCRIPT"
	NotifyWebhook = "WEBHOOK"
)

// Change actions (PolicyChange.Action).
const (
	ActionUpdated = "UPDATED"
	ActionRemoved = "REMOVED"
	ActionErrored = "ERRORED"
)

// Catalog statuses (PolicyCatalogEntry.Status).
const (
	StatusValid   = "VALID"
	StatusErrored = "ERRORED"
)

// Catch-up scopes (CatchupRequest.Scope).
const (
	ScopeAll        = "ALL"
	ScopeDeployment = "DEPLOYMENT"
)

// Policy is one policy: the versionless id, the policy_body JSON and the
// hash that names the body. On policy.matches the body is empty: the
// hash names it, and the segmenter fills it in.
type Policy struct {
	PolicyID      string `avro:"policy_id" json:"policy_id"`
	PolicyName    string `avro:"policy_name" json:"policy_name"`
	PolicyVersion string `avro:"policy_version" json:"policy_version"`
	Body          string `avro:"body" json:"body"`
	// BodyHash is policy.BodyHash of Body; every policy on
	// policy.matches and policy.segments carries it.
	BodyHash string `avro:"body_hash" json:"body_hash,omitempty"`
	// Revision is the catalog revision of this version of the policy
	// (PolicyCatalogEntry.Revision): fencing compares it, not
	// PolicyVersion. 0 in records written before it was added.
	Revision int64 `avro:"revision" json:"revision,omitempty"`
}

// RemovedPolicy names a policy taken away from a component.
type RemovedPolicy struct {
	PolicyID      string  `avro:"policy_id" json:"policy_id"`
	PolicyVersion *string `avro:"policy_version" json:"policy_version,omitempty"`
	// Revision is the catalog revision of the version removed: a
	// component holding a greater one keeps it. 0 when unknown.
	Revision int64 `avro:"revision" json:"revision,omitempty"`
}

// NotifyTarget says how a component is told that its policies changed.
type NotifyTarget struct {
	Kind       string `avro:"kind" json:"kind"`
	ScriptPath string `avro:"script_path" json:"script_path,omitempty"`
	WebhookURL string `avro:"webhook_url" json:"webhook_url,omitempty"`
	TimeoutMs  int32  `avro:"timeout_ms" json:"timeout_ms,omitempty"`
}

// FilterMatch groups the policies one policy filter newly selects.
type FilterMatch struct {
	FilterID string   `avro:"filter_id" json:"filter_id"`
	Policies []Policy `avro:"policies" json:"policies"`
}

// ComponentDelta is what changes for one component of a deployment.
type ComponentDelta struct {
	ComponentID     string          `avro:"component_id" json:"component_id"`
	UpdatedPolicies []Policy        `avro:"updated_policies" json:"updated_policies"`
	AddedPolicies   []FilterMatch   `avro:"added_policies" json:"added_policies"`
	RemovedPolicies []RemovedPolicy `avro:"removed_policies" json:"removed_policies"`
	Uninstall       bool            `avro:"uninstall" json:"uninstall,omitempty"`
}

// LoadedPolicy is an ONAP loadedPolicies entry.
type LoadedPolicy struct {
	PolicyName string            `avro:"policy_name" json:"policyName"`
	VersionNo  string            `avro:"version_no" json:"versionNo"`
	Matches    map[string]string `avro:"matches" json:"matches,omitempty"`
}

// UnloadedPolicy is an ONAP removedPolicies entry.
type UnloadedPolicy struct {
	PolicyName string `avro:"policy_name" json:"policyName"`
	VersionNo  string `avro:"version_no" json:"versionNo"`
}

// PdpNotification is a policy engine notification, or bodies pushed directly.
type PdpNotification struct {
	NotificationID  string           `avro:"notification_id"`
	Source          string           `avro:"source"`
	ReceivedAt      time.Time        `avro:"received_at"`
	LoadedPolicies  []LoadedPolicy   `avro:"loaded_policies"`
	RemovedPolicies []UnloadedPolicy `avro:"removed_policies"`
	PushedBodies    []string         `avro:"pushed_bodies"`
	// Tenant owns the pushed bodies; "" is global (see PolicyCatalogEntry.Tenant).
	Tenant string `avro:"tenant"`
}

// NotifierAdmission is the Source of the notifications the admission stage
// writes: the settings policies (admission.<component_id>) of the
// components it admits, pushed for their tenant, and their removal, for
// the same tenant, when the deployment is deleted. pdp-ingest applies such
// a removal itself, without asking the PDP (see pdpingest.Route.Withdraw).
const NotifierAdmission = "admission"

// PolicyCatalogEntry is the latest valid policy_body of one policy_id.
type PolicyCatalogEntry struct {
	PolicyID      string    `avro:"policy_id"`
	PolicyName    string    `avro:"policy_name"`
	PolicyVersion string    `avro:"policy_version"`
	Body          string    `avro:"body"`
	BodyHash      string    `avro:"body_hash"`
	Status        string    `avro:"status"`
	Error         *string   `avro:"error"`
	UpdatedAt     time.Time `avro:"updated_at"`
	// Revision grows with every change of the policy_id (see
	// NextRevision), so a withdrawn newest version makes the remaining
	// one the latest at a greater revision. 0 in entries written before
	// it was added.
	Revision int64 `avro:"revision"`
	// Tenant owns the policy: only that tenant reads it and only its
	// components hold it (policy.MayHold); "" is global.
	Tenant string `avro:"tenant"`
	// Source is where the body in force came from: SourcePDP or
	// SourcePushed; "" in entries written before it was added.
	Source string `avro:"source"`
}

// Catalog sources (PolicyCatalogEntry.Source).
const (
	// SourcePDP is a body from the PDP's answer: a catch-up removes it
	// when the PDP's full listing no longer has it.
	SourcePDP = "pdp"
	// SourcePushed is a body pushed directly, with no PDP behind it: a
	// catch-up never removes it.
	SourcePushed = "pushed"
)

// NextRevision is the revision of a policy_id's next change after prev: a
// microsecond timestamp, and always greater than prev, so revisions stay
// monotonic across a removal (whose tombstone forgets prev) as long as the
// clock does not go back by more than the time between two changes.
func NextRevision(prev int64, now time.Time) int64 {
	return max(prev+1, now.UnixMicro())
}

// PolicyChange says what changed for one policy_id; an update carries the
// new latest version's header (policy.Header), not its body.
type PolicyChange struct {
	ChangeID           string    `avro:"change_id"`
	PolicyID           string    `avro:"policy_id"`
	Action             string    `avro:"action"`
	OldVersion         *string   `avro:"old_version"`
	NewVersion         *string   `avro:"new_version"`
	PolicyName         string    `avro:"policy_name"`
	MatchingConditions string    `avro:"matching_conditions"`
	BodyHash           string    `avro:"body_hash"`
	Error              *string   `avro:"error"`
	ChangedAt          time.Time `avro:"changed_at"`
	// Revision is the catalog revision the change makes the policy_id's:
	// the new version's for UPDATED, the removal's for REMOVED. 0 in
	// records written before it was added.
	Revision int64 `avro:"revision"`
	// Tenant owns the policy after an UPDATED change; "" is global.
	Tenant string `avro:"tenant"`
}

// PolicyFilter is a PDP /getConfig-style filter of a component.
type PolicyFilter struct {
	FilterID         string `avro:"filter_id" json:"filter_id"`
	PolicyName       string `avro:"policy_name" json:"policyName,omitempty"`
	ConfigName       string `avro:"config_name" json:"configName,omitempty"`
	OnapName         string `avro:"onap_name" json:"onapName,omitempty"`
	ConfigAttributes string `avro:"config_attributes" json:"-"`
	Unique           bool   `avro:"unique" json:"unique,omitempty"`
}

// Component is a deployed component and the policies it wants.
type Component struct {
	ComponentID          string         `avro:"component_id"`
	DeploymentID         string         `avro:"deployment_id"`
	ServiceComponentName string         `avro:"service_component_name"`
	Tenant               string         `avro:"tenant"`
	PolicyIDs            []string       `avro:"policy_ids"`
	PolicyFilters        []PolicyFilter `avro:"policy_filters"`
	Notify               NotifyTarget   `avro:"notify"`
	Config               string         `avro:"config"`
	Generation           int64          `avro:"generation"`
	UpdatedAt            time.Time      `avro:"updated_at"`
}

// Stages that report catch-up progress (CatchupProgress.Stage).
const (
	ProgressPDPIngest    = "pdp-ingest"
	ProgressMatcher      = "matcher"
	ProgressConsulWriter = "consul-writer"
	// ProgressAgentNotifier: components looked at, and notifications run
	// again (failed ones, and the component an operator named).
	ProgressAgentNotifier = "agent-notifier"
)

// CatchupProgress is what one stage did for one catch-up request on one
// partition of catchup.requests, written when it is done there.
type CatchupProgress struct {
	RequestID   string `avro:"request_id"`
	Stage       string `avro:"stage"`
	Partition   int32  `avro:"partition"`
	Compared    int64  `avro:"compared"`
	Differed    int64  `avro:"differed"`
	KeysWritten int64  `avro:"keys_written"`
	// Removed and RemovalWithheld are pdp-ingest's: policies sent to be
	// removed, and why none were when the catch-up held them back.
	Removed         int64     `avro:"removed"`
	RemovalWithheld *string   `avro:"removal_withheld"`
	DoneAt          time.Time `avro:"done_at"`
}

// CatchupRequest asks for a catch-up of all deployments or one.
type CatchupRequest struct {
	RequestID    string    `avro:"request_id"`
	Scope        string    `avro:"scope"`
	DeploymentID *string   `avro:"deployment_id"`
	Reason       string    `avro:"reason"`
	RequestedAt  time.Time `avro:"requested_at"`
	// ComponentID names a component to notify again, however its last
	// notification ended (nil: none).
	ComponentID *string `avro:"component_id"`
}

// PolicyMatch is the per-deployment delta the matcher computed.
type PolicyMatch struct {
	UpdateID     string           `avro:"update_id"`
	DeploymentID string           `avro:"deployment_id"`
	CatchUp      bool             `avro:"catch_up"`
	Components   []ComponentDelta `avro:"components"`
	CreatedAt    time.Time        `avro:"created_at"`
}

// PolicySegment is a size-bounded piece of one PolicyMatch.
type PolicySegment struct {
	UpdateID     string           `avro:"update_id"`
	DeploymentID string           `avro:"deployment_id"`
	Index        int32            `avro:"index"`
	Count        int32            `avro:"count"`
	CatchUp      bool             `avro:"catch_up"`
	Components   []ComponentDelta `avro:"components"`
	CreatedAt    time.Time        `avro:"created_at"`
}

// ComponentPolicies is a component's full policy collection after an update.
type ComponentPolicies struct {
	ComponentID          string       `avro:"component_id"`
	DeploymentID         string       `avro:"deployment_id"`
	ServiceComponentName string       `avro:"service_component_name"`
	UpdateID             string       `avro:"update_id"`
	CatchUp              bool         `avro:"catch_up"`
	Generation           int64        `avro:"generation"`
	Policies             []Policy     `avro:"policies"`
	UpdatedPolicies      []Policy     `avro:"updated_policies"`
	RemovedPolicies      []Policy     `avro:"removed_policies"`
	Notify               NotifyTarget `avro:"notify"`
	Uninstalled          bool         `avro:"uninstalled"`
	UpdatedAt            time.Time    `avro:"updated_at"`
}

// PolicyRef names one policy without its body.
type PolicyRef struct {
	PolicyID      string `avro:"policy_id" json:"policy_id"`
	PolicyName    string `avro:"policy_name" json:"policy_name"`
	PolicyVersion string `avro:"policy_version" json:"policy_version"`
	BodyHash      string `avro:"body_hash" json:"body_hash,omitempty"`
}

// Ref is the reference to p.
func (p Policy) Ref() PolicyRef {
	return PolicyRef{PolicyID: p.PolicyID, PolicyName: p.PolicyName, PolicyVersion: p.PolicyVersion, BodyHash: p.BodyHash}
}

// Refs are the references to ps, in their order; never nil.
func Refs(ps []Policy) []PolicyRef {
	out := make([]PolicyRef, len(ps))
	for i, p := range ps {
		out[i] = p.Ref()
	}
	return out
}

// ComponentApplied records what the consul-writer wrote to a component's
// Consul folder: the update, the Consul index, and what changed by
// reference. The bodies of the collection are in Consul; only removed
// policies, which Consul no longer holds, carry their last bodies.
type ComponentApplied struct {
	ComponentID          string `avro:"component_id"`
	ServiceComponentName string `avro:"service_component_name"`
	UpdateID             string `avro:"update_id"`
	Action               string `avro:"action"`
	CatchUp              bool   `avro:"catch_up"`
	ConsulIndex          int64  `avro:"consul_index"`
	PoliciesCount        int32  `avro:"policies_count"`
	// PoliciesBytes is the size of the collection's bodies.
	PoliciesBytes   int64        `avro:"policies_bytes"`
	KeysWritten     int32        `avro:"keys_written"`
	Generation      int64        `avro:"generation"`
	PolicyRefs      []PolicyRef  `avro:"policy_refs"`
	UpdatedRefs     []PolicyRef  `avro:"updated_refs"`
	RemovedPolicies []Policy     `avro:"removed_policies"`
	Notify          NotifyTarget `avro:"notify"`
	// ItemIndexes are the ModifyIndexes of the collection's item keys as
	// the write left them (the event key's is ConsulIndex); an item whose
	// index the write did not learn is left out. Empty in records written
	// before they were kept.
	ItemIndexes []ItemIndex `avro:"item_indexes"`
	Uninstalled bool        `avro:"uninstalled"`
	AppliedAt   time.Time   `avro:"applied_at"`
}

// ItemIndex is the Consul ModifyIndex of one item key of a component's
// folder, <scn>:policies/items/<policy_id>.
type ItemIndex struct {
	PolicyID    string `avro:"policy_id"`
	ModifyIndex int64  `avro:"modify_index"`
}

// ParticipantOperation is an operation from the runtime to a participant.
type ParticipantOperation struct {
	MessageID     string    `avro:"message_id"`
	ParticipantID string    `avro:"participant_id"`
	ReplicaID     *string   `avro:"replica_id"`
	Kind          string    `avro:"kind"`
	CompositionID *string   `avro:"composition_id"`
	InstanceID    *string   `avro:"instance_id"`
	ElementIDs    []string  `avro:"element_ids"`
	Properties    string    `avro:"properties"`
	TimeoutMs     int64     `avro:"timeout_ms"`
	SentAt        time.Time `avro:"sent_at"`
	// ParticipantIDList, when not empty, limits who may act on it.
	ParticipantIDList []string           `avro:"participant_id_list"`
	Revision          int64              `avro:"revision"`
	Elements          []OperationElement `avro:"elements"`
}

// OperationElement is one element an operation is about.
type OperationElement struct {
	ElementID   string `avro:"element_id"`
	ElementType string `avro:"element_type"`
	Properties  string `avro:"properties"`
}

// ParticipantMessage is a message from a participant replica to the runtime.
type ParticipantMessage struct {
	MessageID             string    `avro:"message_id"`
	ParticipantID         string    `avro:"participant_id"`
	ReplicaID             string    `avro:"replica_id"`
	Kind                  string    `avro:"kind"`
	SupportedElementTypes []string  `avro:"supported_element_types"`
	ResponseTo            *string   `avro:"response_to"`
	CompositionID         *string   `avro:"composition_id"`
	InstanceID            *string   `avro:"instance_id"`
	ElementID             *string   `avro:"element_id"`
	State                 *string   `avro:"state"`
	Outcome               string    `avro:"outcome"`
	Detail                string    `avro:"detail"`
	Properties            string    `avro:"properties"`
	SentAt                time.Time `avro:"sent_at"`
	Revision              int64     `avro:"revision"`
	ElementType           string    `avro:"element_type"`
	DeadlineMs            int64     `avro:"deadline_ms"`
}

// ReplicaState is replicated participant state.
type ReplicaState struct {
	ParticipantID string    `avro:"participant_id"`
	InstanceID    string    `avro:"instance_id"`
	ElementID     string    `avro:"element_id"`
	Kind          string    `avro:"kind"`
	State         string    `avro:"state"`
	Properties    string    `avro:"properties"`
	Version       int64     `avro:"version"`
	UpdatedAt     time.Time `avro:"updated_at"`
	// ReplicaID is the replica described (REPLICA) or the one the change
	// came from.
	ReplicaID             string   `avro:"replica_id"`
	CompositionID         string   `avro:"composition_id"`
	ElementType           string   `avro:"element_type"`
	Revision              int64    `avro:"revision"`
	OperationID           string   `avro:"operation_id"`
	DeadlineMs            int64    `avro:"deadline_ms"`
	HeartbeatMs           int64    `avro:"heartbeat_ms"`
	SupportedElementTypes []string `avro:"supported_element_types"`
	Detail                string   `avro:"detail"`
}

// AgentUpgradePolicy says how selected agents upgrade themselves.
type AgentUpgradePolicy struct {
	AtLeastVersion string `avro:"at_least_version"`
	Start          string `avro:"start"`
	DurationS      int64  `avro:"duration_s"`
	Manifest       string `avro:"manifest"`
	AllowDowngrade bool   `avro:"allow_downgrade"`
	// FromVersions is the version guard: the versions a node may
	// upgrade from, as space-separated comparators ("" for any).
	FromVersions string `avro:"from_versions"`
}

// NodeManagementPolicy selects edge nodes and says how their agents upgrade.
type NodeManagementPolicy struct {
	Org          string              `avro:"org"`
	Name         string              `avro:"name"`
	Owner        string              `avro:"owner"`
	Label        string              `avro:"label"`
	Description  string              `avro:"description"`
	Constraints  []string            `avro:"constraints"`
	Properties   string              `avro:"properties"`
	Patterns     []string            `avro:"patterns"`
	Enabled      bool                `avro:"enabled"`
	AgentUpgrade *AgentUpgradePolicy `avro:"agent_upgrade"`
	LastUpdated  time.Time           `avro:"last_updated"`
	// Safe rollout: the failure threshold, the last resume and a rollback
	// order.
	FailureCount      int64   `avro:"failure_count"`
	FailureRatio      float64 `avro:"failure_ratio"`
	FailureMinStarted int64   `avro:"failure_min_started"`
	ResumedAt         int64   `avro:"resumed_at"`
	Rollback          bool    `avro:"rollback"`
}

// AgentNode is an edge node and its agent.
type AgentNode struct {
	Org             string   `avro:"org"`
	Node            string   `avro:"node"`
	Pattern         string   `avro:"pattern"`
	Properties      string   `avro:"properties"`
	Constraints     []string `avro:"constraints"`
	SoftwareVersion string   `avro:"software_version"`
	ConfigVersion   string   `avro:"config_version"`
	CertVersion     string   `avro:"cert_version"`
	// TokenSHA256 is the hex SHA-256 of the node's own bearer token; ""
	// when it has none.
	TokenSHA256 string    `avro:"token_sha256"`
	Deleted     bool      `avro:"deleted"`
	UpdatedAt   time.Time `avro:"updated_at"`
}

// AgentDirective says what one node's agent must do now.
type AgentDirective struct {
	Org            string    `avro:"org"`
	Node           string    `avro:"node"`
	DirectiveID    string    `avro:"directive_id"`
	Policy         string    `avro:"policy"`
	TargetVersion  string    `avro:"target_version"`
	Manifest       string    `avro:"manifest"`
	StartAt        time.Time `avro:"start_at"`
	RollbackTo     string    `avro:"rollback_to"`
	IssuedAt       time.Time `avro:"issued_at"`
	Action         string    `avro:"action"`
	PackageSHA256  string    `avro:"package_sha256"`
	AllowDowngrade bool      `avro:"allow_downgrade"`
	Reason         string    `avro:"reason"`
	Conflicts      []string  `avro:"conflicts"`
	// FromVersions is the policy's version guard ("" for any).
	FromVersions string `avro:"from_versions"`
}

// AgentStatus is an agent's report on its upgrade.
type AgentStatus struct {
	Org             string     `avro:"org"`
	Node            string     `avro:"node"`
	DirectiveID     string     `avro:"directive_id"`
	Policy          string     `avro:"policy"`
	Status          string     `avro:"status"`
	SoftwareVersion string     `avro:"software_version"`
	FailedVersion   string     `avro:"failed_version"`
	UpgradeStart    *time.Time `avro:"upgrade_start"`
	UpgradeEnd      *time.Time `avro:"upgrade_end"`
	ErrorMessage    string     `avro:"error_message"`
	ReportedAt      time.Time  `avro:"reported_at"`
	Package         string     `avro:"package"`
	PreviousVersion string     `avro:"previous_version"`
}

// AgentPackage is an agent package stored on the hub.
type AgentPackage struct {
	Version         string `avro:"version"`
	PackagesVersion string `avro:"packages_version"`
	SSLVersion      string `avro:"ssl_version"`
	ConfigVersion   string `avro:"config_version"`
	Manifest        string `avro:"manifest"`
	SHA256          string `avro:"sha256"`
	Size            int64  `avro:"size"`
	// Signature (base64) and SigningKey (its key id) are the publisher's
	// ed25519 signature of the package statement (nmp.PackageStatement).
	Signature  string    `avro:"signature"`
	SigningKey string    `avro:"signing_key"`
	UploadedBy string    `avro:"uploaded_by"`
	UploadedAt time.Time `avro:"uploaded_at"`
}

// NodeRecompute asks the nmp-hub member owning one partition of
// agent.nodes to recompute the directives of its nodes of an org.
type NodeRecompute struct {
	Org             string    `avro:"org"`
	Cause           string    `avro:"cause"`
	SourceTopic     string    `avro:"source_topic"`
	SourcePartition int32     `avro:"source_partition"`
	SourceOffset    int64     `avro:"source_offset"`
	IssuedAt        time.Time `avro:"issued_at"`
}

// DeploymentRequest is a tenant's request to deploy applications, decided
// by the admission stage. Request is the request as canonical JSON (see
// services/admission/admit.Request).
type DeploymentRequest struct {
	RequestID    string `avro:"request_id"`
	DeploymentID string `avro:"deployment_id"`
	Tenant       string `avro:"tenant"`
	Request      string `avro:"request"`
	// Action is ActionDeploy (Request says what) or ActionDelete.
	Action      string    `avro:"action"`
	SubmittedBy string    `avro:"submitted_by"`
	SubmittedAt time.Time `avro:"submitted_at"`
}

// Actions of a DeploymentRequest.
const (
	ActionDeploy = "deploy"
	ActionDelete = "delete"
)

// Deployment is what an admitted deployment holds, as deploy.deployments
// keeps it (a tombstone once the deployment is deleted): the state later
// requests are decided against.
type Deployment struct {
	DeploymentID string                `avro:"deployment_id"`
	Tenant       string                `avro:"tenant"`
	Environment  string                `avro:"environment"`
	RequestID    string                `avro:"request_id"`
	Applications []DeployedApplication `avro:"applications"`
	VMs          int32                 `avro:"vms"`
	Datacenter   string                `avro:"datacenter"`
	Resources    []PlacedResource      `avro:"resources"`
	Links        []LinkUse             `avro:"links"`
	Components   []string              `avro:"components"`
	AdmittedAt   time.Time             `avro:"admitted_at"`
	// Request is the admitted request as mutated (JSON): what the audit
	// reports check; "" in records written before it was added.
	Request string `avro:"request"`
}

// DeployedApplication is one application of a Deployment, as admitted.
type DeployedApplication struct {
	Name      string   `avro:"name" json:"name"`
	Class     string   `avro:"class" json:"class"`
	Package   string   `avro:"package" json:"package,omitempty"`
	Inherits  []string `avro:"inherits" json:"inherits,omitempty"`
	Instances int32    `avro:"instances" json:"instances"`
	Flavor    string   `avro:"flavor" json:"flavor,omitempty"`
}

// PlacedResource is one resource of a Deployment on its leaf.
type PlacedResource struct {
	ResourceID string    `avro:"resource_id" json:"resource_id"`
	Kind       string    `avro:"kind" json:"kind,omitempty"`
	Leaf       string    `avro:"leaf" json:"leaf"`
	Demand     []float64 `avro:"demand" json:"demand"`
}

// LinkUse is the bandwidth a Deployment takes on one network edge (the
// edge from Vertex to its parent).
type LinkUse struct {
	Vertex         string  `avro:"vertex" json:"vertex"`
	BytesPerSecond float64 `avro:"bytes_per_second" json:"bytes_per_second"`
}

// BillingEvent is a billable change of a deployment, on billing.events.
type BillingEvent struct {
	EventID      string              `avro:"event_id"`
	Kind         string              `avro:"kind"`
	DeploymentID string              `avro:"deployment_id"`
	Tenant       string              `avro:"tenant"`
	Environment  string              `avro:"environment"`
	Datacenter   string              `avro:"datacenter"`
	Applications []BilledApplication `avro:"applications"`
	VMs          int32               `avro:"vms"`
	RequestID    string              `avro:"request_id"`
	At           time.Time           `avro:"at"`
}

// BilledApplication is one application of a BillingEvent.
type BilledApplication struct {
	Name      string `avro:"name"`
	Class     string `avro:"class"`
	Instances int32  `avro:"instances"`
	Flavor    string `avro:"flavor"`
}

// Kinds of a BillingEvent.
const (
	BillingAdmitted = "deployment.admitted"
	BillingDeleted  = "deployment.deleted"
)

// AdmissionFinding is what one rule of an application policy found.
type AdmissionFinding struct {
	PolicyID string `avro:"policy_id" json:"policy_id"`
	Rule     string `avro:"rule" json:"rule"`
	Object   string `avro:"object" json:"object"`
	Message  string `avro:"message" json:"message"`
}

// AdmissionMutation is one change an application policy made to a
// deployment request.
type AdmissionMutation struct {
	PolicyID    string `avro:"policy_id" json:"policy_id"`
	Rule        string `avro:"rule" json:"rule"`
	Application string `avro:"application" json:"application"`
	Field       string `avro:"field" json:"field"`
	OldValue    string `avro:"old_value" json:"old"`
	NewValue    string `avro:"new_value" json:"new"`
}

// AdmissionVerdict is the admission stage's verdict on a deployment
// request.
type AdmissionVerdict struct {
	RequestID    string              `avro:"request_id"`
	DeploymentID string              `avro:"deployment_id"`
	Tenant       string              `avro:"tenant"`
	Admitted     bool                `avro:"admitted"`
	Violations   []AdmissionFinding  `avro:"violations"`
	Warnings     []AdmissionFinding  `avro:"warnings"`
	Mutations    []AdmissionMutation `avro:"mutations"`
	Request      string              `avro:"request"`
	Components   []string            `avro:"components"`
	Policies     []string            `avro:"policies"`
	DecidedAt    time.Time           `avro:"decided_at"`
}

// AppPolicy is a tenant application policy: an instance of a policy kind
// (ObjectModel, canonical JSON with its "?" header) assigned to tenants
// (TenantIDs nil: every tenant).
type AppPolicy struct {
	PolicyID    string    `avro:"policy_id"`
	Name        string    `avro:"name"`
	Description string    `avro:"description"`
	ObjectModel string    `avro:"object_model"`
	TenantIDs   *[]string `avro:"tenant_ids"`
	Mode        string    `avro:"mode"`
	Created     time.Time `avro:"created"`
	Updated     time.Time `avro:"updated"`
	// Priority orders the policies' mutations: lower first, so the
	// highest is applied last and wins; ties by Created, then PolicyID.
	Priority int32 `avro:"priority"`
}

// Datacenter is a datacenter model (seed 002) as placement.datacenters
// stores it: the validated model as canonical JSON (see package
// services/placement).
type Datacenter struct {
	DatacenterID string    `avro:"datacenter_id"`
	Model        string    `avro:"model"`
	Leaves       int32     `avro:"leaves"`
	UpdatedBy    string    `avro:"updated_by"`
	Created      time.Time `avro:"created"`
	Updated      time.Time `avro:"updated"`
}

// PolicyRollout is the staged rollout of one policy version, as
// policy.rollouts holds it (keyed by policy_id); the rules are in
// services/rollout.
type PolicyRollout struct {
	PolicyID         string             `avro:"policy_id" json:"policy_id"`
	RolloutID        string             `avro:"rollout_id" json:"rollout_id"`
	Version          string             `avro:"version" json:"version"`
	BodyHash         string             `avro:"body_hash" json:"body_hash"`
	PreviousVersion  string             `avro:"previous_version" json:"previous_version"`
	PreviousBody     string             `avro:"previous_body" json:"-"`
	PreviousHash     string             `avro:"previous_hash" json:"previous_hash"`
	PreviousRevision int64              `avro:"previous_revision" json:"previous_revision"`
	Tenant           string             `avro:"tenant" json:"tenant"`
	Steps            []float64          `avro:"steps" json:"steps"`
	Auto             bool               `avro:"auto" json:"auto"`
	PauseS           int64              `avro:"pause_s" json:"pause_s"`
	MaxFailed        int64              `avro:"max_failed" json:"max_failed"`
	Step             int32              `avro:"step" json:"step"`
	State            string             `avro:"state" json:"state"`
	Reason           string             `avro:"reason" json:"reason"`
	FailedBaseline   int64              `avro:"failed_baseline" json:"failed_baseline"`
	StepStartedAt    time.Time          `avro:"step_started_at" json:"step_started_at"`
	StepDoneAt       *time.Time         `avro:"step_done_at" json:"step_done_at"`
	AbortRevision    int64              `avro:"abort_revision" json:"abort_revision"`
	Counts           []RolloutStepCount `avro:"counts" json:"counts"`
	UpdatedBy        string             `avro:"updated_by" json:"updated_by"`
	UpdatedAt        time.Time          `avro:"updated_at" json:"updated_at"`
}

// RolloutStepCount is what the components that join a rollout at one
// step did.
type RolloutStepCount struct {
	Components int64 `avro:"components" json:"components"`
	Notified   int64 `avro:"notified" json:"notified"`
	Failed     int64 `avro:"failed" json:"failed"`
}
