package api

import "time"

// NodeState is one node's state in an NMP's status.
type NodeState struct {
	Node string `json:"node"`
	// Status is the node's last reported state about the NMP, waiting
	// when it reported none, or ignored when another NMP with a
	// different intent is in force on it.
	Status string `json:"status"`
	// Version is the agent version the node runs, by its report.
	Version       string `json:"version,omitempty"`
	FailedVersion string `json:"failedVersion,omitempty"`
	Error         string `json:"error,omitempty"`
}

// RolloutAnswer is an NMP's rollout counters.
type RolloutAnswer struct {
	Started        int64  `json:"started"`
	Failed         int64  `json:"failed"`
	PrecheckFailed int64  `json:"precheckFailed"`
	Paused         bool   `json:"paused"`
	Reason         string `json:"reason,omitempty"`
}

// NMPStatus is an NMP's rollout (GET /v1/orgs/{org}/nmps/{name}/status):
// nodes per state (each node's last report about this NMP), the failing
// nodes, those whose precheck failed and those the NMP rolled back.
type NMPStatus struct {
	Org            string         `json:"org"`
	Name           string         `json:"name"`
	Enabled        bool           `json:"enabled"`
	Nodes          int            `json:"nodes"`
	States         map[string]int `json:"states"`
	Failing        []NodeState    `json:"failing"`
	PrecheckFailed []NodeState    `json:"precheckFailed"`
	RolledBack     []NodeState    `json:"rolledBack"`
	Rollout        RolloutAnswer  `json:"rollout"`
}

// PackageAnswer is an agent package's metadata
// (GET /v1/agentpackages/{version}).
type PackageAnswer struct {
	Version         string    `json:"version"`
	PackagesVersion string    `json:"packagesVersion,omitempty"`
	SSLVersion      string    `json:"sslVersion,omitempty"`
	ConfigVersion   string    `json:"configVersion,omitempty"`
	SHA256          string    `json:"sha256"`
	Size            int64     `json:"size"`
	Signature       string    `json:"signature,omitempty"`
	SigningKey      string    `json:"signingKey,omitempty"`
	UploadedBy      string    `json:"uploadedBy,omitempty"`
	UploadedAt      time.Time `json:"uploadedAt"`
}

// PackageList is the answer of GET /v1/agentpackages.
type PackageList struct {
	Packages []PackageAnswer `json:"packages"`
}

// NMPNodes is the answer of GET /v1/orgs/{org}/nmps/{name}/nodes: the
// nodes the NMP applies to, the agent version each registered, and, by
// org/node, the NMP in force on a node instead of this one.
type NMPNodes struct {
	Org       string            `json:"org"`
	Name      string            `json:"name"`
	Enabled   bool              `json:"enabled"`
	Nodes     []string          `json:"nodes"`
	Versions  map[string]string `json:"versions"`
	Conflicts map[string]string `json:"conflicts"`
}
