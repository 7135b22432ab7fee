// Package pdp simulates an ONAP policy engine (PDP) for development and
// tests: it serves POST /getConfig over a set of policy versions that an
// admin API loads and removes, and sends PDP notifications
// (loadedPolicies / removedPolicies) for every change to a configured URL.
package pdp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/policy"
)

// NotFoundMessage is the policyConfigMessage the PDP answers with when no
// policy matches a /getConfig request.
const NotFoundMessage = "PE300 - Data Issue: Incorrect Params passed: Decision not a Permit."

// maxRequestBytes bounds request bodies; a policy_body may be larger than
// Consul accepts so that refusals downstream can be exercised.
const maxRequestBytes = 16 << 20

// Server holds the simulated PDP's policy versions and serves its HTTP API.
// It is safe for concurrent use.
type Server struct {
	mu        sync.RWMutex
	policies  map[string]policy.Body // by full policyName
	notifyURL string
	client    *http.Client
	log       zerolog.Logger
	// stateFile, when set (Persist), is written again after every change.
	stateFile string
}

// Option configures a Server.
type Option func(*Server)

// WithNotifyURL makes the admin API send a PDP notification to url after
// every change (for example the North API's /v1/pdp/notifications).
func WithNotifyURL(url string) Option { return func(s *Server) { s.notifyURL = url } }

// WithLogger sets the logger; the default discards everything.
func WithLogger(l zerolog.Logger) Option { return func(s *Server) { s.log = l } }

// WithHTTPClient sets the client notifications are sent with.
func WithHTTPClient(c *http.Client) Option { return func(s *Server) { s.client = c } }

// NewServer returns a Server without policies.
func NewServer(opts ...Option) *Server {
	s := &Server{
		policies: make(map[string]policy.Body),
		client:   http.DefaultClient,
		log:      zerolog.Nop(),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Put loads one policy version, replacing a stored one of the same full
// policyName, and returns the loadedPolicies entry describing it. The body
// is completed the way the PDP returns it: policyName "<policy_id>.<version>.xml"
// when only a policy_id is given, policyVersion from the name when missing,
// config stringified when given as JSON, and policyConfigStatus
// CONFIG_RETRIEVED, policyConfigMessage, type, matchingConditions,
// responseAttributes and property defaulted when absent.
func (s *Server) Put(b policy.Body) (policy.LoadedPolicy, error) {
	pb, err := prepare(b)
	if err != nil {
		return policy.LoadedPolicy{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lp := s.store(pb)
	return lp, s.saveLocked()
}

func (s *Server) store(b policy.Body) policy.LoadedPolicy {
	id, _ := b.PolicyID()
	update := policy.UpdateTypeNew
	for name, other := range s.policies {
		if oid, _ := other.PolicyID(); oid == id && name != b.PolicyName() {
			update = policy.UpdateTypeUpdate
			break
		}
	}
	s.policies[b.PolicyName()] = b
	return policy.LoadedFromBody(b, update)
}

// Remove deletes the version with this full policyName or, when
// policyName is a policy_id, every version of it. It returns the
// removedPolicies entries, oldest version first; none when nothing matched.
func (s *Server) Remove(policyName string) []policy.RemovedPolicy {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []policy.Body
	if b, ok := s.policies[policyName]; ok {
		gone = append(gone, b)
		delete(s.policies, policyName)
	} else {
		for name, b := range s.policies {
			if id, err := b.PolicyID(); err == nil && id == policyName {
				gone = append(gone, b)
				delete(s.policies, name)
			}
		}
	}
	if len(gone) > 0 {
		if err := s.saveLocked(); err != nil {
			s.log.Error().Err(err).Msg("the removal is kept in memory only")
		}
	}
	sortBodies(gone)
	out := make([]policy.RemovedPolicy, 0, len(gone))
	for _, b := range gone {
		out = append(out, policy.RemovedPolicy{PolicyName: b.PolicyName(), VersionNo: b.VersionString()})
	}
	return out
}

// Persist keeps the policies in the file at path, as a real PDP keeps its
// own: it loads what the file holds (a JSON array of policy bodies, what GET
// /sim/policies answers; a missing file is an empty PDP) and writes the
// file again after every change. A simulator started again on the same
// file answers /getConfig as it did before it stopped, so a catch-up of
// pdp-ingest does not take the policies it loaded for withdrawn.
func (s *Server) Persist(path string) error {
	data, err := os.ReadFile(path)
	var bodies []policy.Body
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read the PDP simulator's policies: %w", err)
	default:
		if bodies, err = policy.DecodeBodies(data); err != nil {
			return fmt.Errorf("read the PDP simulator's policies from %s: %w (delete the file to start with an empty PDP)", path, err)
		}
	}
	prepared := make([]policy.Body, 0, len(bodies))
	for _, b := range bodies {
		pb, err := prepare(b)
		if err != nil {
			return fmt.Errorf("read the PDP simulator's policies from %s: %w (delete the file to start with an empty PDP)", path, err)
		}
		prepared = append(prepared, pb)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range prepared {
		s.store(b)
	}
	s.stateFile = path
	return s.saveLocked()
}

// saveLocked writes every stored version to the state file, when there is
// one, through a temporary file renamed over it; s.mu is held.
func (s *Server) saveLocked() error {
	if s.stateFile == "" {
		return nil
	}
	out := make([]policy.Body, 0, len(s.policies))
	for _, b := range s.policies {
		out = append(out, b)
	}
	sortBodies(out)
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("save the PDP simulator's policies: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.stateFile), filepath.Base(s.stateFile)+".*")
	if err != nil {
		return fmt.Errorf("save the PDP simulator's policies: %w", err)
	}
	_, err = tmp.Write(append(data, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.stateFile)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("save the PDP simulator's policies to %s: %w", s.stateFile, err)
	}
	return nil
}

// Policies returns copies of every stored version, sorted by policy_id and
// version.
func (s *Server) Policies() []policy.Body {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]policy.Body, 0, len(s.policies))
	for _, b := range s.policies {
		out = append(out, clone(b))
	}
	sortBodies(out)
	return out
}

// GetConfig answers a /getConfig request: every stored version, of every
// policy, that the filter matches (policyName is required). The result is
// sorted by policy_id and version and empty when nothing matches.
func (s *Server) GetConfig(f policy.Filter) ([]policy.Body, error) {
	if f.PolicyName == "" {
		return nil, errors.New("getConfig: policyName is required")
	}
	c, err := policy.CompileFilter(f)
	if err != nil {
		return nil, fmt.Errorf("getConfig: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []policy.Body
	for _, b := range s.policies {
		if ok, _ := c.Match(b); ok {
			out = append(out, clone(b))
		}
	}
	sortBodies(out)
	return out, nil
}

// prepare validates and completes a body as the PDP would hold it.
func prepare(in policy.Body) (policy.Body, error) {
	if in == nil {
		return nil, errors.New("load policy: body is null")
	}
	b := clone(in)
	name := b.PolicyName()
	if name == "" {
		return nil, errors.New("load policy: policyName is required")
	}
	id, err := policy.PolicyID(name)
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	version, err := versionOf(b)
	if err != nil {
		return nil, fmt.Errorf("load policy %q: %w", name, err)
	}
	switch {
	case id != name: // a full name: .<version>.<ext>
		fromName := versionInName(name, id)
		if version == "" {
			version = fromName
		}
		if !sameVersion(version, fromName) {
			return nil, fmt.Errorf("load policy %q: policyVersion %q differs from the version %q in policyName", name, version, fromName)
		}
	case version == "":
		return nil, fmt.Errorf("load policy %q: a policy_id needs a policyVersion (or give the full name, e.g. %s.1.xml)", name, name)
	default:
		b[policy.FieldPolicyName] = id + "." + version + ".xml"
	}
	if _, ok := policy.ParseVersion(version); !ok {
		return nil, fmt.Errorf("load policy %q: policyVersion %q is not all digits", name, version)
	}
	b[policy.FieldPolicyVersion] = version
	if cfg, ok := b[policy.FieldConfig]; ok && cfg != nil {
		if _, isString := cfg.(string); !isString {
			data, err := json.Marshal(cfg)
			if err != nil {
				return nil, fmt.Errorf("load policy %q: encode config: %w", name, err)
			}
			b[policy.FieldConfig] = string(data)
		}
	}
	defaults := map[string]any{
		policy.FieldConfigStatus:       policy.ConfigRetrieved,
		policy.FieldConfigMessage:      policy.ConfigRetrievedMessage,
		policy.FieldType:               "JSON",
		policy.FieldMatchingConditions: map[string]any{},
		policy.FieldResponseAttributes: map[string]any{},
		policy.FieldProperty:           nil,
	}
	for k, v := range defaults {
		if _, ok := b[k]; !ok {
			b[k] = v
		}
	}
	return b, nil
}

// versionOf reads policyVersion given as a string or a JSON integer.
func versionOf(b policy.Body) (string, error) {
	switch v := b[policy.FieldPolicyVersion].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case float64:
		if v < 0 || v != float64(int64(v)) {
			return "", fmt.Errorf("policyVersion %v is not a non-negative integer", v)
		}
		return strconv.FormatInt(int64(v), 10), nil
	default:
		return "", fmt.Errorf("policyVersion %v is neither a string nor a number", v)
	}
}

func versionInName(name, id string) string {
	rest := name[len(id)+1:] // "<version>.<ext>"
	for i := 0; i < len(rest); i++ {
		if rest[i] == '.' {
			return rest[:i]
		}
	}
	return rest
}

func sameVersion(a, b string) bool {
	va, oka := policy.ParseVersion(a)
	vb, okb := policy.ParseVersion(b)
	return oka && okb && va == vb
}

// clone deep-copies a body through JSON, so stored versions share nothing
// with callers.
func clone(b policy.Body) policy.Body {
	data, err := json.Marshal(b)
	if err != nil {
		out := make(policy.Body, len(b))
		for k, v := range b {
			out[k] = v
		}
		return out
	}
	out, err := policy.DecodeBody(data)
	if err != nil {
		return b
	}
	return out
}

func sortBodies(bs []policy.Body) {
	sort.SliceStable(bs, func(i, j int) bool {
		ii, _ := bs[i].PolicyID()
		ij, _ := bs[j].PolicyID()
		if ii != ij {
			return ii < ij
		}
		vi, _ := bs[i].Version()
		vj, _ := bs[j].Version()
		if vi != vj {
			return vi < vj
		}
		return bs[i].PolicyName() < bs[j].PolicyName()
	})
}

// Notify sends a PDP notification to url by HTTP POST as JSON with client
// (nil: http.DefaultClient; the North API needs one that sends a bearer
// token, such as auth.Client) and fails unless the receiver answers 2xx.
func Notify(ctx context.Context, client *http.Client, url string, n policy.Notification) error {
	if client == nil {
		client = http.DefaultClient
	}
	return notify(ctx, client, url, n)
}

func notify(ctx context.Context, client *http.Client, url string, n policy.Notification) error {
	data, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("notify %s: encode notification: %w", url, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("notify %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("notify %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("notify %s: receiver answered %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// SeedPolicies are the sample policies of the ONAP DCAE policy-handler
// documents: DCAE.Config_VM_MEMORY version 5 ({"min_memory": "2GB"}) and
// DCAE.Config_VM_STORAGE version 1, both with ONAPName DCAE.
func SeedPolicies() []policy.Body {
	return []policy.Body{
		{
			policy.FieldPolicyName:         "DCAE.Config_VM_MEMORY.5.xml",
			policy.FieldPolicyVersion:      "5",
			policy.FieldConfig:             `{"min_memory":"2GB"}`,
			policy.FieldMatchingConditions: map[string]any{policy.MatchingONAPName: "DCAE", policy.MatchingConfigName: "vm_memory"},
		},
		{
			policy.FieldPolicyName:         "DCAE.Config_VM_STORAGE.1.xml",
			policy.FieldPolicyVersion:      "1",
			policy.FieldConfig:             `{"min_storage":"20GB"}`,
			policy.FieldMatchingConditions: map[string]any{policy.MatchingONAPName: "DCAE", policy.MatchingConfigName: "vm_storage"},
		},
	}
}
