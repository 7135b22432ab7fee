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
