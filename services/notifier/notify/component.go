package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
)

// MaxStderrBytes is how much of a script's stderr (or a webhook's error
// response) the claim records.
const MaxStderrBytes = 4096

// ReconfigureType is the first argument of the script: the notification
// carries the whole collection of policies.
const ReconfigureType = "policies"

// ShouldNotify decides whether a component.applied record is notified: not
// when the component was uninstalled or has no notify target, and not
// when the claim shows this generation (or a newer one) was already
// claimed, so each update_id is notified at most once and a replay
// notifies nobody. reason says why not.
func ShouldNotify(claim *consulkv.Claim, a *events.ComponentApplied) (ok bool, reason string) {
	switch {
	case a.Uninstalled:
		return false, "the component is uninstalled"
	case a.Notify.Kind == events.NotifyNone || a.Notify.Kind == "":
		return false, "the component has no notify target"
	case claim != nil && claim.Generation >= a.Generation:
		return false, fmt.Sprintf("generation %d (update %s) was already claimed", claim.Generation, claim.UpdateID)
	}
	return true, ""
}

// payload is the notification JSON. Field order is the documented one.
type payload struct {
	Policies        []json.RawMessage `json:"policies"`
	UpdatedPolicies []json.RawMessage `json:"updated_policies"`
	RemovedPolicies []json.RawMessage `json:"removed_policies"`
}

// Payload builds the notification a component receives:
// {"policies": [...], "updated_policies": [...], "removed_policies": [...]},
// each a list of policy_body objects (the parsed bodies, not strings), in
// the order of the record. A body that is not a JSON object is an error.
func Payload(a *events.ComponentApplied) ([]byte, error) {
	var p payload
	var err error
	if p.Policies, err = bodies(a.Policies, "policies"); err != nil {
		return nil, err
	}
	if p.UpdatedPolicies, err = bodies(a.UpdatedPolicies, "updated_policies"); err != nil {
		return nil, err
	}
	if p.RemovedPolicies, err = bodies(a.RemovedPolicies, "removed_policies"); err != nil {
		return nil, err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("build notification of update %s for component %s: %w", a.UpdateID, a.ComponentID, err)
	}
	return b, nil
}

func bodies(ps []events.Policy, list string) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(ps))
	for _, p := range ps {
		b := bytes.TrimSpace([]byte(p.Body))
		if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
			return nil, fmt.Errorf("build notification: %s: policy %s body is not a JSON object", list, p.PolicyID)
		}
		out = append(out, json.RawMessage(b))
	}
	return out, nil
}

// Result is the outcome of one notification.
type Result struct {
	ExitCode   int
	Stderr     string
	HTTPStatus int
	Took       time.Duration
}

// limitedBuffer keeps the first max bytes written to it and counts the
// rest.
type limitedBuffer struct {
	buf     bytes.Buffer
	max     int
	dropped int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	room := l.max - l.buf.Len()
	switch {
	case room >= len(p):
		l.buf.Write(p)
	case room > 0:
		l.buf.Write(p[:room])
		l.dropped += len(p) - room
	default:
		l.dropped += len(p)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	if l.dropped > 0 {
		return l.buf.String() + fmt.Sprintf("\n[%d more bytes of stderr dropped]", l.dropped)
	}
	return l.buf.String()
}

// RunScript runs `<path> policies <json>` (argv, never through a shell)
// and reports its exit status and the start of its stderr. At the timeout
// the script (and its process group, where the system has them) is
// killed; the result then has exit code -1.
func RunScript(ctx context.Context, path string, payload []byte, timeout time.Duration) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, ReconfigureType, string(payload))
	stderr := &limitedBuffer{max: MaxStderrBytes}
	cmd.Stderr = stderr
	cmd.WaitDelay = 2 * time.Second
	killProcessGroup(cmd)
	err := cmd.Run()
	res := Result{Stderr: stderr.String(), Took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case err == nil:
		res.ExitCode = 0
	case ctx.Err() == context.DeadlineExceeded:
		res.ExitCode = -1
		res.Stderr += fmt.Sprintf("\n[killed: the script did not end within its timeout of %s]", timeout)
	case errors.As(err, &exit):
		res.ExitCode = exit.ExitCode()
	case errors.Is(err, syscall.E2BIG):
		res.ExitCode = -1
		res.Stderr = fmt.Sprintf("cannot run %s: the notification is %d bytes, more than the system accepts in one argument (128 KiB on Linux): %v", path, len(payload), err)
	default:
		res.ExitCode = -1
		res.Stderr = fmt.Sprintf("cannot run %s: %v", path, err)
	}
	return res
}

// PostWebhook POSTs the notification (Content-Type application/json) and
// reports the answer's status; a non-2xx answer's body is kept as stderr.
func PostWebhook(ctx context.Context, client *http.Client, url string, payload []byte, timeout time.Duration) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := Result{ExitCode: -1}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		res.Stderr = fmt.Sprintf("cannot POST to %s: %v", url, err)
		res.Took = time.Since(start)
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		res.Stderr = fmt.Sprintf("POST %s: %v", url, err)
		res.Took = time.Since(start)
		return res
	}
	defer resp.Body.Close()
	body := &limitedBuffer{max: MaxStderrBytes}
	_, _ = io.Copy(body, resp.Body)
	res.HTTPStatus = resp.StatusCode
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		res.ExitCode = 0
	} else {
		res.ExitCode = 1
		res.Stderr = fmt.Sprintf("POST %s: %s: %s", url, resp.Status, body.buf.String())
	}
	res.Took = time.Since(start)
	return res
}

// ErrClaimTaken is wrapped by the (transient) error of a record whose
// claim lost a check-and-set race; on the retry the claim shows whether
// the update was already claimed.
var ErrClaimTaken = errors.New("the notification claim changed while it was taken")

// job is one component.applied record of a batch on its way through
// claim, notification and record.
type job struct {
	i    int // the record's place in the batch
	a    *events.ComponentApplied
	key  string // the component's claim key
	body []byte // the notification
	log  zerolog.Logger
	// index is the claim key's ModifyIndex: as read, then as claimed.
	index uint64
	claim consulkv.Claim
}

// prepare checks a component.applied record and builds its notification.
// It returns no job when the record needs no notification whatever the
// claim says, and a Permanent error when it can never be notified.
func (n *notifier) prepare(a *events.ComponentApplied) (*job, error) {
	log := n.log.With().Str("component_id", a.ComponentID).Str("update_id", a.UpdateID).Int64("generation", a.Generation).Logger()
	if ok, why := ShouldNotify(nil, a); !ok {
		log.Debug().Str("reason", why).Msg("not notified")
		return nil, nil
	}
	if a.ServiceComponentName == "" {
		return nil, runtime.Permanentf("agent-notifier: component %s update %s has no service_component_name, so no place for its claim", a.ComponentID, a.UpdateID)
	}
	switch {
	case a.Notify.Kind == events.NotifyScript && a.Notify.ScriptPath == "":
		return nil, runtime.Permanentf("agent-notifier: component %s is notified by script but names no script_path", a.ComponentID)
	case a.Notify.Kind == events.NotifyWebhook && a.Notify.WebhookURL == "":
		return nil, runtime.Permanentf("agent-notifier: component %s is notified by webhook but names no webhook_url", a.ComponentID)
	case a.Notify.Kind != events.NotifyScript && a.Notify.Kind != events.NotifyWebhook:
		return nil, runtime.Permanentf("agent-notifier: component %s has notify kind %q", a.ComponentID, a.Notify.Kind)
	}
	body, err := Payload(a)
	if err != nil {
		return nil, runtime.Permanent(fmt.Errorf("agent-notifier: component %s: %w", a.ComponentID, err))
	}
	return &job{a: a, key: consulkv.ClaimKey(a.ServiceComponentName), body: body, log: log}, nil
}

// notify runs the claimed job's script or webhook and puts the outcome in
// its claim. The component's own failure is recorded and logged, never
// retried.
func (n *notifier) notify(ctx context.Context, j *job) {
	a := j.a
	timeout := n.cfg.Timeout
	if a.Notify.TimeoutMs > 0 {
		timeout = time.Duration(a.Notify.TimeoutMs) * time.Millisecond
	}
	var res Result
	if a.Notify.Kind == events.NotifyScript {
		res = RunScript(ctx, a.Notify.ScriptPath, j.body, timeout)
	} else {
		res = PostWebhook(ctx, n.http, a.Notify.WebhookURL, j.body, timeout)
	}
	ev := j.log.Info()
	if res.ExitCode != 0 {
		ev = j.log.Warn().Str("stderr", res.Stderr)
	}
	ev.Str("kind", a.Notify.Kind).Int("exit_code", res.ExitCode).Int("http_status", res.HTTPStatus).
		Int("payload_bytes", len(j.body)).Dur("took", res.Took).Msg("component notified")
	j.claim.ExitCode, j.claim.Stderr, j.claim.HTTPStatus = &res.ExitCode, res.Stderr, res.HTTPStatus
	j.claim.At = time.Now().UTC().Format(time.RFC3339Nano)
}
