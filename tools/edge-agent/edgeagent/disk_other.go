//go:build !linux

package edgeagent

import "errors"

// freeBytes is not known here: the precheck skips the disk check.
func freeBytes(string) (uint64, error) {
	return 0, errors.New("free disk space is not known on this system")
}
