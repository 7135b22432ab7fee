package devstack

import (
	"strings"
	"testing"
)

func TestLockDirRefusesASecondHolder(t *testing.T) {
	dir := t.TempDir()
	unlock, err := LockDir(dir)
	if err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if _, err := LockDir(dir); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second lock while the first is held: %v, want an error naming another process", err)
	}
	unlock()
	unlock2, err := LockDir(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}
