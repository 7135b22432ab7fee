//go:build linux

package agentnotifier

import (
	"bytes"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/policyflow/policyflow/services/consulkv"
)

// prepareScript runs the script in a process group of its own, killed
// whole at the timeout, so children the script started do not outlive
// it, and has the kernel kill the script (SIGKILL) when the notifier
// dies: a notifier killed in the middle leaves no script running on.
// Children of the script are found and stopped by the notifier that
// takes the claim over (stopOrphans).
func prepareScript(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

// runScriptCmd runs cmd on a locked OS thread: the kernel's parent-death
// signal fires when the thread that forked the script ends, not the
// process, and Go ends a thread when a goroutine locked to it exits.
// Held until the script ended, the thread outlives it.
func runScriptCmd(cmd *exec.Cmd) error {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	return cmd.Run()
}

// thisRunner names this process in the claims it writes.
func thisRunner() *consulkv.Runner {
	host, _ := os.Hostname()
	r := &consulkv.Runner{Host: host, PID: os.Getpid()}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		r.BootID = strings.TrimSpace(string(b))
	}
	r.PIDNS, _ = os.Readlink("/proc/self/ns/pid")
	_, r.Start, _ = procStat(r.PID)
	return r
}

// procStat is the state letter of process pid and when it started, in
// clock ticks since boot (fields 3 and 22 of /proc/<pid>/stat).
func procStat(pid int) (state byte, start uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// The command name (field 2) may hold spaces: count after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, false
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return f[0][0], start, err == nil
}

// visible reports whether r's processes can be seen from here: the same
// host, boot and PID namespace.
func visible(r, self *consulkv.Runner) bool {
	return r != nil && self != nil && r.BootID != "" && r.Host == self.Host && r.BootID == self.BootID && r.PIDNS == self.PIDNS
}

// runnerGone reports whether r is seen, from here, not to run any more:
// it is visible and no process with its PID and start time lives.
func runnerGone(r, self *consulkv.Runner) bool {
	if !visible(r, self) {
		return false
	}
	state, start, ok := procStat(r.PID)
	switch {
	case !ok:
		return true
	case r.Start != 0 && start != r.Start:
		return true // the PID is another process's now
	}
	return state == 'Z' || state == 'X'
}

// stopOrphans kills (SIGKILL) every process left running by the notifier
// run owner for component, with its process group: the scripts it
// started carry both in their environment (EnvRun, EnvComponentID), and
// so do their children unless they cleared it. It waits until none is
// left and reports how many it killed; ok is false when some still ran
// at the deadline.
func stopOrphans(owner, component string, deadline time.Duration) (killed int, ok bool) {
	want := [][]byte{[]byte(EnvRun + "=" + owner), []byte(EnvComponentID + "=" + component)}
	find := func() []int {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return nil
		}
		var out []int
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err != nil || len(env) == 0 { // gone, not ours, or a zombie
				continue
			}
			all := true
			for _, w := range want {
				all = all && bytes.Contains(append([]byte{0}, env...), append(append([]byte{0}, w...), 0))
			}
			if all {
				out = append(out, pid)
			}
		}
		return out
	}
	end := time.Now().Add(deadline)
	for {
		pids := find()
		if len(pids) == 0 {
			return killed, true
		}
		if time.Now().After(end) {
			return killed, false
		}
		for _, pid := range pids {
			if pg, err := syscall.Getpgid(pid); err == nil && pg == pid {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}
