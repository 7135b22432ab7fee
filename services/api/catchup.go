package api

// StageProgress is what one stage reported of a catch-up: partitions done
// of all, and the sums of their counts.
type StageProgress struct {
	PartitionsDone int   `json:"partitions_done"`
	Compared       int64 `json:"compared"`
	Differed       int64 `json:"differed"`
	KeysWritten    int64 `json:"keys_written,omitempty"`
}

// CatalogProgress is what pdp-ingest's catch-up found comparing the
// catalog with the PDP's full listing: policy_ids listed, policies read
// again because they differed, policies the PDP no longer lists sent to be
// removed everywhere, and, when it removed none of those, why
// (removal_withheld: an empty listing, or more than
// --catchup-max-removal-share of the catalog's policies from the PDP).
type CatalogProgress struct {
	Listed          int64  `json:"listed"`
	Differed        int64  `json:"differed"`
	Removed         int64  `json:"removed"`
	RemovalWithheld string `json:"removal_withheld,omitempty"`
}

// CatchupStatus is the answer of GET /v1/catchup/{request_id}. A
// catch-up pdp-ingest runs (pdp-ingest-<n>) first compares the catalog
// with the PDP (pdp_ingest, see CatalogProgress). The
// matcher compares components with what they should have (differed:
// components sent a catch-up delta, each written to Consul and notified
// as any update); the consul-writer compares Consul folders with their
// collections (differed: folders written back, with keys_written keys);
// the agent-notifier looks at the components' last notifications
// (differed: notifications run again, the failed ones and a renotify's).
// Done once the matcher and the consul-writer reported from every
// partition.
type CatchupStatus struct {
	RequestID     string        `json:"request_id"`
	Partitions    int           `json:"partitions"`
	Matcher       StageProgress `json:"matcher"`
	ConsulWriter  StageProgress `json:"consul_writer"`
	AgentNotifier StageProgress `json:"agent_notifier"`
	// PDPIngest is absent for catch-ups asked through the API, which
	// compare components only.
	PDPIngest *CatalogProgress `json:"pdp_ingest,omitempty"`
	Done      bool             `json:"done"`
}

// CatchupBody is the body of POST /v1/catchup.
type CatchupBody struct {
	// DeploymentID limits the catch-up to one deployment; "" means all.
	DeploymentID string `json:"deployment_id,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

// CatchupAccepted is the answer of POST /v1/catchup.
type CatchupAccepted struct {
	RequestID    string `json:"request_id"`
	Scope        string `json:"scope"`
	DeploymentID string `json:"deployment_id,omitempty"`
	Partitions   int    `json:"partitions"`
}
