//go:build !linux

package edgeagent

import "os/exec"

// bindToAgent does nothing where the system cannot tie a child's life to
// its parent's.
func bindToAgent(*exec.Cmd) {}
