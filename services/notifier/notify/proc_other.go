//go:build !unix

package notify

import "os/exec"

// killProcessGroup leaves the default: the timeout kills the script only.
func killProcessGroup(*exec.Cmd) {}
