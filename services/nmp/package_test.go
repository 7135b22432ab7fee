package nmp

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
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
	m, raw, err := ReadPackage(bytes.NewReader(good))
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
		if _, _, err := ReadPackage(bytes.NewReader(b.pkg)); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("case %d: %v, want %q", i, err, b.want)
		}
	}
}
