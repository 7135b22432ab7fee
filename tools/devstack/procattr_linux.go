package devstack

import "syscall"

// childProcAttr puts the agent in its own process group, so a Ctrl-C in the
// terminal reaches only the parent (which stops the agent after draining the
// stages), and kills the agent if the parent dies without stopping it.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
