package devstack

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/policyflow/policyflow/services/runtime"
)

// StageOptions says how StartStage runs a stage binary (or the North
// API's) as a process of its own.
type StageOptions struct {
	// BinDir holds the binary Name (`make build` puts them in bin/).
	BinDir string
	Name   string
	// LogFile receives the process's output (appended).
	LogFile string
	// Kafka gives the brokers (--brokers) and the topic prefix
	// (PF_TOPIC_PREFIX).
	Kafka runtime.Kafka
	// ConsulAddr goes in the environment (PF_CONSUL_ADDR), as in a
	// deployment: the processes that use Consul read it, the others have
	// no Consul flags.
	ConsulAddr string
	// HTTPAddr is the ops listener (--http-addr); "" picks a free port.
	HTTPAddr string
	// LogLevel is --log-level; "" is warn.
	LogLevel string
	// Args are further flags.
	Args []string
}

// StageProc is a stage running as its own process, the way it is
// deployed: it can be stopped as an orchestrator does (SIGTERM, drain) or
// killed as a crash does (SIGKILL), and its memory is its own.
type StageProc struct {
	Name     string
	HTTPAddr string // host:port of /metrics and /readyz
	LogFile  string
	Cmd      *exec.Cmd
	done     chan struct{}
	err      error
}

// StartStage starts o.BinDir/o.Name with o's flags and environment.
func StartStage(o StageOptions) (*StageProc, error) {
	bin := filepath.Join(o.BinDir, o.Name)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("stage binary %s: %w (build the stages with `make build`, or point --bin-dir at them)", bin, err)
	}
	addr := o.HTTPAddr
	if addr == "" {
		var err error
		if addr, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	level := o.LogLevel
	if level == "" {
		level = "warn"
	}
	lf, err := os.OpenFile(o.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--brokers", strings.Join(o.Kafka.Brokers, ","),
		"--http-addr", addr,
		"--log-level", level,
	}, o.Args...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), "PF_TOPIC_PREFIX="+o.Kafka.Prefix, "PF_CONSUL_ADDR="+o.ConsulAddr)
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &StageProc{Name: o.Name, Cmd: cmd, HTTPAddr: addr, LogFile: o.LogFile, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has exited.
func (p *StageProc) Done() <-chan struct{} { return p.done }

// Exited reports a process that stopped on its own, with its log's tail;
// nil while it runs.
func (p *StageProc) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("stage %s exited (%v); its log %s ends with:\n%s", p.Name, p.err, p.LogFile, Tail(p.LogFile, 2000))
	default:
		return nil
	}
}

// Stop drains the process (SIGTERM) and waits for it, killing it after
// 20 seconds.
func (p *StageProc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// StopAll stops every process at once (Stop) and waits for them all: one
// by one, each member leaving its group would hand its partitions to the
// next, which would restore them only to leave in turn.
func StopAll(procs []*StageProc) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(p.Stop)
	}
	wg.Wait()
}

// Kill ends the process at once (SIGKILL), as a crash or an OOM kill
// does: nothing is drained, no group is left, no transaction ended. It
// waits for the process to be gone.
func (p *StageProc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Tail is the last n bytes of the file at path (or the error reading it).
func Tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}
