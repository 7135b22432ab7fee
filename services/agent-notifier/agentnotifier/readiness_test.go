package agentnotifier

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// readyz is what an orchestrator sees of the agent-notifier on the ops
// listener at url: /readyz's status code and the stage's reason.
func readyz(t *testing.T, url string) (int, string) {
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
	return resp.StatusCode, body.Detail[topology.StageAgentNotifier].Reason
}

// lag is the agent-notifier's policyflow_consumer_lag of component.applied
// in all, as env's metrics say it now, and whether any series is there.
func lag(t *testing.T, env runtime.Env) (float64, bool) {
	t.Helper()
	mfs, err := env.Metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum, found := 0.0, false
	for _, mf := range mfs {
		if mf.GetName() != "policyflow_consumer_lag" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stage"] == topology.StageAgentNotifier && labels["topic"] == topology.ComponentApplied {
				sum, found = sum+m.GetGauge().GetValue(), true
			}
		}
	}
	return sum, found
}

// A component whose record waits for the live lease of another
// notifier's unfinished notification (one it cannot see, under another
// instance id) makes the agent-notifier not ready, naming it, and the
// record stays in the committed lag; once the lease ended the component
// is notified, the stage is ready again and the lag reads 0.
func TestNotReadyWhileWaitingForAnotherNotifiersLease(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.ComponentApplied, topology.DLQ(topology.StageAgentNotifier))
	const id, held = "waited", 4 * time.Second
	var mu sync.Mutex
	var notified time.Time
	hooks := newHookServer(t, func(string) {
		mu.Lock()
		notified = time.Now()
		mu.Unlock()
	})
	env := stagetest.Env(c.Kafka)
	env.InstanceID, env.LagInterval = "agent-notifier-1", 100*time.Millisecond
	srv := httptest.NewServer(env.Handler(nil))
	defer srv.Close()
	stagetest.Run(t, stageOn(t, consulCfg), env)
	testkit.Eventually(t, time.Minute, func() error {
		if code, why := readyz(t, srv.URL); code != http.StatusOK {
			return fmt.Errorf("/readyz %d: %s", code, why)
		}
		return nil
	})

	// Another notifier, elsewhere, notifies generation 1 under a lease
	// it renewed a moment ago.
	now := time.Now().UTC()
	until := now.Add(held)
	other := consulkv.Claim{UpdateID: id + "-u1", Generation: 1, At: now.Format(time.RFC3339Nano), LeaseUntil: until.Format(time.RFC3339Nano),
		Owner: "agent-notifier-0/elsewhere", Instance: "agent-notifier-0", Runner: inAContainer(thisRunner())}
	if _, err := consul.KV().Put(&api.KVPair{Key: consulkv.ClaimKey(id), Value: other.JSON()}, nil); err != nil {
		t.Fatal(err)
	}
	holdGeneration(t, consul, 2, id)
	c.Produce(t, topology.ComponentApplied, id, update(id, 2, webhook(hooks.URL+"/"+id)))

	var why string
	testkit.Eventually(t, held/2, func() error {
		var code int
		if code, why = readyz(t, srv.URL); code != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz %d while %s waits: %s", code, id, why)
		}
		if l, ok := lag(t, env); !ok || l < 1 {
			return fmt.Errorf("lag %v (series there: %v) while %s waits", l, ok, id)
		}
		return nil
	})
	if !strings.Contains(why, "1 component(s) wait for the lease of another notifier") || !strings.Contains(why, id) || !strings.Contains(why, "agent-notifier-0/elsewhere") {
		t.Fatalf("/readyz says %q while %s waits; want how many wait, which, and for whom", why, id)
	}
	if got := hooks.total(); got != 0 {
		t.Fatalf("%d notifications while the lease of the other notifier ran", got)
	}

	waitClaim(t, consul, id, id+"-u2")
	mu.Lock()
	at := notified
	mu.Unlock()
	if at.Before(until) {
		t.Fatalf("notified %s before the other notifier's lease ended", until.Sub(at))
	}
	testkit.Eventually(t, time.Minute, func() error {
		if code, why := readyz(t, srv.URL); code != http.StatusOK {
			return fmt.Errorf("/readyz %d after %s was notified: %s", code, id, why)
		}
		if l, _ := lag(t, env); l != 0 {
			return fmt.Errorf("lag %v after %s was notified", l, id)
		}
		return nil
	})
}

// A record's offset is not committed while its notification runs, only
// once it ended: the committed lag counts it meanwhile, and a notifier
// that died then would leave the record to the member after it.
func TestRecordIsCommittedOnceItsNotificationEnded(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.ComponentApplied, topology.DLQ(topology.StageAgentNotifier))
	const id = "held-offset"
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	hooks := newHookServer(t, func(string) { <-release })
	env := stagetest.Env(c.Kafka)
	env.LagInterval = 100 * time.Millisecond
	stage := stageOn(t, consulCfg)
	stagetest.Run(t, stage, env)
	t.Cleanup(free) // before the stage's stop waits for the webhook
	holdGeneration(t, consul, 1, id)
	c.Produce(t, topology.ComponentApplied, id, update(id, 1, webhook(hooks.URL+"/"+id)))
	testkit.Eventually(t, time.Minute, func() error {
		if hooks.came.Load() == 0 {
			return fmt.Errorf("%s not notified yet", id)
		}
		return nil
	})
	committed := func() int64 {
		offs, err := c.Admin.FetchOffsets(context.Background(), stage.GroupIn(c.Kafka))
		if err != nil {
			return 0
		}
		n := int64(0)
		offs.Each(func(o kadm.OffsetResponse) { n += max(o.At, 0) })
		return n
	}
	// Offsets are committed every second: three go by.
	time.Sleep(3 * time.Second)
	if n := committed(); n != 0 {
		t.Fatalf("%d records committed while the only record's notification runs", n)
	}
	if l, ok := lag(t, env); !ok || l != 1 {
		t.Fatalf("lag %v (series there: %v) while the record's notification runs, want 1", l, ok)
	}
	free()
	waitClaim(t, consul, id, id+"-u1")
	waitCommitted(t, c, stage.GroupIn(c.Kafka), topology.ComponentApplied)
}
