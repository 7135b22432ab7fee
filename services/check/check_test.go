package check

import (
	"errors"
	"strings"
	"testing"
)

func TestID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want string // "" when accepted, else a part of the message
	}{
		{"c1", ""},
		{"DCAE.Config_VM-1:a", ""},
		{"a.b.c", ""},
		{strings.Repeat("x", MaxIDBytes), ""},
		{"", "id is missing"},
		{strings.Repeat("x", MaxIDBytes+1), "id is 256 bytes long; the limit is 255"},
		{"..", `".." is not allowed`},
		{"a..b", `id "a..b": ".." is not allowed`},
		{"..etc", `".." is not allowed`},
		{"a.", ""},
		{"a/b", `character '/' at byte 1 is not allowed`},
		{"a b", `character ' ' at byte 1 is not allowed`},
		{"a\nb", `character '\n' at byte 1 is not allowed`},
		{"é", `character 'é' at byte 0 is not allowed`},
		{"a\xffb", `byte 1 (0xff) is not UTF-8`},
	} {
		err := ID("id", tc.id)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("ID(%q) = %v, want it accepted", tc.id, err)
		case tc.want != "" && err == nil:
			t.Errorf("ID(%q) accepted, want %q", tc.id, tc.want)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("ID(%q) = %v, want it to say %q", tc.id, err, tc.want)
		case tc.want != "" && !errors.Is(err, ErrBadID):
			t.Errorf("ID(%q) = %v, does not match ErrBadID", tc.id, err)
		}
	}
	if err := ID("", ""); err == nil || err.Error() != "is missing" {
		t.Errorf(`ID("", "") = %v, want "is missing" for the caller to name the id`, err)
	}
}

func TestObject(t *testing.T) {
	for in, want := range map[string]bool{
		`{}`:             true,
		` {"a":1} `:      true,
		"\n{\"a\":{}}\n": true,
		``:               false,
		`   `:            false,
		`null`:           false,
		`[]`:             false,
		`"{}"`:           false,
		`{`:              false,
		`{"a":1}x`:       false,
		`{} {}`:          false,
	} {
		if got := Object([]byte(in)); got != want {
			t.Errorf("Object(%q) = %v, want %v", in, got, want)
		}
	}
}
