package runtime

import (
	"errors"
	"fmt"
	"math"
	"os"
	rtdebug "runtime/debug"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
)

// Memory limit settings (--memory-limit).
const (
	// MemoryLimitAuto sets the Go runtime's soft memory limit to 90% of
	// the cgroup's memory limit (a container's), when there is one and
	// GOMEMLIMIT is not set.
	MemoryLimitAuto = "auto"
	// MemoryLimitOff leaves the Go runtime's default (none, or GOMEMLIMIT).
	MemoryLimitOff = "off"
	// memoryLimitShare is the share of the cgroup's limit auto sets: the
	// rest is for what the Go runtime does not count (stacks, the binary).
	memoryLimitShare = 0.9
)

// cgroupMemoryFiles are where a process finds its memory limit: cgroup v2,
// then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// ParseBytes reads a size: bytes, or a number with a unit (KiB, MiB, GiB,
// KB, MB, GB, or k, M, G as Kubernetes writes them: Ki, Mi, Gi).
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"B", 1},
	}
	mult := 1.0
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f <= 0 || math.IsInf(f*mult, 0) || f*mult > math.MaxInt64 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes, e.g. 460MiB or 483183820", s)
	}
	return int64(f * mult), nil
}

// cgroupMemoryLimit is the memory limit of the process's cgroup, if any.
func cgroupMemoryLimit() (int64, bool) {
	for _, f := range cgroupMemoryFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(data))
		n, err := strconv.ParseInt(v, 10, 64)
		// "max" (v2) or a huge number (v1) means no limit.
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// CheckMemoryLimit says what is wrong with a --memory-limit value.
func CheckMemoryLimit(v string) error {
	if v == MemoryLimitAuto || v == MemoryLimitOff {
		return nil
	}
	if _, err := ParseBytes(v); err != nil {
		return fmt.Errorf("--memory-limit: %w; or auto (90%% of the container's limit) or off", err)
	}
	return nil
}

// ApplyMemoryLimit sets the Go runtime's soft memory limit as the
// --memory-limit value v says, and returns what it set and why (for the
// start-up log); 0 when it set nothing. With a soft limit the garbage
// collector works harder as the heap nears it, instead of letting the
// heap grow to twice what is live: a stage that follows a large table
// stays inside its container's limit through bursts of garbage (a catch-up
// at 100,000 components) rather than being killed for memory.
func ApplyMemoryLimit(v string) (int64, string, error) {
	switch v {
	case MemoryLimitOff:
		return 0, "off", nil
	case MemoryLimitAuto, "":
		if os.Getenv("GOMEMLIMIT") != "" {
			return 0, "GOMEMLIMIT is set", nil
		}
		n, ok := cgroupMemoryLimit()
		if !ok {
			return 0, "no container memory limit", nil
		}
		limit := int64(float64(n) * memoryLimitShare)
		rtdebug.SetMemoryLimit(limit)
		return limit, fmt.Sprintf("90%% of the container's limit of %d bytes", n), nil
	}
	n, err := ParseBytes(v)
	if err != nil {
		return 0, "", errors.Join(err, CheckMemoryLimit(v))
	}
	rtdebug.SetMemoryLimit(n)
	return n, "--memory-limit", nil
}

// SetMemoryLimit applies o.MemoryLimit (ApplyMemoryLimit) and logs the
// limit it set.
func (o Options) SetMemoryLimit(log zerolog.Logger) error {
	limit, why, err := ApplyMemoryLimit(o.MemoryLimit)
	if err != nil {
		return err
	}
	if limit > 0 {
		log.Info().Int64("bytes", limit).Str("from", why).Msg("soft memory limit set")
	}
	return nil
}

// ApplyGCPercent sets the garbage collector's target percentage to a
// stage's own (Stage.GCPercent) and returns what it set and why (for the
// start-up log); 0 when it set nothing: the stage has none, or GOGC is
// set, which wins. Under a soft memory limit far above the live heap the
// heap grows to twice what is live between collections (GOGC=100), and
// the process to more; a lower target keeps it nearer the live heap, for
// more collections.
func ApplyGCPercent(stage int) (int, string) {
	if stage <= 0 {
		return 0, "Go's default"
	}
	if os.Getenv("GOGC") != "" {
		return 0, "GOGC is set"
	}
	rtdebug.SetGCPercent(stage)
	return stage, "the stage's own"
}

// SetGCPercent applies the stage's GCPercent (ApplyGCPercent) and logs
// what it set.
func (s Stage) SetGCPercent(log zerolog.Logger) {
	if pct, why := ApplyGCPercent(s.GCPercent); pct > 0 {
		log.Info().Int("percent", pct).Str("from", why).Msg("garbage collector target set")
	}
}
