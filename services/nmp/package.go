package nmp

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// Manifest is an agent package's package.json.
type Manifest struct {
	Version         string `json:"version"`
	PackagesVersion string `json:"packagesVersion,omitempty"`
	SSLVersion      string `json:"sslVersion,omitempty"`
	ConfigVersion   string `json:"configVersion,omitempty"`
}

// PackageDirs are the directories a package may hold beside package.json.
var PackageDirs = []string{"packages", "ssl", "config"}

// MaxManifestBytes bounds package.json.
const MaxManifestBytes = 64 << 10

// Bounds of an unpacked package, so a small upload cannot unpack into
// an endless one (a gzip bomb). DefaultMaxUnpackedBytes is the default
// of the limit on the decompressed size (the tar stream: headers and
// file contents); the North API, policyctl and the edge agent each take
// it as a flag.
const (
	DefaultMaxUnpackedBytes = 1 << 30
	MaxEntries              = 100_000
)

// ErrUnpackedTooLarge is a package that decompresses to more than the
// limit given to ReadPackage.
var ErrUnpackedTooLarge = errors.New("the package decompresses to more than the limit")

// countingReader fails once more than limit bytes were read.
type countingReader struct {
	r     io.Reader
	n     int64
	limit int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.limit {
		return n, fmt.Errorf("%w (%d bytes): a gzip bomb, or a package too large", ErrUnpackedTooLarge, c.limit)
	}
	return n, err
}

// ReadPackage checks an agent package (a gzipped tar) and returns its
// manifest: one package.json at the root with a semantic version (and
// semantic versions in the other fields when given), every other entry
// a regular file or directory under /packages, /ssl or /config, no
// absolute path or "..", no file given twice (unpacking would keep the
// last, which a check of the first would not have seen), and at most
// maxUnpacked bytes decompressed (DefaultMaxUnpackedBytes when not
// positive).
func ReadPackage(r io.Reader, maxUnpacked int64) (*Manifest, []byte, error) {
	if maxUnpacked <= 0 {
		maxUnpacked = DefaultMaxUnpackedBytes
	}
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, nil, fmt.Errorf("the package is not a gzipped tar: %w", err)
	}
	tr := tar.NewReader(&countingReader{r: gz, limit: maxUnpacked})
	var man *Manifest
	var raw []byte
	files := map[string]bool{}
	for entries := 0; ; entries++ {
		if entries > MaxEntries {
			return nil, nil, fmt.Errorf("the package holds more than %d entries", MaxEntries)
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, ErrUnpackedTooLarge) {
			return nil, nil, err
		}
		if err != nil {
			return nil, nil, fmt.Errorf("the package is not a valid tar.gz: %w", err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if name == "" || name == "." {
			continue
		}
		if path.IsAbs(h.Name) || strings.Contains("/"+name+"/", "/../") {
			return nil, nil, fmt.Errorf("the package entry %q leaves the package (absolute or ..)", h.Name)
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir {
			return nil, nil, fmt.Errorf("the package entry %q is not a regular file or directory", h.Name)
		}
		clean := strings.TrimSuffix(path.Clean(name), "/")
		if h.Typeflag == tar.TypeReg {
			if files[clean] {
				return nil, nil, fmt.Errorf("the package holds %s twice; unpacking would keep only the last: give each file once", clean)
			}
			files[clean] = true
		}
		if clean == "package.json" {
			if h.Typeflag != tar.TypeReg {
				return nil, nil, fmt.Errorf("package.json is not a file")
			}
			raw, err = io.ReadAll(io.LimitReader(tr, MaxManifestBytes+1))
			if errors.Is(err, ErrUnpackedTooLarge) {
				return nil, nil, err
			}
			if err != nil {
				return nil, nil, fmt.Errorf("read package.json: %w", err)
			}
			if len(raw) > MaxManifestBytes {
				return nil, nil, fmt.Errorf("package.json is over %d bytes", MaxManifestBytes)
			}
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			man = &Manifest{}
			if err := dec.Decode(man); err != nil {
				return nil, nil, fmt.Errorf("package.json: want {\"version\", \"packagesVersion\", \"sslVersion\", \"configVersion\"}: %w", err)
			}
			continue
		}
		top, _, _ := strings.Cut(clean, "/")
		ok := false
		for _, d := range PackageDirs {
			ok = ok || top == d
		}
		if !ok {
			return nil, nil, fmt.Errorf("the package entry %q is outside /packages, /ssl and /config", h.Name)
		}
	}
	if man == nil {
		return nil, nil, fmt.Errorf("the package has no package.json at its root")
	}
	if man.Version == "" {
		return nil, nil, fmt.Errorf("package.json has no version")
	}
	for _, f := range []struct{ what, v string }{{"version", man.Version}, {"packagesVersion", man.PackagesVersion}, {"sslVersion", man.SSLVersion}, {"configVersion", man.ConfigVersion}} {
		if f.v == "" {
			continue
		}
		if _, err := ParseSemver(f.v); err != nil {
			return nil, nil, fmt.Errorf("package.json %s: %w", f.what, err)
		}
	}
	return man, raw, nil
}

// BuildPackage writes an agent package: package.json from the manifest
// and the files (paths under packages/, ssl/ or config/), as a tar.gz.
func BuildPackage(m Manifest, files map[string][]byte) ([]byte, error) {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	entries := [][2]string{{"package.json", string(raw)}}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		entries = append(entries, [2]string{n, string(files[n])})
	}
	return TarGz(entries...)
}

// TarGz writes the entries ({name, content}: regular files) in order as
// a tar.gz, unchecked: names may repeat, so it also makes the packages
// ReadPackage refuses.
func TarGz(entries ...[2]string) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e[0], Mode: 0o644, Size: int64(len(e[1])), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(tw, e[1]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
