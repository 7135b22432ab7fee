package edgeagent

import (
	"os/exec"
	"syscall"
)

// bindToAgent makes the command die with the agent, so that an install
// never goes on while a restarted agent rolls back.
func bindToAgent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
