//go:build unix

package agentnotifier

import (
	"os/exec"
	"syscall"
)

// killProcessGroup runs the script in a process group of its own and makes
// the timeout kill the whole group, so children the script started do not
// outlive it.
func killProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
