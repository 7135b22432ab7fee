package events

// Avro full names of the event schemas.
const (
	SchemaPdpNotification      = "policyflow.PdpNotification"
	SchemaPolicyCatalogEntry   = "policyflow.PolicyCatalogEntry"
	SchemaPolicyChange         = "policyflow.PolicyChange"
	SchemaComponent            = "policyflow.Component"
	SchemaCatchupRequest       = "policyflow.CatchupRequest"
	SchemaCatchupProgress      = "policyflow.CatchupProgress"
	SchemaPolicyMatch          = "policyflow.PolicyMatch"
	SchemaPolicySegment        = "policyflow.PolicySegment"
	SchemaComponentPolicies    = "policyflow.ComponentPolicies"
	SchemaComponentApplied     = "policyflow.ComponentApplied"
	SchemaParticipantOperation = "policyflow.ParticipantOperation"
	SchemaParticipantMessage   = "policyflow.ParticipantMessage"
	SchemaReplicaState         = "policyflow.ReplicaState"
	SchemaNodeManagementPolicy = "policyflow.NodeManagementPolicy"
	SchemaAgentNode            = "policyflow.AgentNode"
	SchemaAgentDirective       = "policyflow.AgentDirective"
	SchemaAgentStatus          = "policyflow.AgentStatus"
	SchemaAgentPackage         = "policyflow.AgentPackage"
	SchemaNodeRecompute        = "policyflow.NodeRecompute"
	SchemaDeploymentRequest    = "policyflow.DeploymentRequest"
	SchemaAdmissionVerdict     = "policyflow.AdmissionVerdict"
	SchemaAppPolicy            = "policyflow.AppPolicy"
	SchemaDatacenter           = "policyflow.Datacenter"
	SchemaDeployment           = "policyflow.Deployment"
	SchemaBillingEvent         = "policyflow.BillingEvent"
	SchemaPolicyRollout        = "policyflow.PolicyRollout"
)

func (*PdpNotification) SchemaName() string      { return SchemaPdpNotification }
func (*PolicyCatalogEntry) SchemaName() string   { return SchemaPolicyCatalogEntry }
func (*PolicyChange) SchemaName() string         { return SchemaPolicyChange }
func (*Component) SchemaName() string            { return SchemaComponent }
func (*CatchupRequest) SchemaName() string       { return SchemaCatchupRequest }
func (*CatchupProgress) SchemaName() string      { return SchemaCatchupProgress }
func (*PolicyMatch) SchemaName() string          { return SchemaPolicyMatch }
func (*PolicySegment) SchemaName() string        { return SchemaPolicySegment }
func (*ComponentPolicies) SchemaName() string    { return SchemaComponentPolicies }
func (*ComponentApplied) SchemaName() string     { return SchemaComponentApplied }
func (*ParticipantOperation) SchemaName() string { return SchemaParticipantOperation }
func (*ParticipantMessage) SchemaName() string   { return SchemaParticipantMessage }
func (*ReplicaState) SchemaName() string         { return SchemaReplicaState }
func (*NodeManagementPolicy) SchemaName() string { return SchemaNodeManagementPolicy }
func (*AgentNode) SchemaName() string            { return SchemaAgentNode }
func (*AgentDirective) SchemaName() string       { return SchemaAgentDirective }
func (*AgentStatus) SchemaName() string          { return SchemaAgentStatus }
func (*AgentPackage) SchemaName() string         { return SchemaAgentPackage }
func (*NodeRecompute) SchemaName() string        { return SchemaNodeRecompute }
func (*DeploymentRequest) SchemaName() string    { return SchemaDeploymentRequest }
func (*AdmissionVerdict) SchemaName() string     { return SchemaAdmissionVerdict }
func (*AppPolicy) SchemaName() string            { return SchemaAppPolicy }
func (*Datacenter) SchemaName() string           { return SchemaDatacenter }
func (*Deployment) SchemaName() string           { return SchemaDeployment }
func (*BillingEvent) SchemaName() string         { return SchemaBillingEvent }
func (*PolicyRollout) SchemaName() string        { return SchemaPolicyRollout }

// newEvent returns a zero value of the Go type for a schema full name.
var newEvent = map[string]func() Event{
	SchemaPdpNotification:      func() Event { return new(PdpNotification) },
	SchemaPolicyCatalogEntry:   func() Event { return new(PolicyCatalogEntry) },
	SchemaPolicyChange:         func() Event { return new(PolicyChange) },
	SchemaComponent:            func() Event { return new(Component) },
	SchemaCatchupRequest:       func() Event { return new(CatchupRequest) },
	SchemaCatchupProgress:      func() Event { return new(CatchupProgress) },
	SchemaPolicyMatch:          func() Event { return new(PolicyMatch) },
	SchemaPolicySegment:        func() Event { return new(PolicySegment) },
	SchemaComponentPolicies:    func() Event { return new(ComponentPolicies) },
	SchemaComponentApplied:     func() Event { return new(ComponentApplied) },
	SchemaParticipantOperation: func() Event { return new(ParticipantOperation) },
	SchemaParticipantMessage:   func() Event { return new(ParticipantMessage) },
	SchemaReplicaState:         func() Event { return new(ReplicaState) },
	SchemaNodeManagementPolicy: func() Event { return new(NodeManagementPolicy) },
	SchemaAgentNode:            func() Event { return new(AgentNode) },
	SchemaAgentDirective:       func() Event { return new(AgentDirective) },
	SchemaAgentStatus:          func() Event { return new(AgentStatus) },
	SchemaAgentPackage:         func() Event { return new(AgentPackage) },
	SchemaNodeRecompute:        func() Event { return new(NodeRecompute) },
	SchemaDeploymentRequest:    func() Event { return new(DeploymentRequest) },
	SchemaAdmissionVerdict:     func() Event { return new(AdmissionVerdict) },
	SchemaAppPolicy:            func() Event { return new(AppPolicy) },
	SchemaDatacenter:           func() Event { return new(Datacenter) },
	SchemaDeployment:           func() Event { return new(Deployment) },
	SchemaBillingEvent:         func() Event { return new(BillingEvent) },
	SchemaAdmissionNotice:      func() Event { return new(AdmissionNotice) },
	SchemaAuditEntry:           func() Event { return new(AuditEntry) },
	SchemaPolicyRollout:        func() Event { return new(PolicyRollout) },
}

// SchemaNames lists the full name of every event schema.
func SchemaNames() []string {
	out := make([]string, 0, len(newEvent))
	for n := range newEvent {
		out = append(out, n)
	}
	return out
}
