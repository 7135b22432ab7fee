package policyapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	capi "github.com/hashicorp/consul/api"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// What the status page shows at most.
const (
	// statusChanges is how many recent policy changes it shows.
	statusChanges = 20
	// statusFailures is how many recent failed notifications it shows.
	statusFailures = 20
	// statusClaims is how many components' notification claims it reads
	// from Consul per request; beyond, notified and failed counts cover
	// the first ones (by id) only, and the answer says so.
	statusClaims = 2000
	// statusOpsTimeout bounds the reads of a stage's ops listener.
	statusOpsTimeout = 3 * time.Second
	// statusConsulTimeout bounds the reads of the notification claims
	// from Consul: the status answers whatever Consul does (a frozen
	// agent accepts connections and answers nothing), saying what it
	// could not read.
	statusConsulTimeout = 3 * time.Second
	// statusClaimsPerTxn is how many claims one Consul transaction reads
	// (Consul takes at most 128 operations a transaction).
	statusClaimsPerTxn = 128
)

// PipelineStatus is GET /v1/status: what the status page shows.
type PipelineStatus struct {
	GeneratedAt         time.Time            `json:"generated_at"`
	Stages              []StageStatus        `json:"stages"`
	Changes             []PolicyRollout      `json:"changes"`
	FailedNotifications []FailedNotification `json:"failed_notifications"`
	// Note says what the figures leave out, when they do.
	Note string `json:"note,omitempty"`
	// Dependencies are what the status reads besides Kafka, and whether
	// it could (Consul, for the notification claims).
	Dependencies []DependencyStatus `json:"dependencies"`
}

// DependencyStatus is one dependency of the status and whether it
// answered.
type DependencyStatus struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Reason says what could not be read and what it leaves unknown.
	Reason string `json:"reason,omitempty"`
}

// StageStatus is one stage as its ops listener reports it.
type StageStatus struct {
	Name       string  `json:"name"`
	Ready      bool    `json:"ready"`
	Reason     string  `json:"reason,omitempty"`
	Lag        float64 `json:"lag"`
	RecordsIn  float64 `json:"records_in"`
	RecordsOut float64 `json:"records_out"`
	DLQ        float64 `json:"dlq"`
	Source     string  `json:"source,omitempty"`
	// Unknown says the figures could not be read (the stage's ops
	// listener does not answer): they are not zeros.
	Unknown bool `json:"unknown,omitempty"`
}

// PolicyRollout is one policy's latest version and how far it got.
type PolicyRollout struct {
	PolicyID   string    `json:"policy_id"`
	Version    string    `json:"version"`
	ChangedAt  time.Time `json:"changed_at"`
	ShouldHave int       `json:"should_have"`
	Written    int       `json:"written"`
	// Notified counts the components notified of the version, and those
	// with no notify target (none) that hold it in Consul.
	Notified int `json:"notified"`
	Failed   int `json:"failed"`
	// Staged says where the version's staged rollout is ("paused at step
	// 2 of 3"), when it was published with a plan.
	Staged string `json:"staged,omitempty"`
	// NotificationsUnknown says Notified and Failed could not be counted:
	// the notification claims could not be read from Consul
	// (PipelineStatus.Dependencies says why).
	NotificationsUnknown bool `json:"notifications_unknown,omitempty"`
}

// FailedNotification is a component whose last notification failed.
type FailedNotification struct {
	ComponentID          string `json:"component_id"`
	ServiceComponentName string `json:"service_component_name,omitempty"`
	UpdateID             string `json:"update_id,omitempty"`
	ExitCode             int    `json:"exit_code"`
	HTTPStatus           int    `json:"http_status,omitempty"`
	Reason               string `json:"reason,omitempty"`
	At                   string `json:"at,omitempty"`
}

func (s *API) PipelineStatus(w http.ResponseWriter, r *http.Request) *web.Error {
	if e := s.Views.Need(topology.PolicyCatalog, topology.DeployComponents, topology.ComponentApplied); e != nil {
		return e
	}
	st := PipelineStatus{GeneratedAt: time.Now().UTC(), Stages: s.stageStatus(r.Context())}
	comps := s.components.all()
	ctx, cancel := context.WithTimeout(r.Context(), statusConsulTimeout)
	claims, note, err := s.readClaims(ctx, comps)
	if err == nil && len(claims) == 0 {
		// Nothing was read (no component yet, or none claimed): ask
		// Consul whether it answers at all, so that down reads as down.
		err = consulkv.Dependency(s.consul).Check(ctx)
	}
	cancel()
	consul := DependencyStatus{Name: "consul", OK: err == nil}
	if err != nil {
		if r.Context().Err() != nil {
			return nil // the caller left
		}
		consul.Reason = fmt.Sprintf("Consul at %s did not answer within %s (%v): the notification claims could not be read, notified and failed counts are unknown; check --consul-addr and that Consul is up",
			s.opts.Consul.Addr, statusConsulTimeout, err)
		s.Log.Warn().Err(err).Str("consul", s.opts.Consul.Addr).Msg("status: read the notification claims")
	}
	st.Dependencies = []DependencyStatus{consul}
	st.Note = note
	st.Changes = s.rollouts(comps, claims)
	if err != nil {
		for i := range st.Changes {
			st.Changes[i].NotificationsUnknown = true
		}
	}
	st.FailedNotifications = failures(comps, claims)
	web.WriteJSON(w, http.StatusOK, st)
	return nil
}

// readClaims reads the notification claim of each registered component
// (at most statusClaims of them), by component id: statusClaimsPerTxn
// claims a Consul transaction, a few transactions at once, until ctx is
// done. A failed read fails the whole: a partial count would read as
// components not notified.
func (s *API) readClaims(ctx context.Context, comps []*events.Component) (map[string]*consulkv.Claim, string, error) {
	note := ""
	if len(comps) > statusClaims {
		note = fmt.Sprintf("notified and failed counts cover the first %d of %d components (by id)", statusClaims, len(comps))
		comps = comps[:statusClaims]
	}
	byKey := map[string]string{} // claim key -> component id
	var ops capi.TxnOps
	for _, c := range comps {
		if c.ServiceComponentName == "" {
			continue
		}
		key := consulkv.ClaimKey(c.ServiceComponentName)
		byKey[key] = c.ComponentID
		ops = append(ops, &capi.TxnOp{KV: &capi.KVTxnOp{Verb: capi.KVGetOrEmpty, Key: key}})
	}
	out := map[string]*consulkv.Claim{}
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for start := 0; start < len(ops); start += statusClaimsPerTxn {
		chunk := ops[start:min(start+statusClaimsPerTxn, len(ops))]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ok, resp, _, err := s.consul.Txn().Txn(chunk, (&capi.QueryOptions{}).WithContext(ctx))
			if err == nil && !ok {
				err = fmt.Errorf("transaction refused: %s", consulkv.TxnReasons(resp))
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			for _, r := range resp.Results {
				if r.KV == nil || len(r.KV.Value) == 0 {
					continue
				}
				if cl, err := consulkv.ParseClaim(r.KV.Value); err == nil {
					out[byKey[r.KV.Key]] = &cl
				}
			}
		})
	}
	wg.Wait()
	return out, note, first
}

// wants reports whether a registered component should have a catalog
// entry: one it may hold (policy.MayHold), by policy_id or by one of its
// filters.
func wants(c *events.Component, e *catalogEntry, compiled map[events.PolicyFilter]*policy.CompiledFilter) bool {
	if !policy.MayHold(c.Tenant, e.Tenant) {
		return false
	}
	if slices.Contains(c.PolicyIDs, e.PolicyID) {
		return true
	}
	for _, f := range c.PolicyFilters {
		cf, ok := compiled[f]
		if !ok {
			attrs, err := policy.DecodeConfigAttributes(f.ConfigAttributes)
			if err == nil {
				cf, err = policy.CompileFilter(policy.Filter{PolicyName: f.PolicyName, ConfigName: f.ConfigName, OnapName: f.OnapName, ConfigAttributes: attrs, Unique: f.Unique})
			}
			if err != nil {
				cf = nil
			}
			compiled[f] = cf
		}
		if cf != nil {
			if ok, _ := cf.Match(e.decoded); ok {
				return true
			}
		}
	}
	return false
}

// rollouts are the most recent catalog changes, newest first, with how
// many registered components should have each version, have it written
// in Consul, were notified of it, or failed to be.
func (s *API) rollouts(comps []*events.Component, claims map[string]*consulkv.Claim) []PolicyRollout {
	var entries []*catalogEntry
	s.catalog.each(func(e *catalogEntry) { entries = append(entries, e) })
	sort.Slice(entries, func(i, j int) bool {
		if !entries[i].ChangedAt.Equal(entries[j].ChangedAt) {
			return entries[i].ChangedAt.After(entries[j].ChangedAt)
		}
		return entries[i].PolicyID < entries[j].PolicyID
	})
	if len(entries) > statusChanges {
		entries = entries[:statusChanges]
	}
	compiled := map[events.PolicyFilter]*policy.CompiledFilter{}
	out := make([]PolicyRollout, 0, len(entries))
	for _, e := range entries {
		ro := PolicyRollout{PolicyID: e.PolicyID, Version: e.PolicyVersion, ChangedAt: e.ChangedAt.UTC()}
		if r, ok := s.staged.Value(e.PolicyID); ok && r != nil && r.Version == e.PolicyVersion {
			ro.Staged = stagedSummary(r)
		}
		for _, c := range comps {
			if !wants(c, e, compiled) {
				continue
			}
			ro.ShouldHave++
			a, ok := s.applied.get(c.ComponentID)
			if !ok || a.Uninstalled {
				continue
			}
			p, ok := a.Policies[e.PolicyID]
			if !ok || p.Version != e.PolicyVersion {
				continue
			}
			ro.Written++
			if notifiesNothing(a.Notify) {
				ro.Notified++ // told through Consul alone: done once written
				continue
			}
			cl := claims[c.ComponentID]
			if cl == nil || (cl.UpdateID != p.UpdateID && cl.Generation < p.Generation) {
				continue
			}
			finished, ok := cl.Finished()
			if !finished {
				continue
			}
			if ok {
				ro.Notified++
			} else {
				ro.Failed++
			}
		}
		out = append(out, ro)
	}
	return out
}

// failures are the components whose last notification failed, newest
// first.
func failures(comps []*events.Component, claims map[string]*consulkv.Claim) []FailedNotification {
	out := []FailedNotification{}
	for _, c := range comps {
		cl := claims[c.ComponentID]
		if cl == nil {
			continue
		}
		if finished, ok := cl.Finished(); !finished || ok {
			continue
		}
		reason := notifytarget.MaskText(strings.TrimSpace(cl.Stderr))
		if len(reason) > 300 {
			reason = reason[:300] + "…"
		}
		out = append(out, FailedNotification{
			ComponentID: c.ComponentID, ServiceComponentName: c.ServiceComponentName, UpdateID: cl.UpdateID,
			ExitCode: *cl.ExitCode, HTTPStatus: cl.HTTPStatus, Reason: reason, At: cl.At,
		})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At > out[j].At })
	if len(out) > statusFailures {
		out = out[:statusFailures]
	}
	return out
}

// stageStatus reads the stages' readiness and figures: from the ops
// listeners of --stage-ops when given, else from this process (the dev
// stack runs the stages beside the North API).
func (s *API) stageStatus(ctx context.Context) []StageStatus {
	if len(s.opts.StageOps) == 0 {
		fams, err := s.Env.Metrics.Registry.Gather()
		if err != nil {
			s.Log.Warn().Err(err).Msg("status: gather this process's metrics")
		}
		return stagesOf(s.Env.Health.Detail(), familiesByName(fams), "")
	}
	out := []StageStatus{}
	for _, entry := range s.opts.StageOps {
		name, addr := stageOf(entry)
		rows := s.remoteStages(ctx, addr)
		if name != "" && !slices.ContainsFunc(rows, func(r StageStatus) bool { return r.Name == name }) {
			// The listener of an expected stage does not answer, or
			// answers without it: the stage is down, by its name.
			why := "not running: " + opsURL(addr) + " reports no stage " + name
			if len(rows) == 1 && rows[0].Name == addr {
				why, rows = rows[0].Reason, nil
			}
			rows = append(rows, StageStatus{Name: name, Reason: why, Source: opsURL(addr), Unknown: true})
		}
		out = append(out, rows...)
	}
	sortStages(out)
	return out
}

// stageOf reads an entry of --stage-ops: name=addr names the stage the
// listener at addr runs; a bare address is named by its host when that is
// a stage's name (compose and Kubernetes reach a stage by its name). A
// stage so named is expected: when its listener does not answer, or
// answers without it, the status shows it down rather than leaving it out.
func stageOf(entry string) (name, addr string) {
	if n, a, ok := strings.Cut(entry, "="); ok {
		return strings.TrimSpace(n), strings.TrimSpace(a)
	}
	host := entry
	if _, rest, ok := strings.Cut(host, "://"); ok {
		host = rest
	}
	host, _, _ = strings.Cut(host, "/")
	if h, _, ok := strings.Cut(host, ":"); ok {
		host = h
	}
	if slices.Contains(topology.Stages(), host) {
		return host, entry
	}
	return "", entry
}

func familiesByName(fams []*dto.MetricFamily) map[string]*dto.MetricFamily {
	out := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// opsURL is the base URL of an ops listener given as host:port or URL.
func opsURL(addr string) string {
	if strings.Contains(addr, "://") {
		return strings.TrimRight(addr, "/")
	}
	return "http://" + addr
}

// remoteStages reads one ops listener's /readyz and /metrics; a listener
// that does not answer is one stage row saying so.
func (s *API) remoteStages(ctx context.Context, addr string) []StageStatus {
	base := opsURL(addr)
	ctx, cancel := context.WithTimeout(ctx, statusOpsTimeout)
	defer cancel()
	down := func(err error) []StageStatus {
		return []StageStatus{{Name: addr, Reason: "ops listener does not answer: " + err.Error(), Source: base, Unknown: true}}
	}
	var ready struct {
		Detail map[string]runtime.StageHealth `json:"detail"`
	}
	if err := getJSON(ctx, base+"/readyz", &ready); err != nil {
		return down(err)
	}
	body, err := get(ctx, base+"/metrics")
	if err != nil {
		return down(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return down(fmt.Errorf("read %s/metrics: %w", base, err))
	}
	return stagesOf(ready.Detail, fams, base)
}

func get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 16<<20))
}

func getJSON(ctx context.Context, url string, v any) error {
	b, err := get(ctx, url)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("read %s: %w", url, err)
	}
	return nil
}

// stagesOf builds the stage rows of one process: its health detail and
// its metrics summed per stage. Components of the health detail that are
// no stage (the North API's views) are left out.
func stagesOf(detail map[string]runtime.StageHealth, fams map[string]*dto.MetricFamily, source string) []StageStatus {
	sum := func(name string, stage string, keep func(*dto.Metric) bool) float64 {
		f := fams[name]
		if f == nil {
			return 0
		}
		var total float64
		for _, m := range f.GetMetric() {
			if label(m, "stage") != stage || keep != nil && !keep(m) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				total += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				total += m.GetGauge().GetValue()
			}
		}
		return total
	}
	notDLQ := func(m *dto.Metric) bool { return !strings.HasPrefix(label(m, "topic"), topology.DLQ("")) }
	out := []StageStatus{}
	for name, d := range detail {
		if d.Mode == "" && !d.Expected {
			continue
		}
		out = append(out, StageStatus{
			Name: name, Ready: d.Ready, Reason: d.Reason, Source: source,
			Lag:        sum("policyflow_consumer_lag", name, nil),
			RecordsIn:  sum("policyflow_records_in_total", name, nil),
			RecordsOut: sum("policyflow_records_out_total", name, notDLQ),
			DLQ:        sum("policyflow_dlq_total", name, nil),
		})
	}
	sortStages(out)
	return out
}

// sortStages puts stages in pipeline order (topology.Stages), others after
// by name.
func sortStages(out []StageStatus) {
	order := map[string]int{}
	for i, n := range topology.Stages() {
		order[n] = i + 1
	}
	sort.Slice(out, func(i, j int) bool {
		oi, oj := order[out[i].Name], order[out[j].Name]
		if oi != oj && oi > 0 && oj > 0 {
			return oi < oj
		}
		return out[i].Name < out[j].Name
	})
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
