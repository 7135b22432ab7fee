//go:build !linux

package agentnotifier

import (
	"os"
	"os/exec"
	"time"

	"github.com/policyflow/policyflow/services/consulkv"
)

// prepareScript leaves the default: the timeout kills the script only.
// Without the parent-death signal of Linux, a script outlives a notifier
// that died; the claim's lease keeps it from being run again meanwhile.
func prepareScript(*exec.Cmd) {}

func runScriptCmd(cmd *exec.Cmd) error { return cmd.Run() }

// thisRunner names this process by host and PID only: no other notifier
// can tell whether it still runs, so its claims are held for their lease.
func thisRunner() *consulkv.Runner {
	host, _ := os.Hostname()
	return &consulkv.Runner{Host: host, PID: os.Getpid()}
}

// visible is false: without /proc no notifier sees another's processes.
func visible(_, _ *consulkv.Runner) bool { return false }

func runnerGone(_, _ *consulkv.Runner) bool { return false }

func stopOrphans(string, string, time.Duration) (int, bool) { return 0, true }
