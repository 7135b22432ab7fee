package policyapi

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/policy"
)

// Defaults of what one component may ask of the matcher. A policyName is
// a regular expression every stage that matches compiles and keeps; these
// bound what one registration costs them.
const (
	DefaultMaxFilters               = 32
	DefaultMaxFilterRegexBytes      = 4 << 10
	DefaultMaxFilterRegexTotalBytes = 16 << 10
)

// Registration is what the operator lets a component registration ask
// for: where its notifications may go (the same rules the agent-notifier
// applies) and how many and how big its policy filters may be. The zero
// value allows no script and no webhook, and the default filter limits.
type Registration struct {
	Targets notifytarget.Config
	// MaxFilters bounds policy_filters per component (0: the default).
	MaxFilters int
	// MaxFilterRegexBytes bounds one filter's policyName (0: the default).
	MaxFilterRegexBytes int
	// MaxFilterRegexTotalBytes bounds the policyNames of one component
	// together (0: the default).
	MaxFilterRegexTotalBytes int
}

// RegistrationFromEnv reads PF_SCRIPT_DIRS, PF_WEBHOOK_ALLOW,
// PF_MAX_FILTERS, PF_MAX_FILTER_REGEX_BYTES and
// PF_MAX_FILTER_REGEX_TOTAL_BYTES.
func RegistrationFromEnv() Registration {
	num := func(name string, def int) int {
		if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
			return n
		}
		return def
	}
	return Registration{
		Targets:                  notifytarget.ConfigFromEnv(),
		MaxFilters:               num("PF_MAX_FILTERS", DefaultMaxFilters),
		MaxFilterRegexBytes:      num("PF_MAX_FILTER_REGEX_BYTES", DefaultMaxFilterRegexBytes),
		MaxFilterRegexTotalBytes: num("PF_MAX_FILTER_REGEX_TOTAL_BYTES", DefaultMaxFilterRegexTotalBytes),
	}
}

// RegisterFlags adds --script-dir, --webhook-allow and the filter limits
// to fs.
func (r *Registration) RegisterFlags(fs *flag.FlagSet) {
	r.Targets.RegisterFlags(fs)
	fs.IntVar(&r.MaxFilters, "max-filters", r.MaxFilters,
		"most policy_filters one component may register (env PF_MAX_FILTERS)")
	fs.IntVar(&r.MaxFilterRegexBytes, "max-filter-regex-bytes", r.MaxFilterRegexBytes,
		"longest policyName (a regular expression) of one policy filter, in bytes (env PF_MAX_FILTER_REGEX_BYTES)")
	fs.IntVar(&r.MaxFilterRegexTotalBytes, "max-filter-regex-total-bytes", r.MaxFilterRegexTotalBytes,
		"most bytes of policyName all filters of one component may have together (env PF_MAX_FILTER_REGEX_TOTAL_BYTES)")
}

// Rules checks the registration settings and returns them ready for
// BuildComponent.
func (r Registration) Rules() (ComponentRules, error) {
	targets, err := r.Targets.Rules()
	if err != nil {
		return ComponentRules{}, err
	}
	for _, l := range []struct {
		flag string
		n    int
	}{{"--max-filters", r.MaxFilters}, {"--max-filter-regex-bytes", r.MaxFilterRegexBytes}, {"--max-filter-regex-total-bytes", r.MaxFilterRegexTotalBytes}} {
		if l.n < 0 {
			return ComponentRules{}, fmt.Errorf("%s %d: want a positive number, or 0 for the default", l.flag, l.n)
		}
	}
	return ComponentRules{
		Targets:                  targets,
		MaxFilters:               r.MaxFilters,
		MaxFilterRegexBytes:      r.MaxFilterRegexBytes,
		MaxFilterRegexTotalBytes: r.MaxFilterRegexTotalBytes,
	}, nil
}

// ComponentRules are checked Registration settings: what BuildComponent
// holds a registration to. A limit of 0 is its default.
type ComponentRules struct {
	Targets                  notifytarget.Rules
	MaxFilters               int
	MaxFilterRegexBytes      int
	MaxFilterRegexTotalBytes int
}

func (r ComponentRules) maxFilters() int { return cmp.Or(r.MaxFilters, DefaultMaxFilters) }
func (r ComponentRules) maxRegex() int {
	return cmp.Or(r.MaxFilterRegexBytes, DefaultMaxFilterRegexBytes)
}
func (r ComponentRules) maxRegexTotal() int {
	return cmp.Or(r.MaxFilterRegexTotalBytes, DefaultMaxFilterRegexTotalBytes)
}

// checkFilterSizes refuses, before anything is compiled, more filters or
// bigger regular expressions than the rules allow.
func (r ComponentRules) checkFilterSizes(fs []FilterRequest) error {
	if len(fs) > r.maxFilters() {
		return fmt.Errorf("policy_filters has %d filters; at most %d are allowed per component: merge them (one regular expression can match several policy names) or use policy_ids",
			len(fs), r.maxFilters())
	}
	total := 0
	for i, f := range fs {
		if n := len(f.PolicyName); n > r.maxRegex() {
			return fmt.Errorf("policy_filters[%d] (filter_id %q): policyName is %d bytes; at most %d are allowed: shorten the regular expression",
				i, f.FilterID, n, r.maxRegex())
		}
		total += len(f.PolicyName)
	}
	if total > r.maxRegexTotal() {
		return fmt.Errorf("the policyNames of policy_filters are %d bytes together; at most %d are allowed per component: use fewer or shorter regular expressions",
			total, r.maxRegexTotal())
	}
	return nil
}

// emptyNotificationBytes is the size of a notification without policies.
var emptyNotificationBytes = len(`{"policies":[],"updated_policies":[],"removed_policies":[]}`)

// checkScriptNotification refuses a script target for a component whose
// policies, as the catalog has them now, already make every notification
// too big to be given to a script in one argument.
func (s *API) checkScriptNotification(c *events.Component) error {
	if c.Notify.Kind != events.NotifyScript {
		return nil
	}
	bodies := map[string]int{}
	for _, id := range c.PolicyIDs {
		if e, ok := s.catalog.get(id); ok && len(e.Body) > 0 && policy.MayHold(c.Tenant, e.Tenant) {
			bodies[id] = len(e.Body)
		}
	}
	if len(c.PolicyFilters) > 0 {
		ix := policy.NewIndex()
		for _, f := range c.PolicyFilters {
			attrs, err := policy.DecodeConfigAttributes(f.ConfigAttributes)
			if err != nil {
				return fmt.Errorf("filter %s: %w", f.FilterID, err)
			}
			cf, err := policy.CompileFilter(policy.Filter{PolicyName: f.PolicyName, ConfigName: f.ConfigName, OnapName: f.OnapName, ConfigAttributes: attrs})
			if err != nil {
				return fmt.Errorf("filter %s: %w", f.FilterID, err)
			}
			ix.Add(f.FilterID, cf)
		}
		s.catalog.each(func(e *catalogEntry) {
			if len(e.Body) > 0 && policy.MayHold(c.Tenant, e.Tenant) && len(ix.Matches(e.decoded)) > 0 {
				bodies[e.PolicyID] = len(e.Body)
			}
		})
	}
	n := emptyNotificationBytes
	for _, b := range bodies {
		n += b + 1 // and a comma
	}
	if err := notifytarget.CheckArg(n); err != nil {
		return fmt.Errorf("notify.script_path: the %d policies this component gets now make every notification at least %d bytes: %w", len(bodies), n, err)
	}
	return nil
}
