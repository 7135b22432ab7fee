package api

// OperationElement is one element of an operation request.
type OperationElement struct {
	ID         string         `json:"id"`
	Type       string         `json:"type"`
	Properties map[string]any `json:"properties,omitempty"`
}

// OperationRequest is the body of POST /v2/participants/{id}/operations.
type OperationRequest struct {
	// Kind is PRIME, DEPRIME, DEPLOY, UPDATE, UNDEPLOY or DELETE.
	Kind          string `json:"kind"`
	CompositionID string `json:"compositionId"`
	// InstanceID is required for every kind but PRIME and DEPRIME.
	InstanceID string `json:"instanceId,omitempty"`
	// Elements are the element definitions (PRIME) or instance elements
	// (DEPLOY, UPDATE); for DEPRIME, UNDEPLOY and DELETE they default to
	// those the replicas hold.
	Elements  []OperationElement `json:"elements,omitempty"`
	TimeoutMs int64              `json:"timeoutMs,omitempty"`
}

// OperationAnswer is the answer of POST /v2/participants/{id}/operations.
type OperationAnswer struct {
	OperationID string `json:"operationId"`
	Revision    int64  `json:"revision"`
}
