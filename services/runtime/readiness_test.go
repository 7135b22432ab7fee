package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
)

// readyz is what an orchestrator sees of /readyz: the status code and
// the stages' detail.
func readyz(t *testing.T, url string) (int, map[string]runtime.StageHealth) {
	t.Helper()
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Detail map[string]runtime.StageHealth `json:"detail"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body.Detail
}

// TestNotReadyUntilPartitionsAreAssigned starts a stage while its group
// still counts a member that died without leaving (a static member whose
// session has not expired): the stage's join waits for that session to
// time out, and all that while it holds nothing and must not say ready.
// Once the group gives it the partitions, it is ready and holds them.
func TestNotReadyUntilPartitionsAreAssigned(t *testing.T) {
	c := stagetest.NewCluster(t, 3, "out", "dlq.sink")
	const session = 4 * time.Second
	opts, err := c.Kafka.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	assigned := make(chan struct{}, 1)
	gone, err := kgo.NewClient(append(opts,
		kgo.ConsumerGroup(sinkStage().GroupIn(c.Kafka)), kgo.ConsumeTopics(c.Kafka.Topic("out")),
		kgo.InstanceID("gone"), kgo.SessionTimeout(session), kgo.HeartbeatInterval(session/10),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			select {
			case assigned <- struct{}{}:
			default:
			}
		}))...)
	if err != nil {
		t.Fatal(err)
	}
	go func() { gone.PollFetches(context.Background()) }()
	select {
	case <-assigned:
	case <-time.After(30 * time.Second):
		t.Fatal("the first member was never assigned its partitions")
	}
	gone.Close() // a static member leaves no group: the group waits for it

	env := stagetest.Env(c.Kafka)
	env.SessionTimeout = session
	srv := httptest.NewServer(env.Handler(nil))
	defer srv.Close()
	started := time.Now()
	stagetest.Run(t, sinkStage(), env)
	waitedOut := false
	for {
		code, detail := readyz(t, srv.URL)
		d := detail["sink"]
		if code == http.StatusOK {
			if !d.Ready || len(d.Partitions["out"]) != 3 {
				t.Fatalf("/readyz 200 %.1f s after start while the stage holds %v (idle %v, reason %q); want ready only holding all 3 partitions",
					time.Since(started).Seconds(), d.Partitions, d.Idle, d.Reason)
			}
			break
		}
		if d.Reason == "joining the consumer group: no partitions assigned yet" {
			waitedOut = true
		}
		if time.Since(started) > 30*time.Second {
			t.Fatalf("not ready after 30 s: %+v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !waitedOut {
		t.Errorf("never saw the stage say it was joining its group: the dead member's session did not hold the join back")
	}
}

// TestIdleMemberIsReadyAndSaysSo runs two members of a group reading one
// partition: one holds it, the other is idle by design, ready, and says so.
func TestIdleMemberIsReadyAndSaysSo(t *testing.T) {
	c := stagetest.NewCluster(t, 1, "out", "dlq.sink")
	envs := []runtime.Env{stagetest.Env(c.Kafka), stagetest.Env(c.Kafka)}
	for _, env := range envs {
		stagetest.Run(t, sinkStage(), env)
	}
	testkit.Eventually(t, time.Minute, testkit.Holds("both members ready, one of them idle", func() bool {
		held, idle := 0, 0
		for _, env := range envs {
			d := env.Health.Detail()["sink"]
			if !d.Ready {
				return false
			}
			held += len(d.Partitions["out"])
			if d.Idle {
				idle++
			}
		}
		return held == 1 && idle == 1
	}, func() string { return describeHealth(envs...) }))
}

// TestDependencyDownIsNotReady makes a stage depend on a service that does
// not answer: holding its partitions, it is not ready and says why, until
// the service answers again.
func TestDependencyDownIsNotReady(t *testing.T) {
	c := stagetest.NewCluster(t, 3, "out", "dlq.sink")
	env := stagetest.Env(c.Kafka)
	var down atomic.Bool
	down.Store(true)
	s := sinkStage()
	setup := s.Setup
	s.Setup = func(ctx context.Context, env runtime.Env) (runtime.Handler, func(), error) {
		env.Health.Depend(s.Name, runtime.Dependency{Name: "the store", Check: func(context.Context) error {
			if down.Load() {
				return errors.New("connection refused")
			}
			return nil
		}})
		return setup(ctx, env)
	}
	stagetest.Run(t, s, env)
	testkit.Eventually(t, time.Minute, testkit.Holds("the stage holding its partitions", func() bool { return len(env.Health.Detail()["sink"].Partitions["out"]) == 3 }))
	if d := env.Health.Detail()["sink"]; d.Ready || d.Reason != "the store does not answer: connection refused" {
		t.Fatalf("with its dependency down: %+v; want not ready, saying the store does not answer", d)
	}
	up := func() float64 {
		return series(t, env.Metrics, "policyflow_dependency_up")["dependency=the store,stage=sink"]
	}
	ready := func() float64 { return series(t, env.Metrics, "policyflow_stage_ready")["stage=sink"] }
	if up() != 0 || ready() != 0 {
		t.Errorf("with its dependency down: policyflow_dependency_up %v, policyflow_stage_ready %v; want 0 and 0", up(), ready())
	}
	down.Store(false)
	testkit.Eventually(t, time.Minute, testkit.Holds("ready once the dependency answers", func() bool { return env.Health.Detail()["sink"].Ready },
		func() string { return describeHealth(env) }))
	if up() != 1 || ready() != 1 {
		t.Errorf("with its dependency up: policyflow_dependency_up %v, policyflow_stage_ready %v; want 1 and 1", up(), ready())
	}
}

// TestExpectedStageThatStoppedIsNotReady: a stage expected in a process
// that stopped is reported not running, not left out.
func TestExpectedStageThatStoppedIsNotReady(t *testing.T) {
	c := stagetest.NewCluster(t, 3, "out", "dlq.sink")
	env := stagetest.Env(c.Kafka)
	env.Health.Expect("sink", "never-started")
	srv := httptest.NewServer(env.Handler(nil))
	defer srv.Close()
	stop := stagetest.Run(t, sinkStage(), env)
	testkit.Eventually(t, time.Minute, testkit.Holds("the sink ready", func() bool { return env.Health.Detail()["sink"].Ready }))
	stop()
	code, detail := readyz(t, srv.URL)
	if code != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d with a stage stopped; want 503", code)
	}
	for _, s := range []string{"sink", "never-started"} {
		if d, ok := detail[s]; !ok || d.Ready || d.Reason != runtime.NotRunning || !d.Expected {
			t.Errorf("/readyz says of %s: %+v (present %v); want not ready, %q", s, d, ok, runtime.NotRunning)
		}
	}
}

// describeHealth is the health detail of envs, for a failure message.
func describeHealth(envs ...runtime.Env) string {
	out := ""
	for _, env := range envs {
		b, _ := json.Marshal(env.Health.Detail())
		out += string(b) + "\n"
	}
	return out
}

// TestBlockedStageIsNotReady: a stage that holds its partitions but says
// it is blocked (Health.Blocked) is not ready, with its reason, in
// /readyz and policyflow_stage_ready, and ready again once it is not.
func TestBlockedStageIsNotReady(t *testing.T) {
	c := stagetest.NewCluster(t, 3, "out", "dlq.sink")
	env := stagetest.Env(c.Kafka)
	srv := httptest.NewServer(env.Handler(nil))
	defer srv.Close()
	var blocked atomic.Bool
	blocked.Store(true)
	s := sinkStage()
	setup := s.Setup
	s.Setup = func(ctx context.Context, env runtime.Env) (runtime.Handler, func(), error) {
		env.Health.Blocked(s.Name, func() string {
			if blocked.Load() {
				return "2 records wait for another process"
			}
			return ""
		})
		return setup(ctx, env)
	}
	stagetest.Run(t, s, env)
	testkit.Eventually(t, time.Minute, testkit.Holds("the stage holding its partitions", func() bool { return len(env.Health.Detail()["sink"].Partitions["out"]) == 3 }))
	ready := func() float64 { return series(t, env.Metrics, "policyflow_stage_ready")["stage=sink"] }
	code, detail := readyz(t, srv.URL)
	if d := detail["sink"]; code != http.StatusServiceUnavailable || d.Ready || d.Reason != "2 records wait for another process" || ready() != 0 {
		t.Fatalf("blocked: /readyz %d %+v, policyflow_stage_ready %v; want 503, not ready with its reason, and 0", code, d, ready())
	}
	blocked.Store(false)
	if code, detail := readyz(t, srv.URL); code != http.StatusOK || !detail["sink"].Ready || ready() != 1 {
		t.Fatalf("no longer blocked: /readyz %d %+v, policyflow_stage_ready %v; want 200, ready and 1", code, detail["sink"], ready())
	}
}
