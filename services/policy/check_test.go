package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/events"
)

// rawBody is a pushed body as JSON text, with fields to add or replace
// given as JSON text ("" removes the field).
func rawBody(fields map[string]string) string {
	base := map[string]string{
		"policyName":         `"DCAE.Config_VM_MEMORY.5.xml"`,
		"policyVersion":      `"5"`,
		"policyConfigStatus": `"CONFIG_RETRIEVED"`,
		"matchingConditions": `{"ONAPName": "DCAE"}`,
		"config":             `{"min_memory": "2GB"}`,
	}
	for k, v := range fields {
		base[k] = v
	}
	var parts []string
	for _, k := range []string{"policyName", "policyVersion", "policyConfigStatus", "matchingConditions", "config"} {
		if v := base[k]; v != "" {
			parts = append(parts, fmt.Sprintf("%q: %s", k, v))
		}
		delete(base, k)
	}
	for k, v := range base {
		if v != "" {
			parts = append(parts, fmt.Sprintf("%q: %s", k, v))
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// dcaeConditions are rawBody's matchingConditions as Check carries them.
const dcaeConditions = `{"ONAPName":"DCAE"}`

// checkAccepted are bodies Check accepts, with what it gives; they also
// seed FuzzCheck.
func checkAccepted() []struct {
	name     string
	raw      string
	want     Checked
	wantJSON string
} {
	return []struct {
		name     string
		raw      string
		want     Checked
		wantJSON string
	}{
		{name: "the seed's example, config given as a JSON string",
			raw:      rawBody(map[string]string{"policyName": `"DCAE.Config_VM_MEMORY.222.xml"`, "policyVersion": `"222"`, "config": `"{\"min_memory\":\"8GB\"}"`}),
			want:     Checked{PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.222.xml", PolicyVersion: "222", Version: 222, MatchingConditions: dcaeConditions},
			wantJSON: `{"config":{"min_memory":"8GB"},"matchingConditions":{"ONAPName":"DCAE"},"policyConfigStatus":"CONFIG_RETRIEVED","policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222"}`},
		{name: "a config encoded twice is parsed twice, so the canonical JSON is checked unchanged",
			raw:      rawBody(map[string]string{"config": `"\"{\\\"min_memory\\\":\\\"8GB\\\"}\""`}),
			want:     Checked{PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.5.xml", PolicyVersion: "5", Version: 5, MatchingConditions: dcaeConditions},
			wantJSON: `{"config":{"min_memory":"8GB"},"matchingConditions":{"ONAPName":"DCAE"},"policyConfigStatus":"CONFIG_RETRIEVED","policyName":"DCAE.Config_VM_MEMORY.5.xml","policyVersion":"5"}`},
		{name: "a config string nesting as deep as the body may once it is parsed",
			raw:  rawBody(map[string]string{"config": `"` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `"`}),
			want: Checked{PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.5.xml", PolicyVersion: "5", Version: 5, MatchingConditions: dcaeConditions}},
		{name: "no policyVersion: the name's is filled in",
			raw:      rawBody(map[string]string{"policyVersion": ""}),
			want:     Checked{PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.5.xml", PolicyVersion: "5", Version: 5, MatchingConditions: dcaeConditions},
			wantJSON: `{"config":{"min_memory":"2GB"},"matchingConditions":{"ONAPName":"DCAE"},"policyConfigStatus":"CONFIG_RETRIEVED","policyName":"DCAE.Config_VM_MEMORY.5.xml","policyVersion":"5"}`},
		{name: "policyVersion equal as an integer",
			raw:  rawBody(map[string]string{"policyVersion": `"005"`}),
			want: Checked{PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.5.xml", PolicyVersion: "005", Version: 5, MatchingConditions: dcaeConditions}},
		{name: "no matchingConditions, every allowed character, numbers and HTML kept as given",
			raw:      rawBody(map[string]string{"policyName": `"onap:DCAE-x_1.Config.7.json"`, "policyVersion": "", "matchingConditions": "", "config": `{"n": 1.50, "s": "<a&b>"}`}),
			want:     Checked{PolicyID: "onap:DCAE-x_1.Config", PolicyName: "onap:DCAE-x_1.Config.7.json", PolicyVersion: "7", Version: 7, MatchingConditions: "{}"},
			wantJSON: `{"config":{"n":1.50,"s":"<a&b>"},"policyConfigStatus":"CONFIG_RETRIEVED","policyName":"onap:DCAE-x_1.Config.7.json","policyVersion":"7"}`},
		{name: "a config string that is not JSON is kept",
			raw:  rawBody(map[string]string{"config": `"min_memory=2GB"`}),
			want: Checked{PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.5.xml", PolicyVersion: "5", Version: 5, MatchingConditions: dcaeConditions}},
		{name: "whitespace costs nothing: the limit is on the canonical JSON",
			raw:  rawBody(map[string]string{"config": `"{\"pad\": \"x\"` + strings.Repeat(" ", 2*MaxBodyBytes) + `}"`}),
			want: Checked{PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.5.xml", PolicyVersion: "5", Version: 5, MatchingConditions: dcaeConditions}},
	}
}

func TestCheckAccepts(t *testing.T) {
	for _, tt := range checkAccepted() {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Check([]byte(tt.raw))
			if err != nil {
				t.Fatalf("Check refused %s: %v", tt.raw[:min(len(tt.raw), 300)], err)
			}
			js := got.JSON
			got.JSON = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Check = %+v; want %+v", got, tt.want)
			}
			if tt.wantJSON != "" && string(js) != tt.wantJSON {
				t.Fatalf("canonical JSON\n got  %s\n want %s", js, tt.wantJSON)
			}
			if len(js) > MaxBodyBytes {
				t.Fatalf("canonical JSON is %d bytes, over MaxBodyBytes", len(js))
			}
			// What travels on is accepted again, unchanged.
			again, err := Check(js)
			if err != nil || string(again.JSON) != string(js) {
				t.Fatalf("Check of the canonical JSON = %s, %v; want it unchanged", again.JSON, err)
			}
		})
	}
}

// checkRefused are bodies Check refuses, with what its error says; they
// also seed FuzzCheck.
func checkRefused() []struct {
	name string
	raw  string
	want []string
} {
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	return []struct {
		name string
		raw  string
		want []string
	}{
		// Key traversal and names a Consul key or an operator cannot live with.
		{"traversal", rawBody(map[string]string{"policyName": `"DCAE.Config_VM_/../../../evil.2.xml"`, "policyVersion": `"2"`}),
			[]string{`character '/' at byte 15 is not allowed`, NameChars}},
		{"dot-dot without a slash", rawBody(map[string]string{"policyName": `"DCAE..Config.5.xml"`}), []string{`".." is not allowed`}},
		{"dot-dot policy_id", rawBody(map[string]string{"policyName": `"...5.xml"`}), []string{`".." is not allowed`}},
		{"space", rawBody(map[string]string{"policyName": `"DCAE.Config VM.5.xml"`}), []string{`character ' ' at byte 11`}},
		{"control character", rawBody(map[string]string{"policyName": `"DCAE.Config\u0007VM.5.xml"`}), []string{`character '\a' at byte 11`}},
		{"newline", rawBody(map[string]string{"policyName": `"DCAE\nConfig.5.xml"`}), []string{`character '\n' at byte 4`}},
		{"not ASCII", rawBody(map[string]string{"policyName": `"DCAE.Cönfig.5.xml"`}), []string{`character 'ö' at byte 6`}},
		{"invalid UTF-8 in the name", strings.Replace(rawBody(nil), "VM_MEMORY", "VM_\xffMEMORY", 1), []string{"byte", "(0xff) is not UTF-8"}},
		{"invalid UTF-8 in the config", strings.Replace(rawBody(nil), "2GB", "2\xc3GB", 1), []string{"(0xc3) is not UTF-8"}},
		{"starts with a dot", rawBody(map[string]string{"policyName": `".hidden.5.xml"`}), []string{`policy_id ".hidden" does not start with a letter or a digit`}},
		{"starts with a dash", rawBody(map[string]string{"policyName": `"-rf.5.xml"`}), []string{`does not start with a letter or a digit`}},
		{"no version in the name", rawBody(map[string]string{"policyName": `"DCAE.Config_VM_MEMORY"`}), []string{"does not end in .<version>.<ext>"}},
		{"version not digits in the name", rawBody(map[string]string{"policyName": `"DCAE.Config_VM_MEMORY.v5.xml"`}), []string{"does not end in .<version>.<ext>"}},
		{"version too large", rawBody(map[string]string{"policyName": `"DCAE.X.99999999999999999999.xml"`, "policyVersion": ""}), []string{"too large"}},
		{"nothing before the version", rawBody(map[string]string{"policyName": `".5.xml"`}), []string{"nothing is left before"}},
		{"name too long", rawBody(map[string]string{"policyName": `"` + strings.Repeat("a", MaxNameBytes) + `.5.xml"`}), []string{"over the limit of 255"}},
		{"no name", rawBody(map[string]string{"policyName": ""}), []string{"policyName is missing"}},
		{"name not a string", rawBody(map[string]string{"policyName": `5`}), []string{"policyName is 5 (number), want a string"}},
		{"empty name", rawBody(map[string]string{"policyName": `""`}), []string{"policyName is empty"}},

		// Version poisoning.
		{"policyVersion differs from the name", rawBody(map[string]string{"policyVersion": `"999"`}),
			[]string{`"DCAE.Config_VM_MEMORY.5.xml"`, `policyVersion "999" is not the version 5 in its policyName; give policyVersion "5" or leave it out`}},
		{"policyVersion given twice", `{"policyName": "DCAE.Config_VM_MEMORY.5.xml", "policyVersion": "5", "policyVersion": "999", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"a": 1}}`,
			[]string{`the key "policyVersion" appears twice in the object at the top level`}},
		{"policyVersion a number", rawBody(map[string]string{"policyVersion": `5`}), []string{"policyVersion 5 (number) is not a string of digits"}},
		{"policyVersion null", rawBody(map[string]string{"policyVersion": `null`}), []string{"policyVersion null (null) is not a string of digits"}},
		{"policyVersion not digits", rawBody(map[string]string{"policyVersion": `"v5"`}), []string{`policyVersion "v5" (string) is not a string of digits`}},

		// Keys given twice anywhere.
		{"key twice in the config", rawBody(map[string]string{"config": `{"rules": [{"a": 1, "a": 2}]}`}),
			[]string{`the key "a" appears twice in the object at config.rules[0]`}},
		{"key twice in a config string", rawBody(map[string]string{"config": `"{\"a\": 1, \"a\": 2}"`}),
			[]string{`config is a string holding JSON in which the key "a" appears twice`}},
		{"matchingConditions twice", `{"policyName": "DCAE.X.1.xml", "matchingConditions": {}, "matchingConditions": {"ONAPName": "DCAE"}, "policyConfigStatus": "CONFIG_RETRIEVED", "config": 1}`,
			[]string{`the key "matchingConditions" appears twice`}},

		// matchingConditions present must be an object.
		{"matchingConditions null", rawBody(map[string]string{"matchingConditions": `null`}), []string{"matchingConditions is null (null), want a JSON object"}},
		{"matchingConditions a list", rawBody(map[string]string{"matchingConditions": `[{"ONAPName": "DCAE"}]`}), []string{"matchingConditions is [", "(array), want a JSON object"}},
		{"matchingConditions a string", rawBody(map[string]string{"matchingConditions": `"DCAE"`}), []string{"(string), want a JSON object"}},

		// Size, depth and shape.
		{"oversize", rawBody(map[string]string{"config": `{"blob": "` + strings.Repeat("x", MaxBodyBytes) + `"}`}),
			[]string{"over the limit of 524288 bytes (512 KiB"}},
		{"too deep", rawBody(map[string]string{"config": `{"a": ` + deep + `}`}), []string{"more than 100 levels", "config.a" + strings.Repeat("[0]", MaxDepth-2)}},
		{"too deep in a config string", rawBody(map[string]string{"config": `"[` + deep + `]"`}), []string{"config is a string holding JSON that nests too deep"}},
		{"a config string as deep as the limit, one level down in the body", rawBody(map[string]string{"config": `"` + deep + `"`}),
			[]string{"config is a string holding JSON that nests too deep", "more than 100 levels"}},
		{"not an object", `[{"policyName": "DCAE.X.1.xml"}]`, []string{"it is a JSON array, want a JSON object"}},
		{"malformed", `{"policyName": `, []string{"send one JSON object"}},
		{"two values", rawBody(nil) + ` {}`, []string{"more data after the JSON value"}},
		{"empty", ``, []string{"send one JSON object"}},

		// The PDP's own rules.
		{"not retrieved", rawBody(map[string]string{"policyConfigStatus": `"CONFIG_NOT_FOUND"`}), []string{`policyConfigStatus is "CONFIG_NOT_FOUND"`}},
		{"empty config", rawBody(map[string]string{"config": `"{}"`}), []string{"config is empty"}},
	}
}

func TestCheckRefusesWithAReason(t *testing.T) {
	for _, tt := range checkRefused() {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Check([]byte(tt.raw))
			if err == nil {
				t.Fatalf("Check accepted it: %+v", got.PolicyName)
			}
			if !errors.Is(err, ErrInvalidBody) {
				t.Errorf("error %v does not wrap ErrInvalidBody", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if got.JSON != nil || got.PolicyID != "" {
				t.Errorf("a refused body still gave %+v", got)
			}
		})
	}
}

// A refusal quotes at most a little of what it refuses, so it stays
// readable and fits a dead-letter header.
func TestCheckRefusalStaysShort(t *testing.T) {
	huge := strings.Repeat("k", 300<<10)
	for _, raw := range []string{
		rawBody(map[string]string{"policyName": `"` + huge + `.1.xml"`}),
		rawBody(map[string]string{"config": `{"` + huge + `": 1, "` + huge + `": 2}`}),
		rawBody(map[string]string{"policyConfigStatus": `"CONFIG_NOT_FOUND"`, "policyConfigMessage": `"` + huge + `"`}),
		rawBody(map[string]string{"matchingConditions": `["` + huge + `"]`}),
	} {
		_, err := Check([]byte(raw))
		if err == nil || len(err.Error()) > 1000 {
			t.Errorf("refusal of %d bytes: %d-byte error %.300s", len(raw), len(fmt.Sprint(err)), err)
		}
	}
}

func TestCheckSizeLimitIsExact(t *testing.T) {
	base, err := Check([]byte(rawBody(map[string]string{"config": `"x"`})))
	if err != nil {
		t.Fatal(err)
	}
	pad := MaxBodyBytes - len(base.JSON)
	at := rawBody(map[string]string{"config": `"x` + strings.Repeat("y", pad) + `"`})
	c, err := Check([]byte(at))
	if err != nil || len(c.JSON) != MaxBodyBytes {
		t.Fatalf("a body of exactly MaxBodyBytes: %d bytes, %v", len(c.JSON), err)
	}
	over := rawBody(map[string]string{"config": `"x` + strings.Repeat("y", pad+1) + `"`})
	_, err = Check([]byte(over))
	if err == nil || !strings.Contains(err.Error(), "524289 bytes as JSON is over the limit of 524288 bytes") || !strings.Contains(err.Error(), "by 1 bytes") {
		t.Fatalf("one byte over: %v", err)
	}
}

// What Check accepts, every stage can carry: the largest body goes through
// the Avro codec in a pushed notification and in a catalog entry.
func TestLargestBodyIsCarriedByTheCodec(t *testing.T) {
	base, err := Check([]byte(rawBody(map[string]string{"config": `"x"`})))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Check([]byte(rawBody(map[string]string{"config": `"x` + strings.Repeat("é", (MaxBodyBytes-len(base.JSON))/2) + `"`})))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.JSON) < MaxBodyBytes-1 {
		t.Fatalf("body is %d bytes, want the largest accepted", len(c.JSON))
	}
	codec := events.Default()
	for _, ev := range []events.Event{
		&events.PdpNotification{NotificationID: "n", Source: "test", PushedBodies: []string{string(c.JSON)},
			LoadedPolicies: []events.LoadedPolicy{}, RemovedPolicies: []events.UnloadedPolicy{}},
		&events.PolicyCatalogEntry{PolicyID: c.PolicyID, PolicyName: c.PolicyName, PolicyVersion: c.PolicyVersion, Body: string(c.JSON), Status: events.StatusValid},
	} {
		data, err := codec.Encode(ev)
		if err != nil {
			t.Fatalf("encode %s: %v", ev.SchemaName(), err)
		}
		back, err := codec.Decode(context.Background(), data)
		if err != nil {
			t.Fatalf("decode %s carrying a %d-byte body: %v", ev.SchemaName(), len(c.JSON), err)
		}
		var body string
		switch b := back.(type) {
		case *events.PdpNotification:
			body = b.PushedBodies[0]
		case *events.PolicyCatalogEntry:
			body = b.Body
		}
		if body != string(c.JSON) {
			t.Fatalf("%s: the body changed on its way through the codec", ev.SchemaName())
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, tt := range []struct {
		name    string
		id      string
		version int64
		wantErr string
	}{
		{name: "DCAE.Config_VM_MEMORY.222.xml", id: "DCAE.Config_VM_MEMORY", version: 222},
		{name: "DCAE_alex.Config_alex_policy_number_1.3.xml", id: "DCAE_alex.Config_alex_policy_number_1", version: 3},
		{name: "DCAE.Config_x.5.xml.6.xml", id: "DCAE.Config_x.5.xml", version: 6},
		{name: "9.0.x", id: "9", version: 0},
		{name: "DCAE.Config_x.5.", wantErr: "does not end in"},
		{name: "DCAE.Config_x.5.x1", wantErr: "does not end in"},
		{name: "DCAE.\xffx.1.xml", wantErr: "byte 5 (0xff) is not UTF-8"},
		{name: "a/b.1.xml", wantErr: "character '/'"},
		{name: "a\\b.1.xml", wantErr: `character '\\'`},
		{name: "a%2F..b.1.xml", wantErr: "character '%'"},
		{name: "", wantErr: "policyName is empty"},
	} {
		id, v, err := CheckName(tt.name)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("CheckName(%q) = %q, %d, %v; want an error saying %q", tt.name, id, v, err, tt.wantErr)
			}
			continue
		}
		if err != nil || id != tt.id || v != tt.version {
			t.Errorf("CheckName(%q) = %q, %d, %v; want %q, %d", tt.name, id, v, err, tt.id, tt.version)
		}
	}
}

// splitListRefused are lists SplitList refuses, with what its error says;
// they also seed FuzzSplitList.
var splitListRefused = map[string]string{
	`{}`:         "got object, want a JSON array",
	`[{}, 1]`:    "element 1 is number, want a JSON object",
	`[{}] x`:     "",
	`[{}] []`:    "more data after the JSON array",
	`[{}`:        "",
	`["a"]`:      "element 0 is string",
	`[{"a": }]`:  "element 0",
	``:           "",
	`[null, {}]`: "element 0 is null",
}

func TestSplitList(t *testing.T) {
	raws, err := SplitList([]byte(` [ {"a": 1} ,{"b": [1, {"c": 2}]} ] `))
	if err != nil {
		t.Fatal(err)
	}
	if len(raws) != 2 || string(raws[0]) != `{"a": 1}` || string(raws[1]) != `{"b": [1, {"c": 2}]}` {
		t.Fatalf("SplitList = %q", raws)
	}
	for bad, want := range splitListRefused {
		_, err := SplitList([]byte(bad))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SplitList(%s) = %v; want an error saying %q", bad, err, want)
		}
	}
	empty, err := SplitList([]byte(`[]`))
	if err != nil || len(empty) != 0 {
		t.Errorf("SplitList([]) = %q, %v", empty, err)
	}
}

// versionedRaw is a raw body of DCAE.Config_a in the given version, with
// extra fields (JSON text ending in ", ") before the others.
func versionedRaw(version, extra string) json.RawMessage {
	return json.RawMessage(`{"policyName": "DCAE.Config_a.` + version + `.xml", "policyVersion": "` + version + `", ` + extra +
		`"policyConfigStatus": "CONFIG_RETRIEVED", "config": "{\"v\": ` + version + `}"}`)
}

func TestSelectLatestRawAppliesCheck(t *testing.T) {
	raw := versionedRaw
	tests := []struct {
		name        string
		bodies      []json.RawMessage
		wantLatest  string
		wantErrored string
		reason      string
	}{
		{name: "greatest valid version", bodies: []json.RawMessage{raw("9", ""), raw("10", ""), raw("2", "")}, wantLatest: "10"},
		{name: "a key twice on the latest: errored, not replaced by the older",
			bodies:      []json.RawMessage{raw("1", ""), raw("2", `"type": "JSON", "type": "XML", `)},
			wantErrored: "2", reason: `the key "type" appears twice`},
		{name: "policyVersion other than the name's on the latest: errored",
			bodies:      []json.RawMessage{raw("1", ""), json.RawMessage(`{"policyName": "DCAE.Config_a.1.xml", "policyVersion": "99", "policyConfigStatus": "CONFIG_RETRIEVED", "config": 1}`)},
			wantErrored: "99", reason: `policyVersion "99" is not the version 1`},
		{name: "no policyVersion: the name's counts",
			bodies:     []json.RawMessage{raw("3", ""), json.RawMessage(`{"policyName": "DCAE.Config_a.4.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": 1}`)},
			wantLatest: "4"},
		{name: "matchingConditions not an object on the latest: errored",
			bodies:      []json.RawMessage{raw("3", ""), raw("4", `"matchingConditions": [], `)},
			wantErrored: "4", reason: "matchingConditions is [] (array)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel := SelectLatestRaw(tt.bodies)
			const id = "DCAE.Config_a"
			c, ok := sel.Checked[id]
			if tt.wantLatest != "" {
				if !ok || c.PolicyVersion != tt.wantLatest || sel.Latest[id].VersionString() != tt.wantLatest {
					t.Fatalf("latest %+v, errored %v; want version %s", c, sel.Reasons, tt.wantLatest)
				}
				want, err := Check(tt.bodies[indexOfVersion(t, tt.bodies, tt.wantLatest)])
				if err != nil || string(c.JSON) != string(want.JSON) {
					t.Fatalf("selected %s; want what Check gives: %s, %v", c.JSON, want.JSON, err)
				}
				return
			}
			if ok {
				t.Fatalf("latest is %s; want version %s errored", c.PolicyVersion, tt.wantErrored)
			}
			if got := sel.Errored[id].VersionString(); got != tt.wantErrored {
				t.Fatalf("errored version %q; want %q", got, tt.wantErrored)
			}
			if err := sel.Reasons[id]; err == nil || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("reason %v; want it to say %q", err, tt.reason)
			}
		})
	}
}

func indexOfVersion(t *testing.T, bodies []json.RawMessage, version string) int {
	t.Helper()
	for i, b := range bodies {
		if strings.Contains(string(b), `"DCAE.Config_a.`+version+`.xml"`) {
			return i
		}
	}
	t.Fatalf("no body of version %s", version)
	return -1
}
