package agentnotifier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/rollout"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// MaxStderrBytes is how much of a script's stderr the claim records.
const MaxStderrBytes = 4096

// scriptWaitDelay is how long the stderr of a script that ended is still
// read while a process it started holds it open.
const scriptWaitDelay = 2 * time.Second

// Result is the outcome of one notification.
type Result struct {
	ExitCode   int
	Stderr     string
	HTTPStatus int
	Took       time.Duration
	// Refused says the rules refused the target: nothing ran.
	Refused bool
	// TimedOut says the script or webhook did not finish within its
	// timeout (ExitCode is then -1).
	TimedOut bool
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
// and reports its exit status and the start of its stderr. It runs
// nothing, and reports exit code -1 with the reason, when the rules refuse
// path (checked now, so a file replaced since the component was
// registered is refused too) or the notification does not fit one
// argument. The script's whole environment is notifytarget.ScriptEnv and
// the Delivery (Delivery.Env), so it can drop a copy of an update it was
// already given. At the timeout the script (and its process group, where
// the system has them) is killed; the result then has exit code -1. On
// Linux the kernel kills the script when the notifier dies.
func RunScript(ctx context.Context, rules notifytarget.Rules, path string, d Delivery, payload []byte, timeout time.Duration) Result {
	start := time.Now()
	res := runScript(ctx, rules, path, d, payload, timeout)
	res.Took = time.Since(start)
	return res
}

func runScript(ctx context.Context, rules notifytarget.Rules, path string, d Delivery, payload []byte, timeout time.Duration) Result {
	file, err := rules.CheckScript(path)
	if err == nil {
		err = notifytarget.CheckArg(len(payload))
	}
	if err != nil {
		return Result{ExitCode: -1, Stderr: "not run: " + err.Error(), Refused: true}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, file, ReconfigureType, string(payload))
	cmd.Env = append(notifytarget.ScriptEnv(), d.Env()...)
	stderr := &limitedBuffer{max: MaxStderrBytes}
	cmd.Stderr = stderr
	// Without it, a script that ended while a process it started keeps
	// its stderr open would be waited for until that process ends.
	cmd.WaitDelay = scriptWaitDelay
	prepareScript(cmd)
	err = runScriptCmd(cmd)
	res := Result{ExitCode: -1, Stderr: stderr.String()}
	switch st := cmd.ProcessState; {
	case st != nil && st.Exited():
		// The script ended by itself: its status stands, also when
		// its stderr was still held open (exec.ErrWaitDelay).
		res.ExitCode = st.ExitCode()
		if errors.Is(err, exec.ErrWaitDelay) {
			res.Stderr += "\n[the script ended; a process it started kept its stderr open, which was not read further]"
		}
	case ctx.Err() == context.DeadlineExceeded:
		res.TimedOut = true
		res.Stderr += fmt.Sprintf("\n[killed: the script did not end within its timeout of %s]", timeout)
	case errors.Is(err, syscall.E2BIG):
		res.Stderr = fmt.Sprintf("cannot run %s: the notification is %d bytes, more than the system accepts in one argument: %v", file, len(payload), err)
	case err != nil:
		res.Stderr = fmt.Sprintf("cannot run %s: %v", file, err)
	}
	return res
}

// The headers of a webhook notification, and the environment variables
// of a script, that name the update it delivers: a receiver can tell a
// notification delivered again (a run that failed, or that a notifier
// which died left unfinished, is run again; a repair or an operator's
// renotify delivers the same update again; a proxy may retry) and their
// order (generations of a component only grow). The generation is a
// fencing token: a receiver that keeps the greatest it applied can drop
// an older one, which only a notifier paused between its last check of
// its claim and its run could still send (fence.go).
const (
	HeaderComponentID = "Policyflow-Component-Id"
	HeaderUpdateID    = "Policyflow-Update-Id"
	HeaderGeneration  = "Policyflow-Generation"

	EnvComponentID = "POLICYFLOW_COMPONENT_ID"
	EnvUpdateID    = "POLICYFLOW_UPDATE_ID"
	EnvGeneration  = "POLICYFLOW_GENERATION"
	// EnvRun names the notifier run that started the script, by which
	// the notifier that takes its claim over finds what it left running.
	EnvRun = "POLICYFLOW_NOTIFIER_RUN"
)

// Delivery names what a notification delivers, sent with a webhook in
// HeaderComponentID, HeaderUpdateID and HeaderGeneration, and to a
// script in its environment (Env).
type Delivery struct {
	ComponentID, UpdateID string
	Generation            int64
	// Run is the notifier run (its claim owner), given to scripts only.
	Run string
}

// Env is the Delivery as a script's environment variables.
func (d Delivery) Env() []string {
	env := []string{EnvComponentID + "=" + d.ComponentID, EnvUpdateID + "=" + d.UpdateID, EnvGeneration + "=" + strconv.FormatInt(d.Generation, 10)}
	if d.Run != "" {
		env = append(env, EnvRun+"="+d.Run)
	}
	return env
}

// PostWebhook POSTs the notification (Content-Type application/json, the
// Delivery in headers) when the rules allow the URL, with client (notifytarget.Rules.Client: it
// checks the address it dials and follows no redirect). It reports the
// answer's status: a 2xx answer is success, any other (a redirect
// included) a failure; the answer's body is never kept. The URL is shown
// masked in the result.
func PostWebhook(ctx context.Context, rules notifytarget.Rules, client *http.Client, rawURL string, d Delivery, payload []byte, timeout time.Duration) Result {
	start := time.Now()
	res := postWebhook(ctx, rules, client, rawURL, d, payload, timeout)
	res.Took = time.Since(start)
	return res
}

func postWebhook(ctx context.Context, rules notifytarget.Rules, client *http.Client, rawURL string, d Delivery, payload []byte, timeout time.Duration) Result {
	shown := notifytarget.MaskURL(rawURL)
	if _, err := rules.CheckWebhook(rawURL); err != nil {
		return Result{ExitCode: -1, Stderr: "not called: " + err.Error(), Refused: true}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(payload))
	if err != nil {
		return Result{ExitCode: -1, Stderr: fmt.Sprintf("cannot POST to %s: %s", shown, notifytarget.MaskText(err.Error()))}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderComponentID, d.ComponentID)
	req.Header.Set(HeaderUpdateID, d.UpdateID)
	req.Header.Set(HeaderGeneration, strconv.FormatInt(d.Generation, 10))
	resp, err := client.Do(req)
	if err != nil {
		// url.Error repeats the URL unmasked; keep what went wrong.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		msg := fmt.Sprintf("POST %s: %s", shown, notifytarget.MaskText(err.Error()))
		timedOut := ctx.Err() == context.DeadlineExceeded
		if timedOut {
			msg += fmt.Sprintf(" (no answer within its timeout of %s)", timeout)
		}
		return Result{ExitCode: -1, Stderr: msg, TimedOut: timedOut}
	}
	defer resp.Body.Close()
	// Read a little of the body so the connection can serve the next
	// webhook; it is not kept.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxStderrBytes))
	res := Result{ExitCode: 1, HTTPStatus: resp.StatusCode}
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		res.ExitCode = 0
	case code >= 300 && code < 400:
		res.Stderr = fmt.Sprintf("POST %s: %d %s: redirects are not followed; give the final URL as webhook_url", shown, code, http.StatusText(code))
	default:
		res.Stderr = fmt.Sprintf("POST %s: %d %s", shown, code, http.StatusText(code))
	}
	return res
}

// notify runs the claimed job's script or webhook and puts the outcome in
// its claim. A run that fails (a non-zero exit, an answer that is not
// 2xx, no answer) is run again after the notify backoff, up to
// cfg.Attempts runs in all; then the outcome is failed. A target the rules
// refuse is not run again: that cannot change before an operator acts.
// Each run, the first and every one again, starts only once fence allows
// it, and is stopped when its lease was not renewed in time or its claim
// is found to be another's; then no run starts any more and notify
// reports false: there is no outcome to record.
func (n *notifier) notify(ctx context.Context, j *job) bool {
	a := j.a
	timeout := n.timeout(j)
	if n.tracer != nil && j.trace != nil {
		// The notification's span, in the trace of the change it carries.
		_, span := n.tracer.Start(j.trace, "notify "+a.ComponentID, attribute.String("policyflow.notify_kind", a.Notify.Kind),
			attribute.String("policyflow.update_id", a.UpdateID))
		defer func() {
			span.SetAttributes(attribute.Int("policyflow.attempts", j.claim.Attempts))
			switch code := j.claim.ExitCode; {
			case code == nil:
				span.SetStatus(codes.Error, "notification stopped: the claim was not made sure of")
			case *code != 0:
				span.SetAttributes(attribute.Int("policyflow.exit_code", *code))
				span.SetStatus(codes.Error, "notification failed")
			default:
				span.SetAttributes(attribute.Int("policyflow.exit_code", *code))
			}
			span.End()
		}()
	}
	var res Result
	target := a.Notify.ScriptPath
	if a.Notify.Kind != events.NotifyScript {
		target = notifytarget.MaskURL(a.Notify.WebhookURL)
	}
	d := Delivery{ComponentID: a.ComponentID, UpdateID: a.UpdateID, Generation: a.Generation, Run: n.owner}
	t := n.chains.track(j) // its lease is renewed until it ends
	defer n.chains.untrack(t)
	var aborted *events.PolicyRollout
	for run := 1; ; run++ {
		if run > 1 {
			if aborted = n.abortedIn(j); aborted != nil {
				j.log.Warn().Int("attempt", j.claim.Attempts).Str("policy_id", aborted.PolicyID).Str("version", aborted.Version).Str("rollout_id", aborted.RolloutID).
					Msg("notification not run again: the rollout of a version it delivers was aborted, the version restored is on its way")
				break
			}
		}
		if !n.chains.fence(j, run > 1) {
			j.log.Warn().Int("attempt", j.claim.Attempts+1).Bool("claim_lost", j.lost).Msg("notification stopped before its run: the claim is not this notifier's for sure")
			return false
		}
		var stopped error
		res, stopped = n.chains.run(ctx, t, func(ctx context.Context) Result {
			if a.Notify.Kind == events.NotifyScript {
				return RunScript(ctx, n.rules, a.Notify.ScriptPath, d, j.body, timeout)
			}
			return PostWebhook(ctx, n.rules, n.http, a.Notify.WebhookURL, d, j.body, timeout)
		})
		if stopped != nil && cutShort(res) {
			if !j.lost {
				j.unrecorded = true // looked at again later, as the claim is still this run's
			}
			j.log.Warn().Err(stopped).Int("attempt", j.claim.Attempts+1).Str("kind", a.Notify.Kind).Str("target", target).Dur("took", res.Took).
				Msg("notification stopped in the middle of its run: its lease was not renewed in time, or its claim is another's")
			return false
		}
		j.claim.Attempts++
		n.counted(j, res)
		ev, msg := j.log.Info(), "component notified"
		last := res.ExitCode == 0 || res.Refused || run >= n.cfg.Attempts || ctx.Err() != nil
		switch {
		case res.ExitCode != 0 && last:
			ev, msg = j.log.Warn().Str("stderr", res.Stderr), "notification failed"
		case res.ExitCode != 0:
			ev, msg = j.log.Warn().Str("stderr", res.Stderr), "notification failed; it runs again"
		}
		ev.Str("kind", a.Notify.Kind).Str("target", target).Int("exit_code", res.ExitCode).Int("http_status", res.HTTPStatus).
			Int("attempt", j.claim.Attempts).Int("payload_bytes", len(j.body)).Dur("took", res.Took).Msg(msg)
		if last {
			break
		}
		n.chains.pause(ctx, t, n.backoff.Next(run-1))
	}
	j.claim.ExitCode, j.claim.Stderr, j.claim.HTTPStatus = &res.ExitCode, res.Stderr, res.HTTPStatus
	j.claim.Outcome = consulkv.OutcomeOK
	if aborted != nil {
		j.claim.Outcome = consulkv.OutcomeSuperseded
		j.claim.Stderr = fmt.Sprintf("%s\n[not run again: the rollout %s of version %s of %s was aborted; the version it restored is notified next]",
			res.Stderr, aborted.RolloutID, aborted.Version, aborted.PolicyID)
	} else if res.ExitCode != 0 {
		j.claim.Outcome = consulkv.OutcomeFailed
	} else {
		j.claim.Told = j.told // what it was told with success
	}
	j.claim.At = time.Now().UTC().Format(time.RFC3339Nano)
	return true
}

// abortedIn is the rollout record, when there is one, saying that the
// rollout of a version j's update delivers (a policy_id, version and body
// hash of its updated policies) was aborted: a failed run of it is not run
// again, the version the abort restored is on its way in a later update.
// It looks in policy.rollouts as the notifier follows it: no request.
func (n *notifier) abortedIn(j *job) *events.PolicyRollout {
	if n.rollouts == nil {
		return nil
	}
	for _, ref := range j.a.UpdatedRefs {
		r, ok := n.rollouts.Value(ref.PolicyID)
		if !ok {
			continue
		}
		if _, decided := rollout.InForce(r, ref.PolicyVersion, ref.BodyHash); decided {
			return r
		}
	}
	return nil
}

// cutShort reports whether a run did not end by itself: its script was
// killed or its webhook call given up.
func cutShort(res Result) bool {
	return res.ExitCode == -1 && !res.Refused && res.HTTPStatus == 0
}

// counted records a notification's outcome, its time and, when it
// succeeded, the end-to-end latency of the change it carried.
func (n *notifier) counted(j *job, res Result) {
	if n.metrics == nil {
		return
	}
	outcome := runtime.OutcomeOK
	switch {
	case res.TimedOut:
		outcome = runtime.OutcomeTimedOut
	case res.ExitCode != 0:
		outcome = runtime.OutcomeFailed
	}
	n.metrics.Notifications.WithLabelValues(topology.StageAgentNotifier, j.a.Notify.Kind, outcome).Inc()
	n.metrics.NotifySeconds.WithLabelValues(topology.StageAgentNotifier, outcome).Observe(res.Took.Seconds())
	if outcome == runtime.OutcomeOK && j.hasOrigin {
		n.metrics.ReachedAt(runtime.MilestoneNotified, j.origin)
	}
}
