package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// readAnswers are answers of the North API's read routes, by path, in
// the shapes the API gives.
var readAnswers = map[string]string{
	"/v2/participants":                 `{"participants":[{"participantId":"p1","replicas":2,"supportedElementTypes":["org.policyflow.ConsulKV"]},{"participantId":"p2","replicas":1,"supportedElementTypes":[]}]}`,
	"/v2/participants/p1":              `{"participantId":"p1","replicas":2,"lastSeen":"2026-01-02T03:04:05Z","compositions":{}}`,
	"/v2/participants/p1/instances/i1": `{"instanceId":"i1","deployState":"DEPLOYED","elements":[{"id":"e1","state":"DEPLOYED"}]}`,
	"/v1/agentpackages":                `{"packages":[{"version":"1.2.0","sha256":"ab12","size":1024,"uploadedBy":"admin","uploadedAt":"2026-01-02T03:04:05Z"}]}`,
	"/v1/components/c1/status":         `{"component_id":"c1","policies":{"DCAE.Config_a":{"version":"3","update_id":"u-1","modify_index":12,"notified":true}},"ok":true}`,
	"/policies":                        `{"policies":[{"id":"pol1","name":"no-root","mode":"enforce","tenantIds":null}]}`,
	"/policies/pol1":                   `{"id":"pol1","name":"no-root","mode":"enforce","tenantIds":["t1"],"objectModel":{"?":{"type":"runAsNonRoot"}}}`,
	"/policies/pol1/violations":        `{"policyId":"pol1","violations":[{"deploymentId":"d1","message":"runs as root"}]}`,
	"/v1/orgs/acme/nmps":               `{"nmps":[{"name":"web","nmp":{"enabled":true,"label":"tier=web","lastUpdated":"2026-01-02T03:04:05Z","agentUpgradePolicy":{"atLeastVersion":"1.2.0","start":"2026-01-03T00:00:00Z","duration":3600}}}]}`,
	"/v1/orgs/acme/nmps/web/status":    `{"enabled":true,"nodes":2,"states":{"installed":1,"failed":1},"failing":[{"node":"n2","status":"failed","failedVersion":"1.2.0","error":"disk full"}],"rollout":{"started":2,"failed":1}}`,
	"/v1/orgs/acme/nmps/web/nodes":     `{"nodes":["n1","n2"],"versions":{"n1":"1.2.0","n2":"1.1.0"},"conflicts":{}}`,
	"/v1/datacenters":                  `{"datacenters":[{"id":"dc1","levels":3,"updatedAt":"2026-01-02T03:04:05Z"}]}`,
	"/v1/datacenters/dc1":              `{"id":"dc1","levels":[{"name":"rack","within":["room"]}],"dimensions":["cpu"]}`,
	"/v1/policies/DCAE.Config_a/rollout": `{"policy_id":"DCAE.Config_a","latest_version":"3","should_have":4,"have":3,` +
		`"failed":["c9"],"pending":[],"complete":false}`,
}

// fakeReadAPI answers the read routes of readAnswers, and 404 otherwise.
func fakeReadAPI(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		body, ok := readAnswers[r.URL.Path]
		if !ok || r.Method != http.MethodGet {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"no such thing"}`))
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// readCommands are every read command of policyctl that asks the North
// API, with the arguments that select the answers above.
var readCommands = [][]string{
	{"participants", "list"},
	{"participants", "show", "p1"},
	{"acm", "status", "p1", "i1"},
	{"agentpackage", "list"},
	{"component", "status", "c1"},
	{"app-policy", "list"},
	{"app-policy", "get", "pol1"},
	{"app-policy", "violations", "pol1"},
	{"nmp", "list", "--org", "acme"},
	{"nmp", "status", "web", "--org", "acme"},
	{"nmp", "nodes", "web", "--org", "acme"},
	{"dc", "list"},
	{"dc", "get", "dc1"},
	{"rollout", "DCAE.Config_a"},
}

// TestTopologyDescribeOutputs: the one read command that needs no API.
func TestTopologyDescribeOutputs(t *testing.T) {
	hermeticEnv(t)
	js := policyctl(t, "topology", "describe", "schemas", "-o", "json", "--topic-prefix", "x.")
	var facts struct {
		Topics []struct {
			Topic      string `json:"topic"`
			Partitions int    `json:"partitions"`
		} `json:"topics"`
	}
	if js.code != 0 || json.Unmarshal([]byte(js.out), &facts) != nil || len(facts.Topics) != 1 || facts.Topics[0].Topic != "x.schemas" || facts.Topics[0].Partitions < 1 {
		t.Fatalf("topology describe -o json: exit %d, stdout %q, stderr %q", js.code, js.out, js.errOut)
	}
	ym := policyctl(t, "topology", "describe", "schemas", "-o", "yaml", "--topic-prefix", "x.")
	if ym.code != 0 || !sameValue(t, js.out, ym.out) {
		t.Errorf("topology describe -o yaml: exit %d, stdout %q; want the data of -o json", ym.code, ym.out)
	}
	tb := policyctl(t, "topology", "describe", "schemas", "--topic-prefix", "x.")
	if tb.code != 0 || !strings.HasPrefix(tb.out, "TOPIC") || tb.out != policyctl(t, "topology", "describe", "schemas", "-o", "table", "--topic-prefix", "x.").out {
		t.Errorf("topology describe: exit %d, stdout %q; want the table, the same as -o table", tb.code, tb.out)
	}
	if bad := policyctl(t, "topology", "describe", "-o", "csv"); bad.code != exitUsage || !strings.Contains(bad.errOut, "not an output format") {
		t.Errorf("topology describe -o csv: exit %d, stderr %q", bad.code, bad.errOut)
	}
}

// sameValue decodes JSON and YAML output and compares them as data.
func sameValue(t *testing.T, jsonOut, yamlOut string) bool {
	t.Helper()
	var j, y any
	if err := json.Unmarshal([]byte(jsonOut), &j); err != nil {
		t.Fatalf("JSON output: %v", err)
	}
	if err := yaml.Unmarshal([]byte(yamlOut), &y); err != nil {
		t.Fatalf("YAML output: %v", err)
	}
	// Through JSON again, so that numbers compare alike.
	b, err := json.Marshal(y)
	if err != nil {
		t.Fatalf("YAML output is not JSON-like data: %v", err)
	}
	var y2 any
	if err := json.Unmarshal(b, &y2); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(j, y2)
}

func TestEveryReadCommandPrintsJSONYAMLAndTable(t *testing.T) {
	hermeticEnv(t)
	api := fakeReadAPI(t)
	for _, c := range readCommands {
		name := strings.Join(c, " ")
		t.Run(name, func(t *testing.T) {
			run := func(extra ...string) result {
				args := append(append([]string{}, c...), "--api", api)
				return policyctl(t, append(args, extra...)...)
			}
			js := run("-o", "json")
			if js.code != 0 || !json.Valid([]byte(js.out)) {
				t.Fatalf("%s -o json: exit %d, stdout %q, stderr %q; want valid JSON", name, js.code, js.out, js.errOut)
			}
			ym := run("-o", "yaml")
			var v any
			if ym.code != 0 || yaml.Unmarshal([]byte(ym.out), &v) != nil || v == nil {
				t.Fatalf("%s -o yaml: exit %d, stdout %q, stderr %q; want valid YAML", name, ym.code, ym.out, ym.errOut)
			}
			if !sameValue(t, js.out, ym.out) {
				t.Errorf("%s: -o yaml holds other data than -o json:\n%s\n%s", name, ym.out, js.out)
			}
			if long := run("--output", "yaml"); long.out != ym.out {
				t.Errorf("%s --output yaml: %q, want the output of -o yaml %q", name, long.out, ym.out)
			}
			tb := run("-o", "table")
			if tb.code != 0 || strings.TrimSpace(tb.out) == "" || json.Valid([]byte(tb.out)) {
				t.Errorf("%s -o table: exit %d, stdout %q, stderr %q; want a table", name, tb.code, tb.out, tb.errOut)
			}
			bad := run("-o", "xml")
			if bad.code != exitUsage || !strings.Contains(bad.errOut, `-o "xml" is not an output format; use -o json, -o yaml or -o table`) || bad.out != "" {
				t.Errorf("%s -o xml: exit %d, stdout %q, stderr %q; want exit 2 naming the formats", name, bad.code, bad.out, bad.errOut)
			}
		})
	}
}

// The default format of each read command is the one it had: a table where
// it drew one, the API's JSON elsewhere; --json stays -o json.
func TestReadCommandsKeepTheirDefaultFormat(t *testing.T) {
	hermeticEnv(t)
	api := fakeReadAPI(t)
	for _, tc := range []struct {
		args []string
		head string // the start of the default output
	}{
		{[]string{"agentpackage", "list"}, "VERSION  SIZE"},
		{[]string{"nmp", "list", "--org", "acme"}, "NAME  ENABLED"},
		{[]string{"nmp", "status", "web", "--org", "acme"}, "NMP acme/web: enabled true, 2 node(s)"},
		{[]string{"nmp", "nodes", "web", "--org", "acme", "--versions"}, "NODE  VERSION"},
		{[]string{"nmp", "nodes", "web", "--org", "acme"}, "{"},
		{[]string{"component", "status", "c1"}, "{"},
		{[]string{"nmp", "list", "--org", "acme", "--json"}, "{"},
	} {
		r := policyctl(t, append(tc.args, "--api", api)...)
		if r.code != 0 || !strings.HasPrefix(r.out, tc.head) {
			t.Errorf("policyctl %s: exit %d, stdout %q, stderr %q; want it to start with %q", strings.Join(tc.args, " "), r.code, r.out, r.errOut, tc.head)
		}
	}
}

// A flag after the positional arguments is honoured as one before them.
func TestFlagsAfterArgumentsAreHonoured(t *testing.T) {
	hermeticEnv(t)
	api := fakeReadAPI(t)
	before := policyctl(t, "component", "status", "--api", api, "-o", "yaml", "c1")
	after := policyctl(t, "component", "status", "c1", "--api", api, "-o", "yaml")
	between := policyctl(t, "acm", "status", "p1", "--api", api, "i1", "-o=yaml")
	for _, r := range []result{before, after, between} {
		if r.code != 0 || strings.HasPrefix(r.out, "{") {
			t.Errorf("exit %d, stdout %q, stderr %q; want YAML", r.code, r.out, r.errOut)
		}
	}
	if before.out != after.out {
		t.Errorf("flags after the id: %q; want the output with them before it, %q", after.out, before.out)
	}
	// After "--" a dash-word is an argument.
	r := policyctl(t, "component", "status", "--api", api, "--", "-o")
	if r.code != exitFailure || !strings.Contains(r.errOut, "no such thing") {
		t.Errorf("component status -- -o: exit %d, stderr %q; want -o taken as the id (404)", r.code, r.errOut)
	}
}

func TestJSONToYAMLKeepsOrderAndTypes(t *testing.T) {
	got, err := jsonToYAML([]byte(`{"b":1,"a":"true","c":[1.5,null,false],"d":{},"e":"x: y","f":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := "b: 1\na: \"true\"\nc:\n  - 1.5\n  - null\n  - false\nd: {}\ne: 'x: y'\nf: []\n"
	if string(got) != want {
		t.Errorf("jsonToYAML:\n%s\nwant:\n%s", got, want)
	}
	if _, err := jsonToYAML([]byte(`{"a":1} {"b":2}`)); err == nil {
		t.Error("two JSON values became YAML; want an error")
	}
}

func TestGenericTable(t *testing.T) {
	var b strings.Builder
	if err := printTable(&b, []byte(`{"count":2,"items":[{"id":"a","n":1},{"id":"b","extra":{"k":true}}]}`)); err != nil {
		t.Fatal(err)
	}
	want := "count: 2\nID  N  EXTRA\na   1  -\nb   -  {\"k\":true}\n"
	if b.String() != want {
		t.Errorf("table of a list:\n%q\nwant\n%q", b.String(), want)
	}
	b.Reset()
	if err := printTable(&b, []byte(`{"id":"x","tags":["a"],"note":""}`)); err != nil {
		t.Fatal(err)
	}
	want = "FIELD  VALUE\nid     x\ntags   [\"a\"]\nnote   -\n"
	if b.String() != want {
		t.Errorf("table of an object:\n%q\nwant\n%q", b.String(), want)
	}
}
