package admit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/policyflow/policyflow/services/check"
	"github.com/policyflow/policyflow/services/placement"
)

// Limits of a deployment request.
const (
	// MaxApplications bounds the applications of one request.
	MaxApplications = 256
	// MaxInstances bounds the instance count of one application.
	MaxInstances = 100000
	// MaxRequestBytes bounds a request as canonical JSON.
	MaxRequestBytes = 1 << 20
)

// Request is a deployment request: a tenant asks to deploy applications
// into an environment. It is what POST /v1/deployments takes and what
// deploy.requests carries (as canonical JSON).
type Request struct {
	DeploymentID string        `json:"deployment_id"`
	Tenant       string        `json:"tenant"`
	Environment  string        `json:"environment"`
	Applications []Application `json:"applications"`
	// Template is the placement part of the request (seed 002):
	// datacenter, resources, groups, relationships, placement_policies and
	// placement, all optional; see package placement. A request that names
	// a datacenter has its placement checked against it.
	placement.Template
}

// Application is one application of a deployment request: what it is (its
// package, its class and the classes it inherits from) and how it is
// deployed. Each admitted application becomes one component on
// deploy.components (see Components).
type Application struct {
	// Name is the application's name within the deployment; the
	// component registered for it is <deployment_id>.<name>. It holds no
	// '.', so no two (deployment, application) pairs share a component id.
	Name string `json:"name"`
	// Package is the package that provides the class, e.g.
	// "io.murano.apps.apache".
	Package string `json:"package,omitempty"`
	// Class is the fully qualified class name, e.g.
	// "io.murano.apps.apache.ApacheHttpServer".
	Class string `json:"class"`
	// Inherits lists every class Class inherits from, nearest first.
	Inherits []string `json:"inherits,omitempty"`
	// Instances is how many instances (VMs) it spawns; 0 is taken as 1.
	Instances int `json:"instances"`
	// Flavor and Image are the instances' flavor and image.
	Flavor string `json:"flavor,omitempty"`
	Image  string `json:"image,omitempty"`
	// Properties are the application's other properties.
	Properties map[string]any `json:"properties,omitempty"`
	// Scripts run on every VM the application spawns, in order.
	Scripts []string `json:"scripts,omitempty"`
	// Component is how the component registered for the application gets
	// its policies; optional.
	Component *ComponentSpec `json:"component,omitempty"`
}

// ComponentSpec is the policy side of the component an admitted
// application is registered as: the fields of PUT
// /v1/components/{component_id} other than the ids and the config.
type ComponentSpec struct {
	// ServiceComponentName names the Consul folder; <deployment_id>.<name>
	// when empty.
	ServiceComponentName string       `json:"service_component_name,omitempty"`
	PolicyIDs            []string     `json:"policy_ids,omitempty"`
	PolicyFilters        []FilterSpec `json:"policy_filters,omitempty"`
	Notify               NotifySpec   `json:"notify,omitzero"`
}

// FilterSpec is a policy filter in the PDP /getConfig shape.
type FilterSpec struct {
	FilterID         string          `json:"filter_id"`
	PolicyName       string          `json:"policyName"`
	ConfigName       string          `json:"configName,omitempty"`
	OnapName         string          `json:"onapName,omitempty"`
	ConfigAttributes json.RawMessage `json:"configAttributes,omitempty"`
	Unique           bool            `json:"unique,omitempty"`
}

// NotifySpec is a component's notify target.
type NotifySpec struct {
	Kind       string `json:"kind,omitempty"`
	ScriptPath string `json:"script_path,omitempty"`
	WebhookURL string `json:"webhook_url,omitempty"`
	TimeoutMs  int32  `json:"timeout_ms,omitempty"`
}

// classRE is a qualified class or package name: dot-separated
// identifiers.
var classRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// RequestError is a request that breaks the contract, naming the field.
type RequestError struct {
	Field string
	Msg   string
}

func (e *RequestError) Error() string { return e.Field + ": " + e.Msg }

func reqErr(field, format string, args ...any) error {
	return &RequestError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Normalize checks a request and fills in its defaults (instances 0 → 1).
// Every error is a *RequestError naming the field to fix. A class is only
// checked to be a qualified name: policyflow keeps no catalog of classes.
func (r *Request) Normalize() error {
	if err := check.ID("deployment_id", r.DeploymentID); err != nil {
		return reqErr("deployment_id", "%v", err)
	}
	if r.Tenant == "" {
		return reqErr("tenant", "is missing: every deployment belongs to a tenant, and the tenant's policies decide it")
	}
	if err := check.ID("tenant", r.Tenant); err != nil {
		return reqErr("tenant", "%v", err)
	}
	if len(r.Applications) == 0 {
		return reqErr("applications", "is empty: a deployment deploys at least one application")
	}
	if len(r.Applications) > MaxApplications {
		return reqErr("applications", "has %d applications; at most %d are allowed", len(r.Applications), MaxApplications)
	}
	seen := map[string]int{}
	for i := range r.Applications {
		a := &r.Applications[i]
		f := fmt.Sprintf("applications[%d]", i)
		if err := check.ID("name", a.Name); err != nil {
			return reqErr(f+".name", "%v", err)
		}
		if strings.Contains(a.Name, ".") {
			return reqErr(f+".name", "%q holds a '.': the component id is <deployment_id>.<name>, and a name without '.' keeps it the id of one deployment's application", a.Name)
		}
		if j, dup := seen[a.Name]; dup {
			return reqErr(f+".name", "%q is also the name of applications[%d]; names are unique within a deployment", a.Name, j)
		}
		seen[a.Name] = i
		if a.Class == "" {
			return reqErr(f+".class", "is missing: give the application's fully qualified class name, e.g. io.murano.apps.apache.ApacheHttpServer")
		}
		if !classRE.MatchString(a.Class) {
			return reqErr(f+".class", "%q is not a qualified class name (dot-separated identifiers)", a.Class)
		}
		if a.Package != "" && !classRE.MatchString(a.Package) {
			return reqErr(f+".package", "%q is not a qualified package name (dot-separated identifiers)", a.Package)
		}
		for j, c := range a.Inherits {
			if !classRE.MatchString(c) {
				return reqErr(fmt.Sprintf("%s.inherits[%d]", f, j), "%q is not a qualified class name", c)
			}
		}
		if a.Instances < 0 || a.Instances > MaxInstances {
			return reqErr(f+".instances", "%d is out of range: give 1 to %d (0 or nothing means 1)", a.Instances, MaxInstances)
		}
		if a.Instances == 0 {
			a.Instances = 1
		}
		if a.Component != nil {
			scn := a.Component.ServiceComponentName
			if scn != "" {
				if err := check.ID("service_component_name", scn); err != nil {
					return reqErr(f+".component.service_component_name", "%v", err)
				}
			}
		}
		if err := check.ID("component_id", r.ComponentID(a.Name)); err != nil {
			return reqErr(f+".name", "the component id <deployment_id>.<name> is not valid: %v", err)
		}
	}
	if !r.Template.Empty() {
		if r.Datacenter == "" {
			return reqErr("datacenter", "is missing: resources, groups, placement policies and a placement are checked against a datacenter model; name one (GET /v1/datacenters lists them)")
		}
		if err := r.Template.Validate(); err != nil {
			return placementErr(err)
		}
	}
	if b, err := r.JSON(); err != nil {
		return reqErr("request", "%v", err)
	} else if len(b) > MaxRequestBytes {
		return reqErr("request", "is %d bytes as JSON; at most %d are allowed", len(b), MaxRequestBytes)
	}
	return nil
}

// placementErr turns the problems of a placement template into a
// RequestError naming the first field.
func placementErr(err error) error {
	var inv *placement.Invalid
	if !errors.As(err, &inv) || len(inv.Problems) == 0 {
		return reqErr("placement", "%v", err)
	}
	msg := inv.Problems[0].Msg
	for _, p := range inv.Problems[1:] {
		msg += "; " + p.String()
	}
	if inv.More > 0 {
		msg += fmt.Sprintf("; and %d more problems", inv.More)
	}
	return reqErr(inv.Problems[0].Field, "%s", msg)
}

// ComponentID is the id of the component registered for an application:
// <deployment_id>.<name>. A name holds no '.' (Normalize), so the id's
// last '.' separates the two and no two (deployment, application) pairs
// give the same id (DeploymentOf reads the deployment back).
func (r *Request) ComponentID(app string) string { return r.DeploymentID + "." + app }

// ServiceComponentName is the Consul folder name of an application's
// component.
func (r *Request) ServiceComponentName(a *Application) string {
	if a.Component != nil && a.Component.ServiceComponentName != "" {
		return a.Component.ServiceComponentName
	}
	return r.ComponentID(a.Name)
}

// JSON is the request as compact JSON (map keys sorted, no HTML
// escaping): the form it travels in.
func (r *Request) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// ParseRequest decodes a request's JSON strictly (unknown fields are
// refused, naming them) and normalizes it.
func ParseRequest(data []byte) (*Request, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	var r Request
	if err := dec.Decode(&r); err != nil {
		return nil, reqErr("request", "not a deployment request: %v", err)
	}
	if dec.More() {
		return nil, reqErr("request", "holds more than one JSON value")
	}
	if err := r.Normalize(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Clone returns a deep copy of the request.
func (r *Request) Clone() *Request {
	c := *r
	c.Applications = make([]Application, len(r.Applications))
	for i := range r.Applications {
		a := r.Applications[i]
		a.Inherits = slices.Clone(a.Inherits)
		a.Scripts = slices.Clone(a.Scripts)
		if a.Properties != nil {
			a.Properties = deepCopy(a.Properties).(map[string]any)
		}
		if a.Component != nil {
			spec := *a.Component
			spec.PolicyIDs = slices.Clone(spec.PolicyIDs)
			spec.PolicyFilters = slices.Clone(spec.PolicyFilters)
			a.Component = &spec
		}
		c.Applications[i] = a
	}
	c.Template = r.Template.Clone()
	return &c
}

// deepCopy copies a JSON value (maps and slices; the rest is immutable).
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = deepCopy(e)
		}
		return l
	}
	return v
}

// Is reports whether the application is the class or package name, or
// inherits from the class.
func (a *Application) Is(name string) bool {
	return a.Class == name || a.Package == name || slices.Contains(a.Inherits, name)
}

// InNamespace reports whether the application's class, package or a class
// it inherits from is in the namespace (ns itself or below it).
func (a *Application) InNamespace(ns string) bool {
	in := func(n string) bool { return n == ns || strings.HasPrefix(n, ns+".") }
	if in(a.Class) || (a.Package != "" && in(a.Package)) {
		return true
	}
	return slices.ContainsFunc(a.Inherits, in)
}

// describe names the application in messages.
func (a *Application) describe() string {
	// fmt.Sprintf("application %q (%s)", a.Name, a.Class), without fmt.
	return "application " + strconv.Quote(a.Name) + " (" + a.Class + ")"
}
