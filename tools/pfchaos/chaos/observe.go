package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/agent-notifier/agentnotifier"
	"github.com/policyflow/policyflow/services/consulkv"
)

// run is one notification as the component saw it: a script's run (from
// its ledger file) or a webhook call, from its start to its end.
type run struct {
	gen     int // -1: the notifier did not say
	update  string
	version int // of the component's policy in the notification
	start   time.Time
	end     time.Time // zero while it runs, or when it was cut off
	ended   bool
	ok      bool
}

// publication is one version of a policy, accepted by the North API at.
type publication struct {
	version int
	at      time.Time
}

// Counters are what the ledger counts during one fault. Every one is
// printed; Lost, Late, Repeated, Overlapping, Backwards and a Stall over
// the bound fail the fault.
type Counters struct {
	// Runs are the notifications started (scripts and webhooks);
	// Finished those that ended with success, Failed those that ended
	// otherwise (a script exiting non-zero, a webhook cut off).
	Runs, Finished, FailedRuns int
	// Repeated counts runs of a generation whose earlier run had
	// finished with success, its outcome surely recorded (the fault did
	// not fall between its end and the record): a finished run repeated.
	Repeated int
	// Redelivered counts the same with the fault between the end and
	// the record: at least once, with the same update id, so the
	// component can drop it.
	Redelivered int
	// Overlapping counts runs that started while another run of the same
	// component was still going (a script's earlier process alive, a
	// webhook's earlier call open).
	Overlapping int
	// Backwards counts runs of an older generation or an older version
	// than one run before, and Consul items going back to an older
	// version.
	Backwards int
	// Lost counts versions that stayed latest for OwedAfter or more (or
	// the last of the stream) and never reached the component by the end
	// of the settling; Late those that reached it, but only after the
	// progress bound had passed since they were superseded.
	Lost, Late int
	// Unreadable counts notifications the ledger could not read.
	Unreadable int
	// ReadyLied counts the answers 200 of the /readyz of a stage that
	// needs Consul (the consul-writer, the agent-notifier) while Consul
	// was down (consul-down, past the probe's timeout and cache);
	// LagHidden is 1 when the consul-writer's policyflow_consumer_lag
	// read 0 at the end of an outage long enough for the lag to be read
	// (LagVisibleAfter) while updates waited for Consul.
	ReadyLied, LagHidden int
}

// observer records, continuously and in order, what the components see:
// every run of their scripts (each writes a start and an end line to its
// component's ledger file) and every call of their webhooks, and every
// value of their Consul items (a blocking query on the whole store, so
// each change is seen, or a later one in its place, never an earlier one
// after it).
type observer struct {
	mu sync.Mutex
	// policyOf is the policy each component wants.
	policyOf map[string]string
	runs     map[string][]*run // per component, in start order
	inflight map[string]int    // webhook calls open per component
	pids     map[string]*run   // script runs by component and pid
	consul   map[string]int
	pubs     map[string][]publication // per policy, every version
	// faultFrom and faultTo bound the fault under way (faultTo zero while
	// it lasts); since is when the fault's counts began.
	since, faultFrom, faultTo time.Time
	c                         Counters
	events                    []string // what was counted, for the log
	ledgerDir                 string
	offsets                   map[string]int64
}

func newObserver(policyOf map[string]string, ledgerDir string) *observer {
	return &observer{policyOf: policyOf, runs: map[string][]*run{}, inflight: map[string]int{}, pids: map[string]*run{},
		consul: map[string]int{}, pubs: map[string][]publication{}, ledgerDir: ledgerDir, offsets: map[string]int64{},
		since: time.Now()}
}

// lied counts a readiness answer that said ready while a dependency was
// down.
func (o *observer) lied(event string) {
	o.mu.Lock()
	o.count(event, &o.c.ReadyLied)
	o.mu.Unlock()
}

// lagHidden counts a lag that read 0 while records waited.
func (o *observer) lagHidden(event string) {
	o.mu.Lock()
	o.count(event, &o.c.LagHidden)
	o.mu.Unlock()
}

// reset starts the counts of a new fault.
func (o *observer) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.c, o.events = Counters{}, nil
	o.since, o.faultFrom, o.faultTo = time.Now(), time.Time{}, time.Time{}
}

// faultStarts and faultEnds mark the fault's window.
func (o *observer) faultStarts() {
	o.mu.Lock()
	o.faultFrom = time.Now()
	o.mu.Unlock()
}

func (o *observer) faultEnds() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.faultTo = time.Now()
	return o.faultTo
}

// published records that version v of policy pid is the newest since now.
func (o *observer) published(pid string, v int) {
	o.mu.Lock()
	o.pubs[pid] = append(o.pubs[pid], publication{version: v, at: time.Now()})
	o.mu.Unlock()
}

// recordWindow is how long after a run ended the agent-notifier may still
// be recording its outcome in Consul.
const recordWindow = 2 * time.Second

// excused reports whether a run that ended at end may be run again: the
// fault began before its outcome was surely recorded, so the notifier
// may have been cut off in between (a kill, a Consul it could not reach)
// and ran it again, at least once as promised.
func (o *observer) excused(end time.Time) bool {
	if o.faultFrom.IsZero() || end.Add(recordWindow).Before(o.faultFrom) {
		return false
	}
	return o.faultTo.IsZero() || !end.After(o.faultTo)
}

func (o *observer) count(event string, n *int) {
	*n++
	o.events = append(o.events, event)
}

// started records a run's start; o.mu is held.
func (o *observer) started(c string, r *run) {
	o.c.Runs++
	prev := o.runs[c]
	maxGen, maxVer := -1, 0
	for _, p := range prev {
		maxGen, maxVer = max(maxGen, p.gen), max(maxVer, p.version)
		if r.gen < 0 || p.gen != r.gen || !p.ok {
			continue
		}
		if o.excused(p.end) {
			o.count(fmt.Sprintf("%s: generation %d (update %s) run again after the fault cut the record of its finished run (at least once)", c, r.gen, r.update), &o.c.Redelivered)
		} else {
			o.count(fmt.Sprintf("%s: generation %d (update %s) run again after a run of it finished at %s", c, r.gen, r.update, p.end.Format("15:04:05.000")), &o.c.Repeated)
		}
		break
	}
	if r.gen >= 0 && r.gen < maxGen {
		o.count(fmt.Sprintf("%s: generation %d run after %d", c, r.gen, maxGen), &o.c.Backwards)
	}
	if r.version < 0 {
		// The notification held a value written by hand into Consul
		// (consul-edit): what Consul held, not a version of the policy.
		o.events = append(o.events, fmt.Sprintf("%s: generation %d told a value edited by hand in Consul", c, r.gen))
	} else if r.version < maxVer {
		o.count(fmt.Sprintf("%s: version %d run after %d", c, r.version, maxVer), &o.c.Backwards)
	}
	o.runs[c] = append(prev, r)
}

// finished records a run's end; o.mu is held.
func (o *observer) finished(r *run, ok bool, at time.Time) {
	r.end, r.ended, r.ok = at, true, ok
	if ok {
		o.c.Finished++
	} else {
		o.c.FailedRuns++
	}
}

// WebhookDelay is how long each webhook call takes (it ends sooner when
// the notifier goes away), so that a fault lands while calls are open.
var WebhookDelay = 500 * time.Millisecond

// webhook receives POST /hook/<component>: a run from its arrival to its
// answer. A call that arrives while another of the same component is
// open overlaps it.
func (o *observer) webhook(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c := strings.TrimPrefix(r.URL.Path, "/hook/")
	gen, gerr := strconv.Atoi(r.Header.Get(agentnotifier.HeaderGeneration))
	v, verr := versionIn(b)
	o.mu.Lock()
	if gerr != nil || verr != nil {
		o.count(fmt.Sprintf("unreadable notification to %s: %v %v", c, gerr, verr), &o.c.Unreadable)
		o.mu.Unlock()
		http.Error(w, "unreadable", http.StatusBadRequest)
		return
	}
	if o.inflight[c] > 0 {
		o.count(fmt.Sprintf("%s: webhook call for generation %d while %d other call(s) were open", c, gen, o.inflight[c]), &o.c.Overlapping)
	}
	o.inflight[c]++
	rn := &run{gen: gen, update: r.Header.Get(agentnotifier.HeaderUpdateID), version: v, start: time.Now()}
	o.started(c, rn)
	o.mu.Unlock()

	ok := true
	select {
	case <-time.After(WebhookDelay):
	case <-r.Context().Done():
		ok = false // the notifier went away: this run was cut off
	}
	o.mu.Lock()
	o.inflight[c]--
	o.finished(rn, ok, time.Now())
	o.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// versionIn is the newest policyVersion among a notification's policies,
// -1 when one of them is a value written by hand into Consul.
func versionIn(b []byte) (int, error) {
	if bytes.Contains(b, []byte(hand)) {
		return -1, nil
	}
	var p struct {
		Policies []json.RawMessage `json:"policies"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return 0, err
	}
	v := 0
	for _, body := range p.Policies {
		v = max(v, versionOf(body))
	}
	return v, nil
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

// pauseMark, while it exists, makes the next component script to run
// take it, write its notifier's pid (its parent's) to pausedPID, stop
// that notifier with SIGSTOP and fail (exit 3): pause-agent-notifier
// stops a notifier in the middle of a notification it holds, one it
// would run again once let go on.
const (
	pauseMark = "pause"
	pausedPID = "paused.pid"
)

// ScriptRun is how long each component script works after it wrote its
// start line, so that a fault lands in the middle of runs.
var ScriptRun = 1500 * time.Millisecond

// script is the text of component c's reconfigure script: it writes a
// start line (with the notifier's update id and generation, and the
// notification) to the component's ledger file, an overlap line when
// the process of its component's previous run is still alive, works
// ScriptRun, and writes an end line; while the file fail exists it ends
// at once with exit 3, and when it takes the file pauseMark it stops its
// notifier (pausedPID) and ends with exit 3.
func script(ledgerDir, c string) string {
	l := filepath.Join(ledgerDir, c+".log")
	p := filepath.Join(ledgerDir, c+".pid")
	fail := filepath.Join(ledgerDir, "fail")
	return fmt.Sprintf(`#!/bin/sh
# A chaos component: a ledger of its runs, and seconds of work.
L=%[1]q
P=%[2]q
u="${POLICYFLOW_UPDATE_ID:--}"
g="${POLICYFLOW_GENERATION:--}"
if [ -f "$P" ]; then
	o=$(cat "$P")
	if [ -n "$o" ] && [ -d "/proc/$o" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$o/status" 2>/dev/null; then
		echo "overlap $(date +%%s%%N) $$ $u $g $o" >> "$L"
	fi
fi
echo $$ > "$P"
printf 'start %%s %%s %%s %%s %%s\n' "$(date +%%s%%N)" "$$" "$u" "$g" "$2" >> "$L"
if mv %[5]q %[5]q.$$ 2>/dev/null; then
	echo "$PPID" > %[6]q.tmp && mv %[6]q.tmp %[6]q
	kill -STOP "$PPID"
	echo "end $(date +%%s%%N) $$ $u $g 3" >> "$L"
	exit 3
fi
if [ -f %[3]q ]; then
	echo "end $(date +%%s%%N) $$ $u $g 3" >> "$L"
	exit 3
fi
sleep %[4]s
echo "end $(date +%%s%%N) $$ $u $g 0" >> "$L"
`, l, p, fail, strconv.FormatFloat(ScriptRun.Seconds(), 'f', 3, 64), filepath.Join(ledgerDir, pauseMark), filepath.Join(ledgerDir, pausedPID))
}

// readLedgers reads what the component scripts wrote since the last call.
func (o *observer) readLedgers() {
	if o.ledgerDir == "" {
		return
	}
	files, _ := filepath.Glob(filepath.Join(o.ledgerDir, "*.log"))
	sort.Strings(files)
	for _, f := range files {
		o.readLedger(f)
	}
}

func (o *observer) readLedger(path string) {
	c := strings.TrimSuffix(filepath.Base(path), ".log")
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	o.mu.Lock()
	off := o.offsets[path]
	o.mu.Unlock()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return
	}
	rd := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return // a line not yet whole is read again next time
		}
		off += int64(len(line))
		o.mu.Lock()
		o.offsets[path] = off
		o.ledgerLine(c, strings.TrimSuffix(line, "\n"))
		o.mu.Unlock()
	}
}

// ledgerLine takes one line of component c's ledger; o.mu is held.
func (o *observer) ledgerLine(c, line string) {
	f := strings.SplitN(line, " ", 6)
	if len(f) < 5 {
		o.count(fmt.Sprintf("%s: unreadable ledger line %q", c, line), &o.c.Unreadable)
		return
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		o.count(fmt.Sprintf("%s: unreadable ledger line %q", c, line), &o.c.Unreadable)
		return
	}
	at, pid := time.Unix(0, ns), f[2]
	gen, err := strconv.Atoi(f[4])
	if err != nil {
		gen = -1
	}
	switch f[0] {
	case "overlap":
		o.count(fmt.Sprintf("%s: generation %d (update %s) started while the run of process %s was alive", c, gen, f[3], f[len(f)-1]), &o.c.Overlapping)
	case "start":
		if len(f) < 6 {
			o.count(fmt.Sprintf("%s: start line without a notification", c), &o.c.Unreadable)
			return
		}
		arg := f[5]
		v, err := versionIn([]byte(arg))
		if err != nil {
			o.count(fmt.Sprintf("%s: unreadable notification %q: %v", c, arg, err), &o.c.Unreadable)
		}
		r := &run{gen: gen, update: f[3], version: v, start: at}
		o.pids[c+"/"+pid] = r
		o.started(c, r)
	case "end":
		r := o.pids[c+"/"+pid]
		if r == nil {
			return
		}
		delete(o.pids, c+"/"+pid)
		o.finished(r, len(f) > 5 && f[5] == "0", at)
	}
}

// followLedgers reads the ledgers every 50 ms until ctx ends.
func (o *observer) followLedgers(ctx context.Context) {
	for {
		o.readLedgers()
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// verdict are the counts of the fault under way, with the versions that
// were owed and never reached a component by now counted as lost, those
// that reached it only past grace after they were superseded as late, and the
// stall: how long after the fault ended the slowest component waited for
// a run of a version at least as new as the newest when the fault ended.
// A version published after from is owed when it stayed the newest for
// owedFor or more; it reached the component when a run of it (or of a
// newer version: the notifier sends what Consul holds when it runs)
// started before grace had passed after it was superseded. The newest
// version is owed a run that finished with success.
func (o *observer) verdict(from time.Time, owedFor, grace time.Duration, now time.Time) (Counters, time.Duration, []string) {
	o.readLedgers()
	o.mu.Lock()
	defer o.mu.Unlock()
	c, events := o.c, append([]string(nil), o.events...)
	var stall time.Duration
	comps := make([]string, 0, len(o.policyOf))
	for comp := range o.policyOf {
		comps = append(comps, comp)
	}
	sort.Strings(comps)
	for _, comp := range comps {
		pubs := o.pubs[o.policyOf[comp]]
		runs := o.runs[comp]
		reached := func(v int, after, before time.Time, finished bool) (time.Time, bool) {
			for _, r := range runs {
				if r.version >= v && !r.start.Before(after) && r.start.Before(before) && (!finished || r.ok) {
					return r.start, true
				}
			}
			return time.Time{}, false
		}
		for i, p := range pubs {
			if p.at.Before(from) {
				continue
			}
			last := i == len(pubs)-1
			until := now
			if !last {
				until = pubs[i+1].at
			}
			if !last && until.Sub(p.at) < owedFor {
				continue
			}
			// A run may start a moment before the North API answered.
			if _, ok := reached(p.version, p.at.Add(-time.Second), until.Add(grace), last); ok {
				continue
			}
			how := "stayed latest " + until.Sub(p.at).Round(time.Millisecond).String()
			if last {
				how = "is the newest"
			}
			if at, ok := reached(p.version, p.at.Add(-time.Second), now, last); ok && !last {
				// Reached, but past the bound after it was superseded.
				c.Late++
				events = append(events, fmt.Sprintf("%s: version %d %s and reached it %s after it was superseded (bound %s)",
					comp, p.version, how, at.Sub(until).Round(time.Millisecond), grace))
				continue
			}
			c.Lost++
			events = append(events, fmt.Sprintf("%s: version %d %s and never reached it", comp, p.version, how))
		}
		if !o.faultTo.IsZero() {
			newest := 0
			for _, p := range pubs {
				if !p.at.After(o.faultTo) {
					newest = p.version
				}
			}
			if at, ok := reached(newest, o.faultFrom, now.Add(time.Hour), false); ok && at.After(o.faultTo) {
				stall = max(stall, at.Sub(o.faultTo))
			} else if !ok {
				stall = max(stall, now.Sub(o.faultTo))
			}
		}
	}
	return c, stall, events
}

// lastNotified is the version of a component's latest finished run (0:
// none yet).
func (o *observer) lastNotified(c string) int {
	o.readLedgers()
	o.mu.Lock()
	defer o.mu.Unlock()
	rs := o.runs[c]
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].ok {
			return rs[i].version
		}
	}
	return 0
}

// open counts the runs under way: script runs started and not ended
// (whose process is alive) and webhook calls not answered.
func (o *observer) open() int {
	o.readLedgers()
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for key := range o.pids {
		if _, pid, ok := strings.Cut(key, "/"); ok && alive(pid) {
			n++
		}
	}
	for _, k := range o.inflight {
		n += k
	}
	return n
}

// alive reports whether process pid runs (and is not a zombie).
func alive(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// runsSince counts component c's runs started after t.
func (o *observer) runsSince(c string, t time.Time) int {
	o.readLedgers()
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, r := range o.runs[c] {
		if r.start.After(t) {
			n++
		}
	}
	return n
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

// hand marks values written by hand into Consul (the consul-edit fault),
// which the Consul watch does not count as steps backwards.
const hand = `"by-hand"`

func (o *observer) sawConsul(pairs consulapi.KVPairs) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range pairs {
		c, _, ok := strings.Cut(p.Key, ":")
		pid, mine := o.policyOf[c]
		if !ok || !mine {
			continue
		}
		if id, ok := consulkv.ItemPolicyID(c, p.Key); !ok || id != pid || strings.Contains(string(p.Value), hand) {
			continue
		}
		v := versionOf(p.Value)
		if v < o.consul[c] {
			o.count("Consul "+p.Key+" went from version "+strconv.Itoa(o.consul[c])+" to "+strconv.Itoa(v), &o.c.Backwards)
		}
		o.consul[c] = max(o.consul[c], v)
	}
}
