package edgeagent

import (
	"archive/tar"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStateSurvivesARestartAndADamagedOneIsNamed(t *testing.T) {
	dir := t.TempDir()
	s, err := LoadState(dir, "1.0.0")
	if err != nil || s.Version != "1.0.0" || s.Phase != PhaseIdle {
		t.Fatalf("new state: %+v %v", s, err)
	}
	s.Phase, s.Target, s.Failed = PhaseInstalling, "1.1.0", "0.9.0"
	if err := s.Save(dir); err != nil {
		t.Fatal(err)
	}
	again, err := LoadState(dir, "9.9.9")
	if err != nil || again.Version != "1.0.0" || again.Phase != PhaseInstalling || again.Target != "1.1.0" || again.Failed != "0.9.0" {
		t.Fatalf("reloaded: %+v %v", again, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadState(dir, "1.0.0"); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("damaged state: %v", err)
	}
}

func TestUnpackStaysInside(t *testing.T) {
	src := filepath.Join(t.TempDir(), "p.tar.gz")
	f, _ := os.Create(src)
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	_ = tw.WriteHeader(&tar.Header{Name: "../escape", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("x"))
	tw.Close()
	gz.Close()
	f.Close()
	dest := filepath.Join(t.TempDir(), "v")
	if err := unpack(src, dest); err == nil || !strings.Contains(err.Error(), "leaves the package") {
		t.Fatalf("unpack: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dest), "escape")); err == nil {
		t.Fatal("an entry was written outside the package directory")
	}
}
