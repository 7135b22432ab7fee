package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCheckQuery(t *testing.T) {
	for _, tc := range []struct {
		url  string
		q    Query
		want string // "" accepted, else a fragment of the 400's reason
	}{
		{"/x", Query{}, ""},
		{"/x?dry_run=true", Takes(DryRunParam), ""},
		{"/x?dry_run=true", Query{}, `unknown query parameter "dry_run": POST /x takes no query parameter`},
		{"/x?dryrun=true", Takes(DryRunParam), `unknown query parameter "dryrun": POST /x takes only dry_run`},
		{"/x?limit=1&version=2&b=1", Takes("limit", "version"), `"b": POST /x takes only limit, version`},
		{"/x?dry_run=true&dry_run=false", Takes(DryRunParam), "given 2 times"},
		{"/x?a=%zz", Query{Lenient: true}, "does not parse"},
		{"/x?anything=1", Query{Lenient: true}, ""},
	} {
		r := httptest.NewRequest(http.MethodPost, tc.url, nil)
		e := CheckQuery(r, tc.q)
		switch {
		case tc.want == "" && e != nil:
			t.Errorf("%s: refused: %v", tc.url, e)
		case tc.want != "" && (e == nil || e.Status != http.StatusBadRequest || !strings.Contains(e.Msg, tc.want)):
			t.Errorf("%s: %v, want 400 with %q", tc.url, e, tc.want)
		}
	}
	for v, want := range map[string]bool{"": false, "true": true, "1": true, "false": false} {
		got, e := DryRun(httptest.NewRequest(http.MethodPost, "/x?dry_run="+v, nil))
		if e != nil || got != want {
			t.Errorf("dry_run=%q: %v %v, want %v", v, got, e, want)
		}
	}
	if _, e := DryRun(httptest.NewRequest(http.MethodPost, "/x?dry_run=yes", nil)); e == nil || e.Status != http.StatusBadRequest {
		t.Errorf("dry_run=yes: %v, want 400", e)
	}
}
