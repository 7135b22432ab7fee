package events

import "time"

// SchemaAdmissionNotice is the full name of AdmissionNotice's schema.
const SchemaAdmissionNotice = "policyflow.AdmissionNotice"

// AdmissionNotice is a notice the admission stage raised on a deployment
// request (an environment's instances over an InstanceNotice threshold),
// on admission.notices, keyed by deployment id.
type AdmissionNotice struct {
	NoticeID     string    `avro:"notice_id"`
	RequestID    string    `avro:"request_id"`
	DeploymentID string    `avro:"deployment_id"`
	Tenant       string    `avro:"tenant"`
	Environment  string    `avro:"environment"`
	PolicyID     string    `avro:"policy_id"`
	Rule         string    `avro:"rule"`
	Object       string    `avro:"object"`
	Message      string    `avro:"message"`
	WebhookURL   string    `avro:"webhook_url"`
	Admitted     bool      `avro:"admitted"`
	RaisedAt     time.Time `avro:"raised_at"`
}

func (*AdmissionNotice) SchemaName() string { return SchemaAdmissionNotice }

// SchemaAuditEntry is the full name of AuditEntry's schema.
const SchemaAuditEntry = "policyflow.AuditEntry"

// AuditEntry is one admitted deployment an application policy would deny
// now, on admission.audit keyed by AuditKey(policy, deployment); the
// entries of one policy are its audit report.
type AuditEntry struct {
	PolicyID     string         `avro:"policy_id"`
	DeploymentID string         `avro:"deployment_id"`
	RequestID    string         `avro:"request_id"`
	Tenant       string         `avro:"tenant"`
	Findings     []AuditFinding `avro:"findings"`
	CheckedAt    time.Time      `avro:"checked_at"`
}

// AuditFinding is one thing a policy would deny in a deployment.
type AuditFinding struct {
	Rule    string `avro:"rule"`
	Object  string `avro:"object"`
	Message string `avro:"message"`
}

func (*AuditEntry) SchemaName() string { return SchemaAuditEntry }

// AuditKey is the key of a policy's entry for a deployment on
// admission.audit. Neither id holds a '/'.
func AuditKey(policyID, deploymentID string) string { return policyID + "/" + deploymentID }
