package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// noticeOutputs are the notices of a verdict as events on
// admission.notices, keyed by deployment. A notice's id is
// <request_id>/<policy_id>/<rule>, the same when the request is decided
// again; a rule that raises several (an application quota exceeded by
// several applications) numbers the second and later ones, /2, /3, in the
// order the decision found them.
func noticeOutputs(requestID string, req *admit.Request, v admit.Verdict, now time.Time) []runtime.Output {
	var outs []runtime.Output
	seen := map[string]int{}
	for _, n := range v.Notices {
		id := requestID + "/" + n.PolicyID + "/" + n.Rule
		seen[id]++
		if k := seen[id]; k > 1 {
			id += "/" + strconv.Itoa(k)
		}
		outs = append(outs, runtime.Output{Topic: topology.AdmissionNotices, Key: []byte(req.DeploymentID), Value: &events.AdmissionNotice{
			NoticeID: id, RequestID: requestID, DeploymentID: req.DeploymentID,
			Tenant: req.Tenant, Environment: req.Environment, PolicyID: n.PolicyID, Rule: n.Rule, Object: n.Object,
			Message: n.Text(req.Tenant), WebhookURL: n.Webhook, Admitted: v.Admitted, RaisedAt: now.UTC(),
		}})
	}
	return outs
}

// Delivery of notices to their webhooks.
const (
	// NoticeAttempts is how many times a notice is posted before it is
	// given up (logged with the reason; it stays on admission.notices).
	NoticeAttempts = 4
	// NoticeTimeout bounds one attempt.
	NoticeTimeout = 5 * time.Second
	// NoticeQueue bounds the notices waiting for delivery; one more is
	// logged and not delivered.
	NoticeQueue = 1000
)

// NoticeBody is what a notice webhook is sent.
type NoticeBody struct {
	NoticeID     string    `json:"notice_id"`
	RequestID    string    `json:"request_id"`
	DeploymentID string    `json:"deployment_id"`
	Tenant       string    `json:"tenant"`
	Environment  string    `json:"environment"`
	PolicyID     string    `json:"policy_id"`
	Rule         string    `json:"rule"`
	Object       string    `json:"object"`
	Message      string    `json:"message"`
	Admitted     bool      `json:"admitted"`
	RaisedAt     time.Time `json:"raised_at"`
}

// delivery posts notices to their webhooks, one at a time, each with
// NoticeTimeout and up to NoticeAttempts attempts with backoff between
// them. It runs beside the stage's transaction: a notice is posted once
// it is decided, at least once, and a request decided again (its
// transaction aborted) posts it again with the same notice_id.
type delivery struct {
	log     zerolog.Logger
	call    admit.ExternalCaller
	backoff runtime.Backoff
	q       chan *events.AdmissionNotice
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

func startDelivery(log zerolog.Logger, call admit.ExternalCaller) *delivery {
	ctx, cancel := context.WithCancel(context.Background())
	d := &delivery{log: log, call: call, backoff: runtime.Backoff{Initial: 500 * time.Millisecond, Max: 5 * time.Second},
		q: make(chan *events.AdmissionNotice, NoticeQueue), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go d.run()
	return d
}

// send queues a notice for delivery.
func (d *delivery) send(n *events.AdmissionNotice) {
	select {
	case d.q <- n:
	default:
		d.failed(n, NoticeQueue, fmt.Sprintf("the delivery queue is full (%d notices waiting)", NoticeQueue))
	}
}

func (d *delivery) run() {
	defer close(d.done)
	for {
		select {
		case <-d.ctx.Done():
			return
		case n := <-d.q:
			d.deliver(n)
		}
	}
}

// deliver posts one notice until it is accepted or the attempts are
// spent.
func (d *delivery) deliver(n *events.AdmissionNotice) {
	body, err := json.Marshal(NoticeBody{NoticeID: n.NoticeID, RequestID: n.RequestID, DeploymentID: n.DeploymentID, Tenant: n.Tenant,
		Environment: n.Environment, PolicyID: n.PolicyID, Rule: n.Rule, Object: n.Object, Message: n.Message, Admitted: n.Admitted, RaisedAt: n.RaisedAt})
	if err != nil {
		d.failed(n, 0, "encode: "+err.Error())
		return
	}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(d.ctx, NoticeTimeout)
		_, err = d.call(ctx, n.WebhookURL, body)
		cancel()
		if err == nil {
			d.log.Info().Str("notice_id", n.NoticeID).Str("webhook", notifytarget.MaskURL(n.WebhookURL)).Int("attempt", attempt).Msg("notice delivered")
			return
		}
		if attempt == NoticeAttempts {
			d.failed(n, attempt, err.Error())
			return
		}
		select {
		case <-d.ctx.Done():
			d.failed(n, attempt, "the stage stopped before it was delivered: "+err.Error())
			return
		case <-time.After(d.backoff.Next(attempt)):
		}
	}
}

// failed logs a notice that was not delivered, with the reason.
func (d *delivery) failed(n *events.AdmissionNotice, attempts int, reason string) {
	d.log.Error().Str("notice_id", n.NoticeID).Str("deployment_id", n.DeploymentID).Str("policy_id", n.PolicyID).
		Str("webhook", notifytarget.MaskURL(n.WebhookURL)).Int("attempts", attempts).Str("reason", reason).
		Msg("notice not delivered to its webhook: given up; it stays on " + topology.AdmissionNotices)
}

// close stops delivering; notices still queued are dropped (logged).
func (d *delivery) close() {
	d.cancel()
	<-d.done
	for {
		select {
		case n := <-d.q:
			d.failed(n, 0, "the stage stopped before it was delivered")
		default:
			return
		}
	}
}
