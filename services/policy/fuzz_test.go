package policy

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"regexp"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzAllocLimit is what matching a filter and a body of at most
// fuzzSmallInput bytes together may allocate. Honest matching allocates
// a few times its input; a comparison that expands a number's exponent
// (1e999999 as an integer) allocates megabytes.
const (
	fuzzSmallInput = 1 << 10
	fuzzAllocLimit = 2 << 20
)

// heapAllocs is the bytes allocated on the heap so far.
func heapAllocs() uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}

// fuzzSeedLimit leaves the tests' large inputs (bodies near MaxBodyBytes)
// out of the seed corpora: the fuzzer mutates small inputs far faster,
// and the size limits have their own tests.
const fuzzSeedLimit = 16 << 10

// hostileBodies are policy_body texts a pusher or a PDP could send, beyond
// those of the Check tests: names that try to leave their Consul folder,
// numbers no float holds, escapes that decode to the same key, nesting at
// the limit.
var hostileBodies = []string{
	rawBody(map[string]string{"policyName": `"..%2F..%2Fevil.1.xml"`}),
	rawBody(map[string]string{"policyName": `"DCAE.Config\\/x.1.xml"`}),
	rawBody(map[string]string{"policyName": `"DCAE.Config_x.1.xml\u0000"`}),
	rawBody(map[string]string{"config": `{"n": 1e999999999, "m": -0, "k": 123456789012345678901234567890.5e-400}`}),
	rawBody(map[string]string{"config": `{"a": 1, "\u0061": 2}`}),
	rawBody(map[string]string{"config": `"\"{\\\"a\\\": 1}\""`}),
	rawBody(map[string]string{"config": `"\ud800\udc00\ud800"`}),
	rawBody(map[string]string{"config": `{"a": ` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `}`}),
	rawBody(map[string]string{"matchingConditions": `{"ONAPName": "DCAE", "ONAPName": "X"}`}),
	rawBody(map[string]string{"policyVersion": `"00000000000000000000005"`}),
	`{"policyName": "DCAE.Config_x.1.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": 0}`,
	"\xef\xbb\xbf" + rawBody(nil),
}

// FuzzCheck feeds any bytes to Check, the validation of every body that
// enters policyflow. A refusal wraps ErrInvalidBody and gives nothing
// back; what it accepts is a fixed point (its canonical JSON is accepted
// again as the same Checked), within every limit, named by a policyName
// CheckName accepts, and read back by HeaderOf as Checked.Header. Seeds:
// the bodies of TestCheckAccepts and TestCheckRefusesWithAReason, and
// hostileBodies; findings are committed under testdata/fuzz/FuzzCheck.
func FuzzCheck(f *testing.F) {
	for _, tt := range checkAccepted() {
		if len(tt.raw) <= fuzzSeedLimit {
			f.Add([]byte(tt.raw))
		}
	}
	for _, tt := range checkRefused() {
		if len(tt.raw) <= fuzzSeedLimit {
			f.Add([]byte(tt.raw))
		}
	}
	for _, raw := range hostileBodies {
		f.Add([]byte(raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Check(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalidBody) {
				t.Fatalf("refusal %v does not wrap ErrInvalidBody", err)
			}
			if !reflect.DeepEqual(c, Checked{}) {
				t.Fatalf("a refused body still gave %+v", c)
			}
			if n := len(err.Error()); n > 1000 {
				t.Fatalf("refusal is %d bytes, want at most 1000 (it goes into a dead-letter header): %.300s", n, err)
			}
			return
		}
		requireCanonical(t, c)
	})
}

// requireCanonical checks what Check promises of a body it accepted.
func requireCanonical(t *testing.T, c Checked) {
	t.Helper()
	if len(c.JSON) > MaxBodyBytes || !utf8.Valid(c.JSON) || !json.Valid(c.JSON) {
		t.Fatalf("canonical JSON of %d bytes is over the limit, not UTF-8 or not JSON: %.300q", len(c.JSON), c.JSON)
	}
	id, version, err := CheckName(c.PolicyName)
	if err != nil || id != c.PolicyID || version != c.Version {
		t.Fatalf("CheckName(%q) = %q, %d, %v; Check said %q, %d", c.PolicyName, id, version, err, c.PolicyID, c.Version)
	}
	if v, ok := ParseVersion(c.PolicyVersion); !ok || v != c.Version {
		t.Fatalf("policyVersion %q is not the version %d", c.PolicyVersion, c.Version)
	}
	again, err := Check(c.JSON)
	if err != nil {
		t.Fatalf("Check refuses its own canonical JSON %.300s: %v", c.JSON, err)
	}
	if !reflect.DeepEqual(again, c) {
		t.Fatalf("Check of the canonical JSON differs:\nfirst %s %s %q\n      %.300s\nagain %s %s %q\n      %.300s",
			c.PolicyName, c.PolicyVersion, c.MatchingConditions, c.JSON, again.PolicyName, again.PolicyVersion, again.MatchingConditions, again.JSON)
	}
	h, err := HeaderOf(string(c.JSON))
	if err != nil || h != c.Header() {
		t.Fatalf("HeaderOf the canonical JSON = %+v, %v; want %+v", h, err, c.Header())
	}
}

// FuzzNotification decodes any bytes as a PDP notification, as the North
// API does. What decodes encodes and decodes back to the same
// notification; Validate accepts it exactly when CheckName accepts every
// policyName in it, and PolicyIDs then lists each of their policy_ids
// once, in order. Seeds: the notifications of the notification tests and
// hostile ones; findings are committed under testdata/fuzz/FuzzNotification.
func FuzzNotification(f *testing.F) {
	for _, s := range []string{
		`{"removedPolicies": [{"policyName": "DCAE.Config_VM_MEMORY.4.xml", "versionNo": "4"}],
		  "loadedPolicies": [{"policyName": "DCAE.Config_VM_MEMORY.5.xml", "versionNo": "5",
		    "matches": {"ONAPName": "DCAE", "ConfigName": "vm", "priority": 1, "on": true}, "updateType": "UPDATE"}],
		  "notificationType": "Both"}`,
		`{"removedPolicies":[{"policyName":"DCAE.Config_a.7.xml","versionNo":7}]}`,
		`{"loadedPolicies":[{"policyName":""}],"removedPolicies":[{"policyName":".3.xml"}]}`,
		`{"loadedPolicies":[{"policyName":"DCAE.Config_VM_/../../../evil.2.xml","versionNo":"2"}]}`,
		`{"loadedPolicies":[{"policyName":"DCAE.Config_\u00ff.1.xml","matches":{"k":{"a":[1,"x",null]},"":1e400}}]}`,
		`{"loadedPolicies":[null],"removedPolicies":null}`,
		`{"loadedPolicies":[{"policyName":"DCAE.X.1.xml","versionNo":{"v":1},"matches":{"k":null}}]}`,
		`{"LOADEDPOLICIES":[{"POLICYNAME":"DCAE.X.1.xml","versionNo":1.5e3}]}`,
		"{\"loadedPolicies\":[{\"policyName\":\"DCAE.X\xff.1.xml\"}]}",
		`{"loadedPolicies":[{"policyName":"DCAE.X.99999999999999999999.xml","versionNo":"99999999999999999999"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var n Notification
		if err := json.Unmarshal(data, &n); err != nil {
			return
		}
		out, err := json.Marshal(n)
		if err != nil {
			t.Fatalf("a decoded notification does not encode: %v", err)
		}
		var back Notification
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("the encoded notification %s does not decode: %v", out, err)
		}
		if !reflect.DeepEqual(plainNotification(n), plainNotification(back)) {
			t.Fatalf("encoding changed the notification:\nfirst %+v\nagain %+v", n, back)
		}

		var names, versions []string
		for _, l := range n.LoadedPolicies {
			names, versions = append(names, l.PolicyName), append(versions, l.VersionNo)
		}
		for _, r := range n.RemovedPolicies {
			names, versions = append(names, r.PolicyName), append(versions, r.VersionNo)
		}
		var wantIDs []string
		allValid := true
		for i, name := range names {
			id, version, err := CheckName(name)
			if v, ok := ParseVersion(versions[i]); err != nil || versions[i] != "" && (!ok || v != version) {
				allValid = false
			}
			if err != nil {
				continue
			}
			if !slices.Contains(wantIDs, id) {
				wantIDs = append(wantIDs, id)
			}
		}
		err = n.Validate()
		switch {
		case err == nil && !allValid:
			t.Fatalf("Validate accepts %q (versionNo %q), which CheckName refuses or whose versionNo differs", names, versions)
		case err != nil && allValid:
			t.Fatalf("Validate refuses %q (versionNo %q), which CheckName accepts with those versions: %v", names, versions, err)
		case err != nil:
			return
		}
		if ids := n.PolicyIDs(); !slices.Equal(ids, wantIDs) {
			t.Fatalf("PolicyIDs = %q; want %q", ids, wantIDs)
		}
		for _, l := range n.LoadedPolicies {
			if v := newView(l.Header()); !v.ok {
				t.Fatalf("the header of the valid %q matches no filter: %s", l.PolicyName, v.why)
			}
		}
	})
}

// plainNotification drops what encoding does not keep apart: a nil list
// from an empty one, no matches from empty ones.
func plainNotification(n Notification) Notification {
	p := Notification{NotificationType: n.NotificationType}
	for _, l := range n.LoadedPolicies {
		if len(l.Matches) == 0 {
			l.Matches = nil
		}
		p.LoadedPolicies = append(p.LoadedPolicies, l)
	}
	p.RemovedPolicies = append(p.RemovedPolicies, n.RemovedPolicies...)
	return p
}

// FuzzSplitList splits any bytes as a PDP /getConfig answer and selects
// the latest bodies from what it splits. SplitList gives the array's
// elements, each a JSON object, exactly as encoding/json sees them.
// Selection puts a policy_id in Latest or Errored, never both; a latest
// body is one Check accepts from the list, as Check gives it, of the
// greatest version; a policy_id Check accepts some body of is never left
// out. Seeds: the lists of TestSplitList and TestSelectLatestRawAppliesCheck
// and the Check tests' bodies as one list; findings are committed under
// testdata/fuzz/FuzzSplitList.
func FuzzSplitList(f *testing.F) {
	f.Add([]byte(` [ {"a": 1} ,{"b": [1, {"c": 2}]} ] `))
	f.Add([]byte(`[]`))
	for bad := range splitListRefused {
		f.Add([]byte(bad))
	}
	list := func(raws ...string) []byte { return []byte("[" + strings.Join(raws, ",") + "]") }
	f.Add(list(string(versionedRaw("9", "")), string(versionedRaw("10", "")), string(versionedRaw("2", ""))))
	f.Add(list(string(versionedRaw("1", "")), string(versionedRaw("2", `"type": "JSON", "type": "XML", `))))
	f.Add(list(string(versionedRaw("3", "")), string(versionedRaw("4", `"matchingConditions": [], `))))
	f.Add(list(string(versionedRaw("3", "")), `{"policyName": "DCAE.Config_a.4.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": 1}`))
	var all []string
	for _, tt := range checkAccepted() {
		if len(tt.raw) <= fuzzSeedLimit {
			all = append(all, tt.raw)
		}
	}
	for _, tt := range checkRefused() {
		if len(tt.raw) <= fuzzSeedLimit && strings.HasPrefix(tt.raw, "{") && json.Valid([]byte(tt.raw)) {
			all = append(all, tt.raw)
		}
	}
	f.Add(list(all...))
	f.Add(list(hostileBodies[:len(hostileBodies)-1]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		raws, err := SplitList(data)
		var elems []json.RawMessage
		plainErr := json.Unmarshal(data, &elems)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "split policy_body list: ") {
				t.Fatalf("error %q does not say what failed", err)
			}
			return
		}
		if plainErr != nil {
			t.Fatalf("SplitList accepts what encoding/json refuses: %v", plainErr)
		}
		if len(raws) != len(elems) {
			t.Fatalf("SplitList gives %d elements, encoding/json %d", len(raws), len(elems))
		}
		for i := range raws {
			if string(raws[i]) != string(elems[i]) || raws[i][0] != '{' {
				t.Fatalf("element %d is %q; encoding/json sees %q", i, raws[i], elems[i])
			}
		}

		sel := SelectLatestRaw(raws)
		if len(sel.Latest) != len(sel.Checked) {
			t.Fatalf("Latest has %d policy_ids, Checked %d", len(sel.Latest), len(sel.Checked))
		}
		for id, err := range sel.Reasons {
			if _, ok := sel.Errored[id]; !ok || !errors.Is(err, ErrInvalidBody) {
				t.Fatalf("reason for %q: %v; errored %v", id, err, ok)
			}
		}
		accepted := map[string][]Checked{} // by policy_id: what Check accepts of the list
		for _, raw := range raws {
			if c, err := Check(raw); err == nil {
				accepted[c.PolicyID] = append(accepted[c.PolicyID], c)
			}
		}
		for id, c := range sel.Checked {
			if _, both := sel.Errored[id]; both {
				t.Fatalf("%q is both latest and errored", id)
			}
			if c.PolicyID != id || sel.Latest[id] == nil {
				t.Fatalf("latest %q is %+v", id, c)
			}
			requireCanonical(t, c)
			if !slices.ContainsFunc(accepted[id], func(a Checked) bool { return reflect.DeepEqual(a, c) }) {
				t.Fatalf("latest %q is %.300s, which Check gives of no body in the list", id, c.JSON)
			}
			for _, a := range accepted[id] {
				if a.Version > c.Version {
					t.Fatalf("latest %q is version %d, but the list has a valid version %d", id, c.Version, a.Version)
				}
			}
		}
		for id := range accepted {
			_, latest := sel.Checked[id]
			_, errored := sel.Errored[id]
			if !latest && !errored {
				t.Fatalf("Check accepts a body of %q, but selection has no word on it", id)
			}
		}
		for id, vs := range sel.Versions {
			var prev int64 = -1
			for _, s := range vs {
				v, ok := ParseVersion(s)
				if !ok || v <= prev {
					t.Fatalf("versions of %q are not distinct integers in ascending order: %q", id, vs)
				}
				prev = v
			}
			if c, ok := sel.Checked[id]; ok && c.Version != prev {
				t.Fatalf("latest %q is version %d; the greatest version is %d", id, c.Version, prev)
			}
		}
	})
}

// FuzzFilterMatch compiles any filter and matches it against a body with
// any policyName and matchingConditions. CompileFilter refuses only a
// policyName Go cannot compile; a compiled policyName matches exactly
// when the plain expression's leftmost match starts at the name's first
// byte, or it equals the name or its policy_id; and an Index holding the
// filter (among others, before and after one is removed) gives exactly
// what Match gives for each, as does the body's Header. Seeds: the
// filters and bodies of TestFilterMatch; findings are committed under
// testdata/fuzz/FuzzFilterMatch.
func FuzzFilterMatch(f *testing.F) {
	for _, tt := range filterMatchCases() {
		body := tt.body
		if body == nil {
			body = hostCapacityBody()
		}
		attrs := ""
		if tt.filter.ConfigAttributes != nil {
			data, err := json.Marshal(tt.filter.ConfigAttributes)
			if err != nil {
				f.Fatal(err)
			}
			attrs = string(data)
		}
		conditions := ""
		if mc, ok := body[FieldMatchingConditions]; ok {
			data, err := json.Marshal(mc)
			if err != nil {
				f.Fatal(err)
			}
			conditions = string(data)
		}
		f.Add(tt.filter.PolicyName, "DCAE.Config_h", tt.filter.OnapName, tt.filter.ConfigName, attrs, body.PolicyName(), conditions)
	}
	f.Add(`DCAE\Q.Config_(`, `(?i)k`, "", "", `{"": 0}`, "DCAE.Config_(.1.xml", `{"": 0.0}`)
	f.Add(`(?m)^DCAE$`, `\b`, "", "", `{"k": 1}`, "DCAE\nx.1.xml", `{"k": 1.0}`)
	f.Add(`\xff.*`, "\uFFFD", "", "", "", "\xff.1.xml", "")
	f.Fuzz(func(t *testing.T, pattern, other, onapName, configName, attrs, name, conditions string) {
		attrMap, err := DecodeConfigAttributes(attrs)
		if err != nil {
			return
		}
		filter := Filter{PolicyName: pattern, OnapName: onapName, ConfigName: configName, ConfigAttributes: attrMap}
		cf, err := CompileFilter(filter)
		if err != nil {
			if _, perr := regexp.Compile(pattern); perr == nil {
				t.Fatalf("CompileFilter refuses %q, which Go compiles: %v", pattern, err)
			}
			if !strings.Contains(err.Error(), "policyName") {
				t.Fatalf("refusal %q does not name policyName", err)
			}
			return
		}
		body := Body{FieldPolicyName: name, FieldPolicyVersion: "1"}
		if conditions != "" {
			if v, err := decodeJSONValue([]byte(conditions)); err == nil {
				body[FieldMatchingConditions] = v
			}
		}
		ok, reasons := cf.Match(body)
		if len(reasons) == 0 {
			t.Fatalf("Match gives no reason")
		}
		if pattern != "" {
			plain, err := regexp.Compile(pattern)
			if err != nil {
				t.Fatalf("CompileFilter accepts %q, which Go does not compile: %v", pattern, err)
			}
			loc := plain.FindStringIndex(name)
			id, _ := PolicyID(name)
			nameOK := loc != nil && loc[0] == 0 || pattern == name || pattern == id
			if ok && !nameOK {
				t.Fatalf("%q matches %q, but its leftmost match is at %v", pattern, name, loc)
			}
			if _, hasMC := body[FieldMatchingConditions]; nameOK && !ok && name != "" && id != "" && !hasMC &&
				onapName == "" && configName == "" && len(attrMap) == 0 {
				t.Fatalf("%q does not match %q without other conditions, though its leftmost match is at %v: %q", pattern, name, loc, reasons)
			}
		}

		filters := map[string]*CompiledFilter{"f": cf}
		for key, p := range map[string]string{"g": other, "h": regexp.QuoteMeta(name), "i": pattern + "x", "j": ".*"} {
			g, err := CompileFilter(Filter{PolicyName: p, OnapName: onapName, ConfigName: configName, ConfigAttributes: attrMap})
			if err == nil {
				filters[key] = g
			}
		}
		if bare, err := CompileFilter(Filter{PolicyName: pattern}); err == nil {
			filters["k"] = bare
		}
		ix := NewIndex()
		for _, k := range slices.Sorted(maps.Keys(filters)) {
			ix.Add(k, filters[k])
		}
		requireIndexAgrees(t, ix, filters, body)
		if n := len(pattern) + len(other) + len(onapName) + len(configName) + len(attrs) + len(name) + len(conditions); n <= fuzzSmallInput {
			// Measured on a second round: the first one also sets up
			// each expression's matching machines.
			before := heapAllocs()
			cf.Match(body)
			ix.Matches(body)
			if got := heapAllocs() - before; got > fuzzAllocLimit {
				t.Fatalf("matching %d bytes of filter and body allocated %d bytes, want at most %d", n, got, fuzzAllocLimit)
			}
		}
		if got := slices.Contains(ix.Matches(body), "f"); got != ok {
			t.Fatalf("Index says %v for the filter, Match %v", got, ok)
		}
		for _, k := range []string{"f", "j"} {
			ix.Remove(k)
			delete(filters, k)
			requireIndexAgrees(t, ix, filters, body)
		}

		// The header of the body matches as the body does.
		mc, isObject := body[FieldMatchingConditions].(map[string]any)
		if _, present := body[FieldMatchingConditions]; present && !isObject {
			return
		}
		canon := noConditions
		if isObject {
			data, err := encodeCanonical(mc)
			if err != nil {
				t.Fatal(err)
			}
			canon = string(data)
		}
		hb, err := Header{PolicyName: name, PolicyVersion: "1", MatchingConditions: canon}.Matchable()
		if err != nil {
			t.Fatalf("Matchable of %s: %v", canon, err)
		}
		if got, r := cf.Match(hb); got != ok {
			t.Fatalf("the header matches %v, the body %v: %q", got, ok, r)
		}
	})
}

func requireIndexAgrees(t *testing.T, ix *Index, filters map[string]*CompiledFilter, b Body) {
	t.Helper()
	if got, want := ix.Matches(b), bruteForce(filters, b); !slices.Equal(got, want) {
		var pats []string
		for k, f := range filters {
			pats = append(pats, k+"="+f.String())
		}
		t.Fatalf("Index gives %q, Match on every filter %q\nfilters %q\nbody %v", got, want, pats, b)
	}
}
