package nmp

import (
	"errors"
	"strings"
	"testing"
)

func TestPackageSignatures(t *testing.T) {
	priv, pub, err := NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := ParseSigningKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	_, otherPub, _ := NewSigningKey()
	trusted, err := ParseTrustedKeys(append(append([]byte{}, otherPub...), pub...))
	if err != nil || len(trusted) != 2 {
		t.Fatalf("two keys: %v %v", trusted, err)
	}
	sha := strings.Repeat("ab", 32)
	sig, id := SignPackage(key, "1.1.0", sha)
	if id != KeyID(trusted[1]) {
		t.Errorf("key id %s, want %s", id, KeyID(trusted[1]))
	}
	if err := CheckSignature(trusted, "1.1.0", strings.ToUpper(sha), sig); err != nil {
		t.Fatalf("good signature: %v", err)
	}
	for what, c := range map[string]struct {
		keys         int
		version, sha string
		sig          string
		want         error
	}{
		"unsigned":         {2, "1.1.0", sha, "", ErrUnsigned},
		"another version":  {2, "2.0.0", sha, sig, ErrBadSignature},
		"another file":     {2, "1.1.0", strings.Repeat("cd", 32), sig, ErrBadSignature},
		"an untrusted key": {1, "1.1.0", sha, sig, ErrBadSignature},
		"not a signature":  {2, "1.1.0", sha, "AAAA", ErrBadSignature},
	} {
		if err := CheckSignature(trusted[:c.keys], c.version, c.sha, c.sig); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", what, err, c.want)
		}
	}
	if _, err := ParseTrustedKeys(priv); err == nil {
		t.Error("a private key was taken as a trusted public key")
	}
	if _, err := ParseSigningKey(pub); err == nil {
		t.Error("a public key was taken as a signing key")
	}
}
