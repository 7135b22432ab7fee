package web

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Query is what a route takes in its query string, as the route table
// declares it. A parameter a route does not declare is refused with 400
// (CheckQuery): a caller who believes it asked for something (a dry run,
// a filter, a page) is told it did not, rather than answered as if it had
// not asked. Lenient routes (a page a browser opens, a probe) ignore the
// parameters they do not know.
type Query struct {
	// Params are the parameters the route takes.
	Params []string
	// Lenient ignores undeclared parameters instead of refusing them.
	Lenient bool
}

// Takes is a Query of params.
func Takes(params ...string) Query { return Query{Params: params} }

// DryRunParam is the query parameter asking a write route for what it
// would do, writing nothing.
const DryRunParam = "dry_run"

// CheckQuery refuses (400) a query string that does not parse, a
// parameter q does not declare, naming it and the ones the route takes,
// and a declared parameter given more than once.
func CheckQuery(r *http.Request, q Query) *Error {
	if r.URL.RawQuery == "" {
		return nil
	}
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return Errorf(http.StatusBadRequest, "query string %q does not parse: %v; send name=value pairs joined by '&', with '%%' only as a %%XX escape", r.URL.RawQuery, err)
	}
	if q.Lenient {
		return nil
	}
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !slices.Contains(q.Params, k) {
			return Errorf(http.StatusBadRequest, "unknown query parameter %q: %s %s %s; nothing was done", k, r.Method, r.URL.Path, q.takes())
		}
		if len(vals[k]) > 1 {
			return Errorf(http.StatusBadRequest, "query parameter %q is given %d times; give it once", k, len(vals[k]))
		}
	}
	return nil
}

// takes says which parameters the route takes, for an answer.
func (q Query) takes() string {
	if len(q.Params) == 0 {
		return "takes no query parameter"
	}
	return "takes only " + strings.Join(q.Params, ", ")
}

// StrictQuery is h behind CheckQuery.
func StrictQuery(q Query, h HandlerFunc) HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) *Error {
		if e := CheckQuery(r, q); e != nil {
			return e
		}
		return h(w, r)
	}
}

// DryRun reports whether the request asks for a dry run (?dry_run=true,
// or 1, t, TRUE...; false or absent: a real write); any other value is
// refused.
func DryRun(r *http.Request) (bool, *Error) {
	v := r.URL.Query().Get(DryRunParam)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, Errorf(http.StatusBadRequest, "%s=%q: give true or false", DryRunParam, v)
	}
	return b, nil
}

// NoBody is h for a write route that takes no body: a body other than
// nothing or {} is refused with 400 (a field the route does not take),
// before h runs.
func NoBody(h HandlerFunc) HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) *Error {
		var none struct{}
		if e := DecodeOptionalJSON(w, r, MaxRequestBytes, &none, "{}, or no body"); e != nil {
			return e
		}
		return h(w, r)
	}
}
