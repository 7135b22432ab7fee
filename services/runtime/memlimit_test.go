package runtime

import (
	"math"
	"os"
	"path/filepath"
	rtdebug "runtime/debug"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"483183820": 483183820, "460MiB": 460 << 20, "512Mi": 512 << 20, "1GiB": 1 << 30, "1.5G": 1_500_000_000, "64 KiB": 64 << 10, "100B": 100,
	} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-5MiB", "lots", "5TB", "1e400", "NaN"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, got)
		}
	}
}

func TestCheckMemoryLimitSaysWhatItTakes(t *testing.T) {
	for _, ok := range []string{"auto", "off", "460MiB"} {
		if err := CheckMemoryLimit(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	err := CheckMemoryLimit("half")
	if err == nil || !strings.Contains(err.Error(), "--memory-limit") || !strings.Contains(err.Error(), "auto") {
		t.Errorf("CheckMemoryLimit(half) = %v, want an error naming the flag and its choices", err)
	}
}

// TestApplyMemoryLimit sets the runtime's soft limit from a size and from
// a container's cgroup limit, and leaves it alone with off or no limit.
func TestApplyMemoryLimit(t *testing.T) {
	before := rtdebug.SetMemoryLimit(-1)
	t.Cleanup(func() { rtdebug.SetMemoryLimit(before) })
	files := cgroupMemoryFiles
	t.Cleanup(func() { cgroupMemoryFiles = files })
	t.Setenv("GOMEMLIMIT", "")
	os.Unsetenv("GOMEMLIMIT")

	if n, _, err := ApplyMemoryLimit("460MiB"); err != nil || n != 460<<20 || rtdebug.SetMemoryLimit(-1) != 460<<20 {
		t.Errorf("460MiB: set %d (%v), runtime says %d", n, err, rtdebug.SetMemoryLimit(-1))
	}

	dir := t.TempDir()
	limitFile := filepath.Join(dir, "memory.max")
	cgroupMemoryFiles = []string{limitFile}
	if err := os.WriteFile(limitFile, []byte("536870912\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rtdebug.SetMemoryLimit(math.MaxInt64)
	n, why, err := ApplyMemoryLimit("auto")
	share := memoryLimitShare
	if want := int64(float64(512<<20) * share); err != nil || n != want || rtdebug.SetMemoryLimit(-1) != want {
		t.Errorf("auto under a 512 MiB container: set %d (%s, %v), want %d", n, why, err, want)
	}

	for _, content := range []string{"max\n"} {
		if err := os.WriteFile(limitFile, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		rtdebug.SetMemoryLimit(math.MaxInt64)
		if n, why, _ := ApplyMemoryLimit("auto"); n != 0 || rtdebug.SetMemoryLimit(-1) != math.MaxInt64 {
			t.Errorf("auto with no container limit set %d (%s)", n, why)
		}
	}
	if n, why, _ := ApplyMemoryLimit("off"); n != 0 || why != "off" {
		t.Errorf("off set %d (%s)", n, why)
	}
	t.Setenv("GOMEMLIMIT", "300MiB")
	if err := os.WriteFile(limitFile, []byte("536870912\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, why, _ := ApplyMemoryLimit("auto"); n != 0 || !strings.Contains(why, "GOMEMLIMIT") {
		t.Errorf("auto with GOMEMLIMIT set: set %d (%s), want GOMEMLIMIT left to the runtime", n, why)
	}
}

// TestApplyGCPercent sets a stage's own garbage collector target, and
// leaves Go's default when the stage has none or GOGC is set.
func TestApplyGCPercent(t *testing.T) {
	before := rtdebug.SetGCPercent(100)
	t.Cleanup(func() { rtdebug.SetGCPercent(before) })
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")

	if pct, why := ApplyGCPercent(30); pct != 30 || rtdebug.SetGCPercent(100) != 30 {
		t.Errorf("a stage's 30: set %d (%s)", pct, why)
	}
	if pct, _ := ApplyGCPercent(0); pct != 0 || rtdebug.SetGCPercent(100) != 100 {
		t.Errorf("no stage target: set %d, want Go's default left", pct)
	}
	t.Setenv("GOGC", "200")
	if pct, why := ApplyGCPercent(30); pct != 0 || !strings.Contains(why, "GOGC") || rtdebug.SetGCPercent(100) != 100 {
		t.Errorf("with GOGC set: set %d (%s), want GOGC left to the runtime", pct, why)
	}
}
