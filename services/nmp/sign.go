package nmp

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/policyflow/policyflow/services/north-api/auth"
)

// Agent packages are signed by their publisher with an ed25519 key; an
// agent runs only a package whose signature one of its trusted public
// keys verifies. The signature is over the package statement: the
// package's version and the SHA-256 of its tar.gz, so a signed package
// cannot be passed off as another version, nor its file changed.

// PackageStatement is what a package's signature signs.
func PackageStatement(version, sha256Hex string) []byte {
	return []byte("policyflow agent package\nversion " + version + "\nsha256 " + strings.ToLower(sha256Hex) + "\n")
}

// KeyID names a public key: the hex of the first 8 bytes of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// SignPackage signs the statement of a package with key and returns the
// signature (base64) and the key's id.
func SignPackage(key ed25519.PrivateKey, version, sha256Hex string) (string, string) {
	sig := ed25519.Sign(key, PackageStatement(version, sha256Hex))
	return base64.StdEncoding.EncodeToString(sig), KeyID(key.Public().(ed25519.PublicKey))
}

// ErrUnsigned is a package that carries no signature.
var ErrUnsigned = errors.New("the package is not signed")

// ErrBadSignature is a package whose signature no trusted key verifies.
var ErrBadSignature = errors.New("the package's signature is not one of a trusted key")

// CheckSignature says whether sig (base64, as SignPackage makes it) is a
// trusted key's signature of the statement of the package of that
// version and SHA-256.
func CheckSignature(trusted []ed25519.PublicKey, version, sha256Hex, sig string) error {
	if sig == "" {
		return fmt.Errorf("package %s: %w; publish it with policyctl agentpackage publish --key", version, ErrUnsigned)
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return fmt.Errorf("package %s: %w (the signature is not %d base64 bytes)", version, ErrBadSignature, ed25519.SignatureSize)
	}
	msg := PackageStatement(version, sha256Hex)
	for _, k := range trusted {
		if ed25519.Verify(k, msg, raw) {
			return nil
		}
	}
	return fmt.Errorf("package %s (sha256 %s): %w (%d trusted)", version, sha256Hex, ErrBadSignature, len(trusted))
}

// Key file PEM block types.
const (
	pemPrivateKey = "PRIVATE KEY"
	pemPublicKey  = "PUBLIC KEY"
)

// NewSigningKey makes an ed25519 key pair as PEM: the private key
// (PKCS #8) and the public key (PKIX), as openssl writes them.
func NewSigningKey() (private, public []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("make a signing key: %w", err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, fmt.Errorf("make a signing key: %w", err)
	}
	pk, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("make a signing key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: p8}), pem.EncodeToMemory(&pem.Block{Type: pemPublicKey, Bytes: pk}), nil
}

// WriteSigningKey makes a key pair (NewSigningKey) and writes the
// private key to path (mode 0600) and the public key, for the agents'
// --trusted-key, to path.pub. It returns the public key.
func WriteSigningKey(path string) (ed25519.PublicKey, error) {
	priv, pub, err := NewSigningKey()
	if err != nil {
		return nil, err
	}
	if err := auth.WriteSecretFile(path, priv); err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	if err := os.WriteFile(path+".pub", pub, 0o644); err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	keys, err := ParseTrustedKeys(pub)
	if err != nil {
		return nil, err
	}
	return keys[0], nil
}

// ParseSigningKey reads an ed25519 private key from PEM (PKCS #8).
func ParseSigningKey(data []byte) (ed25519.PrivateKey, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != pemPrivateKey {
		return nil, fmt.Errorf("not a PEM %q block (make one with policyctl agentpackage keygen)", pemPrivateKey)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key is a %T, not ed25519", k)
	}
	return ek, nil
}

// ParseTrustedKeys reads one or more ed25519 public keys from PEM (PKIX
// "PUBLIC KEY" blocks, one after the other).
func ParseTrustedKeys(data []byte) ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != pemPublicKey {
			return nil, fmt.Errorf("a PEM %q block where a %q was expected", b.Type, pemPublicKey)
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("public key: %w", err)
		}
		ek, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("public key is a %T, not ed25519", k)
		}
		out = append(out, ek)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no PEM %q block (the .pub file of policyctl agentpackage keygen)", pemPublicKey)
	}
	return out, nil
}
