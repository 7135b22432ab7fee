// Package testkit holds test helpers shared by the tests of every module:
// the services' own, the integration suites and the tools'. It is not
// under services/internal so that the integration and tools modules can
// import it too; only tests import it.
package testkit

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// Poll bounds: a check is tried at once, then after 10 ms, the pause
// doubling up to 250 ms.
const (
	firstPause = 10 * time.Millisecond
	maxPause   = 250 * time.Millisecond
)

// Eventually calls check until it returns nil, and fails the test when
// timeout passes first, with the last error check returned: what was
// still not so.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	if err := Wait(timeout, check); err != nil {
		t.Fatal(err)
	}
}

// Wait calls check until it returns nil and returns nil, or returns the
// last error check returned once timeout has passed (saying it timed
// out). It serves helpers that report in their own way, and goroutines
// that must not call t.Fatal.
func Wait(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	pause := firstPause
	for {
		err := check()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return &TimeoutError{After: timeout, Last: err}
		}
		time.Sleep(min(pause, max(time.Until(deadline), 0)))
		pause = min(2*pause, maxPause)
	}
}

// TimeoutError is Wait's error: the last one check returned before
// timeout passed.
type TimeoutError struct {
	After time.Duration
	Last  error
}

func (e *TimeoutError) Error() string {
	return "still not so after " + e.After.String() + ": " + e.Last.Error()
}

func (e *TimeoutError) Unwrap() error { return e.Last }

// Is makes errors.Is(err, ErrTimeout) true of every TimeoutError.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// ErrTimeout matches (errors.Is) every error Wait returns on a timeout.
var ErrTimeout = errors.New("timed out")

// Named prefixes check's errors with what is awaited, for Eventually.
func Named(what string, check func() error) func() error {
	return func() error {
		if err := check(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
}

// Holds turns a condition into a check for Eventually: its error names
// what is awaited and, when describe is given, what describe says of the
// state seen.
func Holds(what string, cond func() bool, describe ...func() string) func() error {
	return func() error {
		if cond() {
			return nil
		}
		if len(describe) > 0 {
			return fmt.Errorf("%s: %s", what, describe[0]())
		}
		return errors.New(what)
	}
}
