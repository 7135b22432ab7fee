package testkit

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestWaitReturnsOnceTheCheckPasses(t *testing.T) {
	n := 0
	err := Wait(time.Minute, func() error {
		if n++; n < 3 {
			return fmt.Errorf("try %d", n)
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("Wait = %v after %d tries; want nil after 3", err, n)
	}
}

func TestWaitReportsTheLastError(t *testing.T) {
	n := 0
	start := time.Now()
	err := Wait(50*time.Millisecond, func() error {
		n++
		return fmt.Errorf("try %d", n)
	})
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Wait took %v past a 50ms timeout", took)
	}
	if err == nil || !errors.Is(err, ErrTimeout) || !strings.HasSuffix(err.Error(), fmt.Sprintf("try %d", n)) {
		t.Fatalf("Wait = %v after %d tries; want a timeout naming the last try", err, n)
	}
}

// fatal records what Eventually reports.
type fatal struct {
	testing.TB
	msg string
}

func (f *fatal) Helper()           {}
func (f *fatal) Fatal(args ...any) { f.msg = fmt.Sprint(args...) }

func TestEventuallyFailsWithTheLastError(t *testing.T) {
	f := &fatal{TB: t}
	Eventually(f, 20*time.Millisecond, func() error { return errors.New("the group has 1 member, want 2") })
	if !strings.Contains(f.msg, "the group has 1 member, want 2") {
		t.Fatalf("Eventually reported %q; want the last error", f.msg)
	}
}

func TestNamedAndHoldsSayWhatIsAwaited(t *testing.T) {
	err := Named("the lag at 0", func() error { return errors.New("lag 3") })()
	if err == nil || err.Error() != "the lag at 0: lag 3" {
		t.Errorf("Named: %v", err)
	}
	if err := Named("x", func() error { return nil })(); err != nil {
		t.Errorf("Named of a passing check: %v", err)
	}
	if err := Holds("both ready", func() bool { return false }, func() string { return "one ready" })(); err == nil || err.Error() != "both ready: one ready" {
		t.Errorf("Holds: %v", err)
	}
	if err := Holds("both ready", func() bool { return true })(); err != nil {
		t.Errorf("Holds of a true condition: %v", err)
	}
}
