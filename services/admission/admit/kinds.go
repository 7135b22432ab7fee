package admit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/policyflow/policyflow/events"
)

// The built-in policy kinds (objectModel "?".type).
const (
	KindBlacklist       = "io.policyflow.admission.Blacklist"
	KindRequiredApp     = "io.policyflow.admission.RequiredApplication"
	KindInstanceQuota   = "io.policyflow.admission.InstanceQuota"
	KindFlavorLimit     = "io.policyflow.admission.FlavorLimit"
	KindDefaultOverride = "io.policyflow.admission.DefaultOverride"
	KindScriptInjection = "io.policyflow.admission.ScriptInjection"
	KindInstanceNotice  = "io.policyflow.admission.InstanceNotice"
	KindCEL             = "io.policyflow.admission.CEL"
)

// Scopes of an InstanceQuota besides ScopeApplication (each application,
// the default): the environment and the tenant, counting what is already
// deployed there.
const (
	ScopeEnvironment = "environment"
	ScopeTenant      = "tenant"
)

// DefaultFlavors is the flavor order FlavorLimit uses unless a policy
// gives its own, smallest first (OpenStack's default flavors).
var DefaultFlavors = []string{"m1.tiny", "m1.small", "m1.medium", "m1.large", "m1.xlarge"}

var kinds = map[string]kind{
	KindBlacklist: {
		doc:     "denies applications by class or package name (applications) or namespace (namespaces), including every class that inherits from them",
		params:  []string{"applications", "namespaces"},
		compile: compileBlacklist,
	},
	KindRequiredApp: {
		doc:     "denies an environment that does not deploy the application (a class, or a class inheriting from it), in the request or in the tenant's earlier deployments into the environment",
		params:  []string{"application"},
		compile: compileRequiredApp,
	},
	KindInstanceQuota: {
		doc:     "denies more than maxInstances instances (only of the listed applications, when applications is given) per application (scope application, the default), or per environment or per tenant (scope environment, tenant) counting what is already deployed there; the VMs a placement carries count as instances; each finding is also an event on admission.notices, delivered to webhook (a host the operator allows) when given",
		params:  []string{"maxInstances", "applications", "scope", "webhook"},
		compile: compileInstanceQuota,
	},
	KindFlavorLimit: {
		doc:     "denies a flavor larger than maxFlavor in the flavors order (default m1.tiny < m1.small < m1.medium < m1.large < m1.xlarge), except for approvedApplications",
		params:  []string{"maxFlavor", "flavors", "approvedApplications"},
		compile: compileFlavorLimit,
	},
	KindDefaultOverride: {
		doc:     "mutation: sets field (flavor, image, instances, scripts or properties.<name>) to value where the request leaves it at its default (unset, or equal to from when given); only for applications when given",
		params:  []string{"field", "value", "from", "applications"},
		compile: compileDefaultOverride,
	},
	KindScriptInjection: {
		doc:     "mutation: appends script to the scripts run on every VM (only for applications when given)",
		params:  []string{"script", "applications"},
		compile: compileScriptInjection,
	},
	KindInstanceNotice: {
		doc:     "notice (never denies): reports an environment whose instances, with those already deployed there, add up to more than maxInstances, as a warning and an event on admission.notices, delivered to webhook (a host the operator allows) when given",
		params:  []string{"maxInstances", "webhook"},
		compile: compileInstanceNotice,
	},
	KindCEL: {
		doc:     "rules written as CEL expressions over request (and app, per application): validations [{expression, message, scope}] and mutations [{field, expression}]",
		params:  []string{"validations", "mutations"},
		compile: compileCEL,
	},
}

// selects reports whether an application is among names (by class,
// package or inheritance); an empty list selects every application.
func selects(names []string, a *Application) bool {
	if len(names) == 0 {
		return true
	}
	return slices.ContainsFunc(names, a.Is)
}

func compileBlacklist(p params) (ruleSet, error) {
	apps, err := p.strs("applications", false)
	if err != nil {
		return ruleSet{}, err
	}
	nss, err := p.strs("namespaces", false)
	if err != nil {
		return ruleSet{}, err
	}
	if len(apps) == 0 && len(nss) == 0 {
		return ruleSet{}, paramErr("applications", "and namespaces are both empty: give at least one class, package or namespace to blacklist")
	}
	for i, n := range append(append([]string(nil), apps...), nss...) {
		if !classRE.MatchString(n) {
			f := "applications"
			j := i
			if i >= len(apps) {
				f, j = "namespaces", i-len(apps)
			}
			return ruleSet{}, paramErr(fmt.Sprintf("%s[%d]", f, j), "%q is not a qualified name (dot-separated identifiers)", n)
		}
	}
	return ruleSet{validators: []validator{{rule: "blacklist", fn: func(_ *budget, r *Request, emit func(string, string)) {
		for i := range r.Applications {
			a := &r.Applications[i]
			for _, n := range apps {
				if a.Is(n) {
					how := "is"
					if a.Class != n && a.Package != n {
						how = "inherits from"
					}
					emit(a.describe(), fmt.Sprintf("%s %s, which is blacklisted", how, n))
					break
				}
			}
			for _, ns := range nss {
				if a.InNamespace(ns) {
					emit(a.describe(), fmt.Sprintf("is in namespace %s (by its class, package or a class it inherits from), which is blacklisted", ns))
					break
				}
			}
		}
	}}}}, nil
}

func compileRequiredApp(p params) (ruleSet, error) {
	name, err := p.str("application", true)
	if err != nil {
		return ruleSet{}, err
	}
	if !classRE.MatchString(name) {
		return ruleSet{}, paramErr("application", "%q is not a qualified class name", name)
	}
	const rule = "required-application"
	return ruleSet{validators: []validator{{rule: rule, fn: func(b *budget, r *Request, emit func(string, string)) {
		for i := range r.Applications {
			if r.Applications[i].Is(name) {
				return
			}
		}
		// An earlier deployment into the environment that runs it
		// counts: the rule is per environment, not per request.
		if len(runningIn(b.deployed.inEnvironment(r.Environment), name)) > 0 {
			return
		}
		emit(fmt.Sprintf("environment %q", r.Environment), fmt.Sprintf("deploys no %s, which every environment must have, and no earlier deployment into it does", name))
	}}}, deletions: []deletionRule{{rule: rule, fn: func(dep *events.Deployment, rest []*events.Deployment, emit func(string, string)) {
		// Deleting the environment's last deployment empties it: no
		// environment is left to hold to the rule.
		if len(runningIn([]*events.Deployment{dep}, name)) == 0 {
			return
		}
		var left []*events.Deployment
		for _, e := range rest {
			if e.Environment == dep.Environment {
				left = append(left, e)
			}
		}
		if len(left) == 0 || len(runningIn(left, name)) > 0 {
			return
		}
		ids := make([]string, len(left))
		for i, e := range left {
			ids[i] = e.DeploymentID
		}
		emit(fmt.Sprintf("environment %q", dep.Environment), fmt.Sprintf("deleting deployment %s would leave it without %s, which every environment must have: %s %s still deployed in it and none runs %s; deploy %s there first, or delete %s first",
			dep.DeploymentID, name, listed(ids), isAre(len(ids)), name, name, itThem(len(ids))))
	}}}}, nil
}

// runningIn are the deployments of es that run an application that is,
// or inherits from, class.
func runningIn(es []*events.Deployment, class string) []*events.Deployment {
	var out []*events.Deployment
	for _, e := range es {
		for i := range e.Applications {
			if deployedApp(&e.Applications[i]).Is(class) {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

// listed names at most five ids, and how many more.
func listed(ids []string) string {
	const most = 5
	if len(ids) > most {
		return fmt.Sprintf("%s and %d more", strings.Join(ids[:most], ", "), len(ids)-most)
	}
	return strings.Join(ids, ", ")
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func itThem(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

func compileInstanceQuota(p params) (ruleSet, error) {
	maxN, err := p.count("maxInstances")
	if err != nil {
		return ruleSet{}, err
	}
	apps, err := p.strs("applications", false)
	if err != nil {
		return ruleSet{}, err
	}
	scope, err := p.str("scope", false)
	if err != nil {
		return ruleSet{}, err
	}
	switch scope {
	case "":
		scope = ScopeApplication
	case ScopeApplication, ScopeEnvironment, ScopeTenant:
	default:
		return ruleSet{}, paramErr("scope", "%q is not a scope: give %s (each application, the default), %s (the environment, with what is deployed in it) or %s (all the tenant's deployments)", scope, ScopeApplication, ScopeEnvironment, ScopeTenant)
	}
	hook, eps, err := webhookParam(p)
	if err != nil {
		return ruleSet{}, err
	}
	// A quota exceeded is also a notice (seed 001's "send notification
	// when the number of instances exceeds a quota"): it denies (or
	// warns, in audit mode) and is raised on admission.notices.
	return ruleSet{endpoints: eps, validators: []validator{{rule: "instance-quota", raises: true, webhook: hook, fn: func(b *budget, r *Request, emit func(string, string)) {
		switch scope {
		case ScopeApplication:
			for i := range r.Applications {
				a := &r.Applications[i]
				if n := r.instancesOf(a); selects(apps, a) && n > maxN {
					how := fmt.Sprintf("%d instances", a.Instances)
					if n > a.Instances {
						how = fmt.Sprintf("%d instances (%d, and %d VMs of the placement no application accounts for)", n, a.Instances, n-a.Instances)
					}
					emit(a.describe(), fmt.Sprintf("asks for %s; the quota is %d per application", how, maxN))
				}
			}
			return
		case ScopeEnvironment:
			mine := r.selectedInstances(apps)
			had, ids := counted(b.deployed.inEnvironment(r.Environment), apps)
			if mine > 0 && had+mine > maxN {
				emit(fmt.Sprintf("environment %q", r.Environment), fmt.Sprintf("would run %d instances (%s%d in this request); the quota is %d per environment", had+mine, already(had, ids), mine, maxN))
			}
		case ScopeTenant:
			mine := r.selectedInstances(apps)
			had, ids := counted(b.deployed.all(), apps)
			if mine > 0 && had+mine > maxN {
				emit("tenant", fmt.Sprintf("would run %d instances (%s%d in this request); the quota is %d per tenant", had+mine, already(had, ids), mine, maxN))
			}
		}
	}}}}, nil
}

func compileFlavorLimit(p params) (ruleSet, error) {
	maxF, err := p.str("maxFlavor", true)
	if err != nil {
		return ruleSet{}, err
	}
	order, err := p.strs("flavors", false)
	if err != nil {
		return ruleSet{}, err
	}
	if order == nil {
		order = DefaultFlavors
	}
	for i, f := range order {
		if j := slices.Index(order, f); j != i {
			return ruleSet{}, paramErr(fmt.Sprintf("flavors[%d]", i), "%q is listed twice (also flavors[%d])", f, j)
		}
	}
	limit := slices.Index(order, maxF)
	if limit < 0 {
		return ruleSet{}, paramErr("maxFlavor", "%q is not in the flavor order %s; give one of them or list the flavors smallest first in flavors", maxF, strings.Join(order, " < "))
	}
	approved, err := p.strs("approvedApplications", false)
	if err != nil {
		return ruleSet{}, err
	}
	return ruleSet{validators: []validator{{rule: "flavor-limit", fn: func(_ *budget, r *Request, emit func(string, string)) {
		for i := range r.Applications {
			a := &r.Applications[i]
			if a.Flavor == "" || (len(approved) > 0 && slices.ContainsFunc(approved, a.Is)) {
				continue
			}
			switch at := slices.Index(order, a.Flavor); {
			case at < 0:
				emit(a.describe(), fmt.Sprintf("flavor %s is not one of %s, so it cannot be shown to be at most %s", a.Flavor, strings.Join(order, ", "), maxF))
			case at > limit:
				emit(a.describe(), "flavor "+a.Flavor+" is larger than "+maxF+", the largest allowed to applications not approved")
			}
		}
	}}}}, nil
}

func compileDefaultOverride(p params) (ruleSet, error) {
	field, err := p.str("field", true)
	if err != nil {
		return ruleSet{}, err
	}
	if err := checkField(field); err != nil {
		return ruleSet{}, paramErr("field", "%v", err)
	}
	value, ok, err := p.value("value")
	if err != nil {
		return ruleSet{}, err
	}
	if !ok {
		return ruleSet{}, paramErr("value", "is missing: give the new default")
	}
	if err := setField(&Application{}, field, value); err != nil {
		return ruleSet{}, paramErr("value", "%v", err)
	}
	from, hasFrom, err := p.value("from")
	if err != nil {
		return ruleSet{}, err
	}
	if field == "instances" && !hasFrom {
		// A request always has an instance count (left out, it is 1),
		// so without from the override would never apply.
		return ruleSet{}, paramErr("from", "is missing: instances always has a value (a request that leaves it out asks for 1), so an override of instances applies only where the request asks for the count given in from; add \"from\": 1 to change the count of requests that leave it out")
	}
	apps, err := p.strs("applications", false)
	if err != nil {
		return ruleSet{}, err
	}
	isDefault := func(cur any) bool {
		if hasFrom && jsonText(cur) == jsonText(from) {
			return true
		}
		switch v := cur.(type) {
		case nil:
			return true
		case string:
			return v == ""
		case []string:
			return len(v) == 0
		}
		return false
	}
	return ruleSet{mutators: []mutator{{rule: "default-override", fn: func(b *budget, r *Request, emit func(Mutation)) error {
		for i := range r.Applications {
			a := &r.Applications[i]
			if !selects(apps, a) {
				continue
			}
			// The default is what the tenant's request left the field
			// at: an override of higher priority replaces one of lower
			// priority, applied before it.
			asSent := a
			if b != nil && b.original != nil && i < len(b.original.Applications) {
				asSent = &b.original.Applications[i]
			}
			cur := getField(a, field)
			if !isDefault(getField(asSent, field)) || jsonText(cur) == jsonText(value) {
				continue
			}
			old := jsonText(cur)
			if err := setField(a, field, value); err != nil {
				return fmt.Errorf("%s: %w", a.describe(), err)
			}
			emit(Mutation{Application: a.Name, Field: field, Old: old, New: jsonText(getField(a, field))})
		}
		return nil
	}}}}, nil
}

func compileScriptInjection(p params) (ruleSet, error) {
	script, err := p.str("script", true)
	if err != nil {
		return ruleSet{}, err
	}
	apps, err := p.strs("applications", false)
	if err != nil {
		return ruleSet{}, err
	}
	return ruleSet{mutators: []mutator{{rule: "script-injection", fn: func(_ *budget, r *Request, emit func(Mutation)) error {
		for i := range r.Applications {
			a := &r.Applications[i]
			if !selects(apps, a) || slices.Contains(a.Scripts, script) {
				continue
			}
			old := jsonText(a.Scripts)
			a.Scripts = append(slices.Clone(a.Scripts), script)
			emit(Mutation{Application: a.Name, Field: "scripts", Old: old, New: jsonText(a.Scripts)})
		}
		return nil
	}}}}, nil
}

// webhookParam is the optional webhook a policy delivers its notices to,
// checked as an endpoint the operator must allow.
func webhookParam(p params) (string, []Endpoint, error) {
	hook, err := p.str("webhook", false)
	if err != nil || hook == "" {
		return "", nil, err
	}
	if err := checkEndpoint("webhook", hook); err != nil {
		return "", nil, err
	}
	return hook, []Endpoint{{Field: "objectModel.webhook", URL: hook}}, nil
}

func compileInstanceNotice(p params) (ruleSet, error) {
	maxN, err := p.count("maxInstances")
	if err != nil {
		return ruleSet{}, err
	}
	hook, eps, err := webhookParam(p)
	if err != nil {
		return ruleSet{}, err
	}
	return ruleSet{endpoints: eps, validators: []validator{{rule: "instance-notice", notice: true, webhook: hook, fn: func(b *budget, r *Request, emit func(string, string)) {
		mine := r.Instances()
		had, ids := counted(b.deployed.inEnvironment(r.Environment), nil)
		if total := had + mine; total > maxN {
			how := ""
			if had > 0 {
				how = fmt.Sprintf(" (%s%d in this request)", already(had, ids), mine)
			}
			emit(fmt.Sprintf("environment %q", r.Environment), fmt.Sprintf("spawns %d instances%s, more than the %d the notice is set at", total, how, maxN))
		}
	}}}}, nil
}
