package auth

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// File is the tokens file, JSON:
//
//	{"tokens": [
//	  {"name": "ops-alice", "role": "operator", "sha256": "<hex SHA-256 of the token>"},
//	  {"name": "billing-deployer", "role": "tenant", "tenant": "billing", "sha256": "..."}
//	]}
//
// It holds no token, only each token's SHA-256, so reading it does not
// let anyone call the API. A plain hash is enough because the tokens are
// random with 256 bits of entropy (NewToken): there is nothing to guess.
type File struct {
	Tokens []Entry `json:"tokens"`
}

// Entry is one token of the file.
type Entry struct {
	// Name identifies the token's holder in logs, metrics and rate limits.
	Name string `json:"name"`
	Role Role   `json:"role"`
	// Tenant scopes a token of the tenant role; the other roles have none.
	Tenant string `json:"tenant,omitempty"`
	// SHA256 is the hex SHA-256 of the token (Hash).
	SHA256 string `json:"sha256"`
}

// Check says what is wrong with the file: a missing or repeated name, an
// unknown role, a tenant on a role that has none (or none on the tenant
// role), a hash that is not 64 hex digits, or one hash listed twice.
func (f File) Check() error {
	names := map[string]int{}
	sums := map[string]int{}
	for i, e := range f.Tokens {
		where := fmt.Sprintf("tokens[%d]", i)
		if e.Name == "" {
			return fmt.Errorf("%s has no name; give every token a name (it shows in logs)", where)
		}
		where = fmt.Sprintf("tokens[%d] (%s)", i, e.Name)
		if j, dup := names[e.Name]; dup {
			return fmt.Errorf("%s: tokens[%d] has the same name; give every token its own", where, j)
		}
		names[e.Name] = i
		if !e.Role.Valid() {
			return fmt.Errorf("%s: role %q is unknown; use one of %s", where, e.Role, roleList())
		}
		switch {
		case e.Role == RoleTenant && e.Tenant == "":
			return fmt.Errorf("%s: role tenant needs the tenant the token is scoped to", where)
		case e.Role != RoleTenant && e.Role != RoleAgent && e.Tenant != "":
			return fmt.Errorf("%s: role %s takes no tenant (only roles tenant and agent are scoped to one)", where, e.Role)
		}
		sum := strings.ToLower(e.SHA256)
		if b, err := hex.DecodeString(sum); err != nil || len(b) != 32 {
			return fmt.Errorf("%s: sha256 must be the 64 hex digits of the token's SHA-256 (printf %%s \"$TOKEN\" | sha256sum), got %q", where, e.SHA256)
		}
		if j, dup := sums[sum]; dup {
			return fmt.Errorf("%s: tokens[%d] has the same sha256; one token has one entry", where, j)
		}
		sums[sum] = i
	}
	return nil
}

func roleList() string {
	s := make([]string, len(Roles))
	for i, r := range Roles {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

// Set builds the lookup set of a checked file.
func (f File) Set() (*Set, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	s := &Set{entries: make([]setEntry, 0, len(f.Tokens))}
	for _, e := range f.Tokens {
		b, _ := hex.DecodeString(strings.ToLower(e.SHA256))
		se := setEntry{p: Principal{Name: e.Name, Role: e.Role, Tenant: e.Tenant}}
		copy(se.sum[:], b)
		s.entries = append(s.entries, se)
	}
	return s, nil
}

// Put adds e, or replaces the entry of the same name.
func (f *File) Put(e Entry) {
	for i := range f.Tokens {
		if f.Tokens[i].Name == e.Name {
			f.Tokens[i] = e
			return
		}
	}
	f.Tokens = append(f.Tokens, e)
}

// fileShape is the shape of a tokens file, as errors show it.
const fileShape = `JSON {"tokens": [{"name", "role", "tenant", "sha256"}]}`

// entryKeys are the keys of an entry of the file, exactly.
var entryKeys = []string{"name", "role", "tenant", "sha256"}

// Parse reads a tokens file's JSON. The file must mean what it says to
// whoever reads it: unknown fields are refused, so a misspelt "tenant"
// does not silently widen a token, and so are a key given twice (JSON
// decoding would keep the last one) and a key spelt in another case
// ("Role" would set role).
func Parse(data []byte) (File, error) {
	var f File
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return File{}, fmt.Errorf("not a tokens file (%s): %w", fileShape, err)
	}
	if dec.More() {
		return File{}, errors.New("not a tokens file: more data after the JSON object")
	}
	if err := checkKeys(data); err != nil {
		return File{}, fmt.Errorf("not a tokens file (%s): %w", fileShape, err)
	}
	return f, f.Check()
}

// checkKeys refuses a key given twice in an object, and a key other than
// "tokens" at the top or other than entryKeys in an entry, compared
// case-sensitively. data is one JSON value that decoded as a File.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	return objectKeys(dec, "the top level", []string{"tokens"}, func(key string) error {
		tok, err := dec.Token()
		if err != nil || tok != json.Delim('[') {
			return err // null: no tokens
		}
		for i := 0; dec.More(); i++ {
			where := fmt.Sprintf("tokens[%d]", i)
			if err := objectKeys(dec, where, entryKeys, func(string) error {
				var v json.RawMessage
				return dec.Decode(&v)
			}); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	})
}

// objectKeys reads the object (or null) next in dec, checking that its
// keys are distinct and among allowed; value reads the value of each key.
func objectKeys(dec *json.Decoder, where string, allowed []string, value func(key string) error) error {
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return err
	}
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := kt.(string)
		switch {
		case seen[key]:
			return fmt.Errorf("%s: the key %q is given twice; give it once", where, key)
		case !slices.Contains(allowed, key):
			return fmt.Errorf("%s: the key %q is not one of %s (keys are case-sensitive)", where, key, strings.Join(allowed, ", "))
		}
		seen[key] = true
		if err := value(key); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	return err
}

// ReadFile reads and checks the tokens file at path.
func ReadFile(path string) (File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("read tokens file: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return File{}, fmt.Errorf("tokens file %s: %w", path, err)
	}
	return f, nil
}

// WriteFile writes f to path with mode 0600, through a temporary file
// renamed into place, so a Store never reads half a file.
func WriteFile(path string, f File) error {
	if err := f.Check(); err != nil {
		return fmt.Errorf("write tokens file %s: %w", path, err)
	}
	if f.Tokens == nil {
		f.Tokens = []Entry{}
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("write tokens file %s: %w", path, err)
	}
	return WriteSecretFile(path, append(data, '\n'))
}

// WriteSecretFile writes data to path with mode 0600 through a renamed
// temporary file in the same directory (a token, a tokens file).
func WriteSecretFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
