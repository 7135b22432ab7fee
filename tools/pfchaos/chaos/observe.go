package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/agent-notifier/agentnotifier"
	"github.com/policyflow/policyflow/services/consulkv"
)

// observer records, continuously and in order, what the components see:
// every notification their webhooks receive, and every value of their
// Consul items (a blocking query on the whole store, so each change is
// seen, or a later one in its place, never an earlier one after it).
type observer struct {
	mu sync.Mutex
	// policyOf is the policy each component wants.
	policyOf map[string]string
	// notified is every version each component was notified of, in the
	// order the notifications arrived; consul the newest version each
	// component's item showed.
	notified map[string][]int
	consul   map[string]int
	// gens are the generations delivered to each component (when first),
	// maxGen the newest.
	gens   map[string]map[int]time.Time
	maxGen map[string]int
	// faultFrom and faultTo bound the fault under way (faultTo zero while
	// it lasts).
	faultFrom, faultTo time.Time
	// redelivered counts generations delivered again because the fault
	// cut the notifier off between a delivery and the record of its
	// outcome: at least once, as promised, so not a duplicate.
	redelivered int
	// The counts of the fault under way.
	dup, backwards, consulBackwards int
	unreadable                      int
	events                          []string // what was counted, for the log
}

func newObserver(policyOf map[string]string) *observer {
	return &observer{policyOf: policyOf, notified: map[string][]int{}, consul: map[string]int{},
		gens: map[string]map[int]time.Time{}, maxGen: map[string]int{}}
}

// reset starts the counts of a new fault.
func (o *observer) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dup, o.backwards, o.consulBackwards, o.unreadable, o.events = 0, 0, 0, 0, nil
	o.redelivered, o.faultFrom, o.faultTo = 0, time.Time{}, time.Time{}
}

// faultStarts and faultEnds mark the fault's window.
func (o *observer) faultStarts() {
	o.mu.Lock()
	o.faultFrom = time.Now()
	o.mu.Unlock()
}

func (o *observer) faultEnds() {
	o.mu.Lock()
	o.faultTo = time.Now()
	o.mu.Unlock()
}

// recordWindow is how long after a delivery the agent-notifier may still
// be recording its outcome in Consul.
const recordWindow = 2 * time.Second

// excused reports whether a generation first delivered at first may be
// delivered again: the fault began before its outcome was surely
// recorded, so the notifier may have been cut off in between (a kill, a
// Consul it could not reach) and ran it again, at least once as promised.
func (o *observer) excused(first time.Time) bool {
	if o.faultFrom.IsZero() || first.Add(recordWindow).Before(o.faultFrom) {
		return false
	}
	return o.faultTo.IsZero() || !first.After(o.faultTo)
}

// counts returns the counts of the fault under way and what they were.
func (o *observer) counts() (dup, backwards int, events []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dup, o.backwards + o.consulBackwards, append([]string(nil), o.events...)
}

// versionOf is the policyVersion of a policy_body, 0 when it has none.
func versionOf(body json.RawMessage) int {
	var b struct {
		PolicyVersion string `json:"policyVersion"`
	}
	if json.Unmarshal(body, &b) != nil {
		return 0
	}
	v, _ := strconv.Atoi(b.PolicyVersion)
	return v
}

// webhook receives POST /hook/<component>. The agent-notifier promises
// each generation of a component at most once (it claims the generation
// in Consul before it delivers), so the same generation twice
// (agentnotifier.HeaderGeneration) is a duplicate. Neither a generation
// nor the version of the component's policy in the notification
// (built from Consul when delivered) may be older than one delivered
// before: that is a step backwards.
func (o *observer) webhook(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c := strings.TrimPrefix(r.URL.Path, "/hook/")
	var p struct {
		Policies []json.RawMessage `json:"policies"`
	}
	gen, gerr := strconv.Atoi(r.Header.Get(agentnotifier.HeaderGeneration))
	if err := errors.Join(json.Unmarshal(b, &p), gerr); err != nil {
		o.mu.Lock()
		o.unreadable++
		o.events = append(o.events, "unreadable notification to "+c+": "+err.Error())
		o.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	v := 0
	for _, body := range p.Policies {
		v = max(v, versionOf(body))
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gens[c] == nil {
		o.gens[c] = map[int]time.Time{}
	}
	if first, seen := o.gens[c][gen]; seen && o.excused(first) {
		o.redelivered++
		o.events = append(o.events, fmt.Sprintf("%s notified of generation %d again after the fault cut its first delivery's record (at least once)", c, gen))
	} else if seen {
		o.dup++
		o.events = append(o.events, fmt.Sprintf("%s notified of generation %d again (version %d)", c, gen, v))
	}
	if gen < o.maxGen[c] {
		o.backwards++
		o.events = append(o.events, fmt.Sprintf("%s notified of generation %d after %d", c, gen, o.maxGen[c]))
	}
	if seen := o.notified[c]; len(seen) > 0 && v < maxOf(seen) {
		o.backwards++
		o.events = append(o.events, fmt.Sprintf("%s notified of version %d after %d", c, v, maxOf(seen)))
	}
	if _, seen := o.gens[c][gen]; !seen {
		o.gens[c][gen] = time.Now()
	}
	o.maxGen[c] = max(o.maxGen[c], gen)
	o.notified[c] = append(o.notified[c], v)
	w.WriteHeader(http.StatusNoContent)
}

func maxOf(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// lastNotified is the version of a component's latest notification (0:
// none yet).
func (o *observer) lastNotified(c string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s := o.notified[c]; len(s) > 0 {
		return s[len(s)-1]
	}
	return 0
}

// consulVersion is the version a component's item showed last.
func (o *observer) consulVersion(c string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.consul[c]
}

// watchConsul follows every item of the components with blocking queries
// until ctx ends, through Consul's absences (it retries).
func (o *observer) watchConsul(ctx context.Context, cl *consulapi.Client) {
	var index uint64
	for ctx.Err() == nil {
		q := (&consulapi.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second}).WithContext(ctx)
		pairs, meta, err := cl.KV().List("", q)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if meta.LastIndex < index {
			index = 0 // Consul's index went back (a restore): start over
		} else {
			index = meta.LastIndex
		}
		o.sawConsul(pairs)
	}
}

func (o *observer) sawConsul(pairs consulapi.KVPairs) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range pairs {
		c, _, ok := strings.Cut(p.Key, ":")
		pid, mine := o.policyOf[c]
		if !ok || !mine {
			continue
		}
		if id, ok := consulkv.ItemPolicyID(c, p.Key); !ok || id != pid {
			continue
		}
		v := versionOf(p.Value)
		if v < o.consul[c] {
			o.consulBackwards++
			o.events = append(o.events, "Consul "+p.Key+" went from version "+strconv.Itoa(o.consul[c])+" to "+strconv.Itoa(v))
		}
		o.consul[c] = max(o.consul[c], v)
	}
}
