package nmp

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"
)

func rawTarGz(t *testing.T, entries map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for n, c := range entries {
		typ := byte(tar.TypeReg)
		if strings.HasPrefix(c, "link:") {
			typ = tar.TypeSymlink
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(c)), Typeflag: typ, Linkname: strings.TrimPrefix(c, "link:")}); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			tw.Write([]byte(c))
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

func TestReadPackage(t *testing.T) {
	good, err := BuildPackage(Manifest{Version: "1.1.0", ConfigVersion: "2.0.0"}, map[string][]byte{"packages/agent.deb": []byte("deb"), "config/agent.cfg": []byte("X=1")})
	if err != nil {
		t.Fatal(err)
	}
	m, raw, err := ReadPackage(bytes.NewReader(good), 0)
	if err != nil || m.Version != "1.1.0" || m.ConfigVersion != "2.0.0" || !bytes.Contains(raw, []byte(`"1.1.0"`)) {
		t.Fatalf("%+v %v", m, err)
	}
	bad := []struct {
		pkg  []byte
		want string
	}{
		{[]byte("not gzip"), "not a gzipped tar"},
		{rawTarGz(t, map[string]string{"packages/a": "x"}), "no package.json"},
		{rawTarGz(t, map[string]string{"package.json": `{"version":"1.1"}`}), "semantic version"},
		{rawTarGz(t, map[string]string{"package.json": `{}`}), "no version"},
		{rawTarGz(t, map[string]string{"package.json": `{"version":"1.0.0","sslVersion":"x"}`}), "sslVersion"},
		{rawTarGz(t, map[string]string{"package.json": `{"version":"1.0.0","extra":1}`}), "unknown field"},
		{rawTarGz(t, map[string]string{"package.json": `{"version":"1.0.0"}`, "bin/x": "x"}), "outside /packages"},
		{rawTarGz(t, map[string]string{"package.json": `{"version":"1.0.0"}`, "config/../../x": "x"}), "leaves the package"},
		{rawTarGz(t, map[string]string{"package.json": `{"version":"1.0.0"}`, "/etc/x": "x"}), "leaves the package"},
		{rawTarGz(t, map[string]string{"package.json": `{"version":"1.0.0"}`, "config/l": "link:/etc/passwd"}), "not a regular file"},
	}
	for i, b := range bad {
		if _, _, err := ReadPackage(bytes.NewReader(b.pkg), 0); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("case %d: %v, want %q", i, err, b.want)
		}
	}
}

// tarGzEntries is a tar.gz of the entries in order (rawTarGz's map has
// no order and no repeated names).
func tarGzEntries(t *testing.T, entries ...[2]string) []byte {
	t.Helper()
	b, err := TarGz(entries...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A second package.json (checked: the first; unpacked: the last) and
// any file given twice are refused.
func TestReadPackageRefusesRepeatedFiles(t *testing.T) {
	for name, pkg := range map[string][]byte{
		"package.json twice": tarGzEntries(t, [2]string{"package.json", `{"version":"1.0.0"}`}, [2]string{"./package.json", `{"version":"9.9.9"}`}),
		"a file twice": tarGzEntries(t, [2]string{"package.json", `{"version":"1.0.0"}`}, [2]string{"packages/a.deb", "good"},
			[2]string{"packages/a.deb", "evil"}),
	} {
		if _, _, err := ReadPackage(bytes.NewReader(pkg), 0); err == nil || !strings.Contains(err.Error(), "twice") {
			t.Errorf("%s: %v, want it refused as twice", name, err)
		}
	}
}

// A small gzip that decompresses past the limit (a gzip bomb) is refused
// with ErrUnpackedTooLarge, and the same package passes under a limit
// that fits it.
func TestReadPackageRefusesGzipBomb(t *testing.T) {
	const limit = 1 << 20
	bomb := tarGzEntries(t, [2]string{"package.json", `{"version":"1.0.0"}`}, [2]string{"packages/zeros", strings.Repeat("\x00", 4*limit)})
	if len(bomb) > limit/50 {
		t.Fatalf("the bomb is %d bytes; it should be small", len(bomb))
	}
	_, _, err := ReadPackage(bytes.NewReader(bomb), limit)
	if !errors.Is(err, ErrUnpackedTooLarge) || !strings.Contains(err.Error(), "1048576") {
		t.Fatalf("bomb under a %d-byte limit: %v, want ErrUnpackedTooLarge naming the limit", limit, err)
	}
	if _, _, err := ReadPackage(bytes.NewReader(bomb), 8*limit); err != nil {
		t.Fatalf("the same package under an 8 MiB limit: %v", err)
	}
	if DefaultMaxUnpackedBytes >= 3<<30 {
		t.Errorf("DefaultMaxUnpackedBytes is %d: a package decompressing to 3 GiB passes", DefaultMaxUnpackedBytes)
	}
}
