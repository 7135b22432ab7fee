//go:build !unix

package agentnotifier

import "os/exec"

// killProcessGroup leaves the default: the timeout kills the script only.
func killProcessGroup(*exec.Cmd) {}
