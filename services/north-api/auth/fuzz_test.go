package auth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// FuzzParse reads any bytes as a tokens file. What Parse accepts passes
// Check, makes a Set of every entry, is written and read back unchanged
// (as policyctl token does), and means what it says to someone reading
// it: no key is given twice and every key is one of the file's field
// names exactly, so the entry the store uses is the one a reader sees.
// Seeds: the files of the auth tests; findings are committed under
// testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	sum := Hash("t")
	for _, s := range []string{
		`{"tokens": [{"role": "admin", "sha256": "` + sum + `"}]}`,
		`{"tokens": [{"name": "a", "role": "root", "sha256": "` + sum + `"}]}`,
		`{"tokens": [{"name": "a", "role": "tenant", "sha256": "` + sum + `"}]}`,
		`{"tokens": [{"name": "a", "role": "operator", "tenant": "t", "sha256": "` + sum + `"}]}`,
		`{"tokens": [{"name": "a", "role": "admin", "sha256": "abc"}]}`,
		`{"tokens": [{"name": "a", "role": "admin", "sha256": "` + sum + `"}, {"name": "a", "role": "admin", "sha256": "` + Hash("u") + `"}]}`,
		`{"tokens": [{"name": "a", "role": "admin", "sha256": "` + sum + `"}, {"name": "b", "role": "admin", "sha256": "` + strings.ToUpper(sum) + `"}]}`,
		`{"tokens": [{"name": "a", "role": "tenant", "tennant": "t", "sha256": "` + sum + `"}]}`,
		`{"tokens": [
			{"name": "ops", "role": "operator", "sha256": "` + Hash("tok-ops") + `"},
			{"name": "billing", "role": "tenant", "tenant": "billing", "sha256": "` + strings.ToUpper(Hash("tok-billing")) + `"}]}`,
		`{"tokens": []}`,
		`{}`,
		`null`,
		`{"tokens": [{"name": "a", "role": "read-only", "sha256": "` + sum + `"}]} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		if err := file.Check(); err != nil {
			t.Fatalf("Parse accepted a file Check refuses: %v", err)
		}
		set, err := file.Set()
		if err != nil || set.Len() != len(file.Tokens) {
			t.Fatalf("Set of an accepted file: %v", err)
		}
		if err := readsAsWritten(data); err != nil {
			t.Fatalf("Parse accepted %q, in which %v", data, err)
		}
		out, err := json.MarshalIndent(file, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("the accepted file as written is refused: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back, file) {
			t.Fatalf("written and read back, the file differs:\nfirst %+v\nagain %+v", file, back)
		}
	})
}

// readsAsWritten says where a tokens file does not read as Parse should
// read it: a key given twice in an object, or a key that is not exactly
// "tokens" at the top or one of an entry's field names.
func readsAsWritten(data []byte) error {
	allowed := map[string][]string{"": {"tokens"}, "tokens[]": {"name", "role", "tenant", "sha256"}}
	dec := json.NewDecoder(bytes.NewReader(data))
	var value func(path string) error
	value = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				k := kt.(string)
				if seen[k] {
					return fmt.Errorf("the key %q appears twice in the object at %q", k, path)
				}
				seen[k] = true
				if keys, ok := allowed[path]; ok && !slices.Contains(keys, k) {
					return fmt.Errorf("the key %q at %q is none of %q", k, path, keys)
				}
				if err := value(strings.TrimPrefix(path+"."+k, ".")); err != nil {
					return err
				}
			}
		case json.Delim('['):
			for dec.More() {
				if err := value(path + "[]"); err != nil {
					return err
				}
			}
		default:
			return nil
		}
		_, err = dec.Token() // the closing delimiter
		return err
	}
	return value("")
}
