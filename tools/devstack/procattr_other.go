//go:build !linux

package devstack

import "syscall"

// childProcAttr puts the agent in its own process group, so a Ctrl-C in the
// terminal reaches only the parent, which stops the agent after draining.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
