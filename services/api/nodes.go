package api

import (
	"encoding/json"
	"time"

	"github.com/policyflow/policyflow/services/nmp/constraint"
)

// NodeRequest is what an agent registers for its node
// (PUT /v1/orgs/{org}/nodes/{node}).
type NodeRequest struct {
	Pattern         string                `json:"pattern,omitempty"`
	Properties      []constraint.Property `json:"properties,omitempty"`
	Constraints     []string              `json:"constraints,omitempty"`
	SoftwareVersion string                `json:"softwareVersion"`
	ConfigVersion   string                `json:"configVersion,omitempty"`
	CertVersion     string                `json:"certVersion,omitempty"`
}

// NodeRegistered is the answer of PUT /v1/orgs/{org}/nodes/{node}. Token
// is the node's own token, answered once, when the hub issued it (the
// node had none).
type NodeRegistered struct {
	Org        string `json:"org"`
	Node       string `json:"node"`
	Registered bool   `json:"registered"`
	Token      string `json:"token,omitempty"`
}

// DirectiveAnswer is a node's directive as agents read it
// (GET /v1/orgs/{org}/nodes/{node}/directive).
type DirectiveAnswer struct {
	Index          uint64 `json:"index"`
	DirectiveID    string `json:"directiveId"`
	Policy         string `json:"policy,omitempty"`
	Action         string `json:"action"`
	TargetVersion  string `json:"targetVersion,omitempty"`
	PackageSHA256  string `json:"packageSha256,omitempty"`
	AllowDowngrade bool   `json:"allowDowngrade,omitempty"`
	// FromVersions is the policy's version guard: the running versions
	// that may upgrade (e.g. ">=1.2.0 <2.0.0"); absent for any.
	FromVersions string    `json:"fromVersions,omitempty"`
	StartAt      time.Time `json:"startAt"`
	Reason       string    `json:"reason,omitempty"`
	Conflicts    []string  `json:"conflicts,omitempty"`
}

// StatusRequest is an agent's report, in Open Horizon's shape
// (PUT /v1/orgs/{org}/nodes/{node}/status).
type StatusRequest struct {
	DirectiveID     string       `json:"directiveId,omitempty"`
	Policy          string       `json:"policy,omitempty"`
	Status          string       `json:"status"`
	SoftwareVersion string       `json:"softwareVersion,omitempty"`
	PreviousVersion string       `json:"previousVersion,omitempty"`
	Error           string       `json:"error,omitempty"`
	AgentVersion    AgentVersion `json:"agentVersion"`
}

// AgentVersion is Open Horizon's agentVersion status.
type AgentVersion struct {
	Package      json.RawMessage `json:"package,omitempty"`
	Failed       string          `json:"failed,omitempty"`
	UpgradeStart *time.Time      `json:"upgradeStart,omitempty"`
	UpgradeEnd   *time.Time      `json:"upgradeEnd,omitempty"`
}

// NodeStatusAnswer is a node's last report
// (GET /v1/orgs/{org}/nodes/{node}/status).
type NodeStatusAnswer struct {
	Org             string       `json:"org"`
	Node            string       `json:"node"`
	Policy          string       `json:"policy,omitempty"`
	Status          string       `json:"status"`
	SoftwareVersion string       `json:"softwareVersion,omitempty"`
	PreviousVersion string       `json:"previousVersion,omitempty"`
	Error           string       `json:"error,omitempty"`
	AgentVersion    AgentVersion `json:"agentVersion"`
	ReportedAt      time.Time    `json:"reportedAt"`
}

// NodeStatusAccepted is the answer of PUT
// /v1/orgs/{org}/nodes/{node}/status.
type NodeStatusAccepted struct {
	Org    string `json:"org"`
	Node   string `json:"node"`
	Status string `json:"status"`
}

// NodeTokenChanged is the answer of POST /v1/orgs/{org}/nodes/{node}/token
// (Rotated, with the new Token, answered once) and of DELETE on it
// (Revoked).
type NodeTokenChanged struct {
	Org     string `json:"org"`
	Node    string `json:"node"`
	Token   string `json:"token,omitempty"`
	Rotated bool   `json:"rotated,omitempty"`
	Revoked bool   `json:"revoked,omitempty"`
}

// OrgNode is one node in GET /v1/orgs/{org}/nodes: its registration
// (agent.nodes) and its last report (agent.status).
type OrgNode struct {
	Node    string `json:"node"`
	Pattern string `json:"pattern,omitempty"`
	// SoftwareVersion is the agent version the node registered.
	SoftwareVersion string          `json:"softwareVersion,omitempty"`
	Properties      json.RawMessage `json:"properties,omitempty"`
	// Status is the state of the node's last report (about any NMP),
	// waiting when it reported none.
	Status        string     `json:"status"`
	Policy        string     `json:"policy,omitempty"`
	FailedVersion string     `json:"failedVersion,omitempty"`
	Error         string     `json:"error,omitempty"`
	ReportedAt    *time.Time `json:"reportedAt,omitempty"`
}

// OrgNodes is a page of an org's nodes, by node id; NextPageToken, when
// set, is the page_token of the next page.
type OrgNodes struct {
	Org           string    `json:"org"`
	Nodes         []OrgNode `json:"nodes"`
	NextPageToken string    `json:"nextPageToken,omitempty"`
}
