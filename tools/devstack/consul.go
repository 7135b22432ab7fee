package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// ConsulVersion is the Consul release `make consul` builds from tools/consul.
const ConsulVersion = "1.20.6"

// consulStartAttempts is how often StartConsul picks new ports when the
// agent could not bind the ones it was given (another process took them).
const consulStartAttempts = 3

// maxConsulLog is the size above which a start moves consul.log aside.
const maxConsulLog = 16 << 20

// ConsulOptions configures StartConsul.
type ConsulOptions struct {
	// Binary is the consul executable; "" uses ConsulBinary().
	Binary string
	// DataDir keeps the agent's state (KV included) across restarts: the
	// agent runs as a single bootstrapped server on that directory. ""
	// runs `consul agent -dev`, which keeps everything in memory.
	DataDir string
	// HTTPAddr is the host:port of the HTTP API (and UI);
	// "127.0.0.1:0" (also the default when empty) picks a free port. The
	// agent's other ports are always picked free on loopback.
	HTTPAddr string
	// Logger receives the agent's lifecycle events (not its own log,
	// which goes to LogFile).
	Logger zerolog.Logger
	// ManagementToken, when not empty, turns Consul's ACLs on with a
	// default policy of deny and makes it the initial management token
	// (a UUID): every request then needs a token with the rights to it,
	// made with this one. The agent uses it for its own requests too. It
	// is written to acl.hcl next to the agent's log (0600), not passed
	// on the command line. With a DataDir, Consul takes it only the
	// first time, when it bootstraps its ACLs.
	ManagementToken string
}

// ConsulAgent is a running Consul agent child process.
type ConsulAgent struct {
	// Addr is the host:port of the HTTP API; the UI is at http://Addr/ui.
	Addr string
	// Internal are the host:ports of the agent's Serf LAN and server RPC
	// listeners (127.0.0.1), which a dev stack keeps webhooks away from
	// as it does the HTTP API.
	Internal []string
	// DataDir is where the agent keeps its state; "" in -dev mode.
	DataDir string
	// LogFile holds the agent's own output.
	LogFile string

	cmd     *exec.Cmd
	token   string // the management token when ACLs are on
	logF    *os.File
	tmpDir  string
	done    chan struct{}
	waitErr error
	log     zerolog.Logger

	stopOnce sync.Once
	stopErr  error
}

// ConsulBinary finds the consul executable: $PF_CONSUL_BIN, else
// .cache/bin/consul in the repository root (the nearest parent directory of
// the working directory that holds go.work), else consul on the PATH.
func ConsulBinary() (string, error) {
	if p := os.Getenv("PF_CONSUL_BIN"); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("consul binary from PF_CONSUL_BIN: %w", err)
		}
		return p, nil
	}
	var tried []string
	if root, err := RepoRoot(); err == nil {
		p := filepath.Join(root, ".cache", "bin", "consul")
		if executable(p) == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	if p, err := exec.LookPath("consul"); err == nil {
		return p, nil
	}
	tried = append(tried, "consul on PATH")
	return "", fmt.Errorf("no consul binary (looked at $PF_CONSUL_BIN, %s): run `make consul` in the repository root to build Consul %s into .cache/bin/consul, or set PF_CONSUL_BIN",
		strings.Join(tried, ", "), ConsulVersion)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// StartConsul starts a Consul agent on loopback and returns once it has a
// leader and accepts KV writes. Without a DataDir it runs `consul agent
// -dev`; with one it runs a single server with -bootstrap-expect=1 on that
// directory, so KV survives Stop and a new StartConsul on the same
// directory. The agent's output goes to consul.log in DataDir, or in a
// temporary directory removed by Stop. The context bounds the wait for
// readiness (two minutes when it has no deadline); it does not stop the
// agent later, Stop does.
func StartConsul(ctx context.Context, o ConsulOptions) (*ConsulAgent, error) {
	bin := o.Binary
	if bin == "" {
		var err error
		if bin, err = ConsulBinary(); err != nil {
			return nil, err
		}
	}
	httpAddr := o.HTTPAddr
	if httpAddr == "" {
		httpAddr = "127.0.0.1:0"
	}
	host, httpPort, err := splitHostPort(httpAddr)
	if err != nil {
		return nil, fmt.Errorf("start consul: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}

	var lastErr error
	for attempt := 1; attempt <= consulStartAttempts; attempt++ {
		a, err := startConsulOnce(ctx, bin, o, host, httpPort)
		if err == nil {
			return a, nil
		}
		lastErr = err
		if !errors.Is(err, errPortInUse) || ctx.Err() != nil {
			break
		}
		o.Logger.Debug().Err(err).Int("attempt", attempt).Msg("consul could not bind its ports; retrying with new ones")
	}
	return nil, lastErr
}

var errPortInUse = errors.New("a port was already in use")

func startConsulOnce(ctx context.Context, bin string, o ConsulOptions, host string, httpPort int) (*ConsulAgent, error) {
	a := &ConsulAgent{DataDir: o.DataDir, log: o.Logger, done: make(chan struct{})}

	logDir := o.DataDir
	if logDir == "" {
		d, err := os.MkdirTemp("", "policyflow-consul-")
		if err != nil {
			return nil, fmt.Errorf("start consul: create temporary directory: %w", err)
		}
		a.tmpDir, logDir = d, d
	} else if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("start consul: create data dir %s: %w", o.DataDir, err)
	}
	fail := func(err error) (*ConsulAgent, error) {
		a.cleanup()
		return nil, err
	}

	var ports [3]int // http, serf lan, server rpc
	ports[0] = httpPort
	picked, err := freePorts(3, httpPort)
	if err != nil {
		return fail(fmt.Errorf("start consul: %w", err))
	}
	for i := range ports {
		if ports[i] == 0 {
			ports[i] = picked[i]
		}
	}
	client := host
	if isUnspecified(host) {
		client = "0.0.0.0"
		host = "127.0.0.1"
	}
	a.Addr = net.JoinHostPort(host, strconv.Itoa(ports[0]))
	a.Internal = []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])), net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2]))}

	args := []string{"agent",
		"-node=policyflow-dev",
		"-bind=127.0.0.1",
		"-client=" + client,
		"-http-port=" + strconv.Itoa(ports[0]),
		"-serf-lan-port=" + strconv.Itoa(ports[1]),
		"-server-port=" + strconv.Itoa(ports[2]),
		"-serf-wan-port=-1",
		"-dns-port=-1",
		"-grpc-port=-1",
		"-grpc-tls-port=-1",
		"-log-level=info",
		"-hcl=disable_update_check = true",
	}
	if o.DataDir == "" {
		args = append(args, "-dev", "-disable-host-node-id")
	} else {
		abs, err := filepath.Abs(o.DataDir)
		if err != nil {
			return fail(fmt.Errorf("start consul: resolve data dir %s: %w", o.DataDir, err))
		}
		args = append(args, "-server", "-bootstrap-expect=1", "-ui",
			"-data-dir="+abs,
			"-hcl=performance { raft_multiplier = 1 }",
			// A server leaves the cluster on interrupt only when told
			// to; say so explicitly: leaving would drop this single
			// server from its own Raft configuration.
			"-hcl=skip_leave_on_interrupt = true",
			"-hcl=leave_on_terminate = false",
		)
	}

	if o.ManagementToken != "" {
		conf := filepath.Join(logDir, "acl.hcl")
		if err := os.WriteFile(conf, aclConfig(o.ManagementToken), 0o600); err != nil {
			return fail(fmt.Errorf("start consul: write ACL configuration %s: %w", conf, err))
		}
		args = append(args, "-config-file="+conf)
		a.token = o.ManagementToken
	}

	a.LogFile = filepath.Join(logDir, "consul.log")
	// A data dir's log grows with every start; keep one previous file.
	if fi, err := os.Stat(a.LogFile); err == nil && fi.Size() > maxConsulLog {
		_ = os.Rename(a.LogFile, a.LogFile+".1")
	}
	logF, err := os.OpenFile(a.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail(fmt.Errorf("start consul: open log file %s: %w", a.LogFile, err))
	}
	a.logF = logF
	logStart, _ := logF.Seek(0, io.SeekEnd)
	fmt.Fprintf(logF, "==> policyflow: %s %s\n", bin, strings.Join(args, " "))

	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logF, logF
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("start consul %s: %w", bin, err))
	}
	a.cmd = cmd
	go func() {
		a.waitErr = cmd.Wait()
		close(a.done)
	}()
	a.log.Debug().Str("addr", a.Addr).Int("pid", cmd.Process.Pid).Str("log", a.LogFile).Msg("consul agent started")

	if err := a.waitReady(ctx); err != nil {
		tail := a.logTail(logStart)
		_ = a.Stop()
		if strings.Contains(tail, "address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return nil, fmt.Errorf("start consul agent on %s: %w\n--- %s ---\n%s", a.Addr, err, a.LogFile, tail)
	}
	a.log.Info().Str("addr", a.Addr).Str("data_dir", a.DataDir).Msg("consul agent ready")
	return a, nil
}

// aclConfig is the agent configuration that turns ACLs on, default deny,
// with token as the initial management token and the agent's own.
func aclConfig(token string) []byte {
	q := strconv.Quote(token)
	return []byte(`acl {
  enabled                  = true
  default_policy           = "deny"
  enable_token_persistence = false
  tokens {
    initial_management = ` + q + `
    agent              = ` + q + `
  }
}
`)
}

// waitReady polls until the agent reports a leader and a KV write and
// delete succeed (with the management token when ACLs are on).
func (a *ConsulAgent) waitReady(ctx context.Context) error {
	hc := &http.Client{Timeout: 5 * time.Second}
	base := "http://" + a.Addr
	probe := base + "/v1/kv/_policyflow/devstack/ready-probe"
	var last error
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-a.done:
			return fmt.Errorf("agent exited before it was ready: %v", a.waitErr)
		case <-ctx.Done():
			if last == nil {
				last = ctx.Err()
			}
			return fmt.Errorf("wait for leader and KV: %w (last: %v)", ctx.Err(), last)
		case <-tick.C:
		}
		last = func() error {
			body, err := consulDo(ctx, hc, http.MethodGet, base+"/v1/status/leader", nil, "")
			if err != nil {
				return err
			}
			var leader string
			if err := json.Unmarshal(body, &leader); err != nil {
				return fmt.Errorf("leader status %q: %w", body, err)
			}
			if leader == "" {
				return errors.New("no leader yet")
			}
			if _, err := consulDo(ctx, hc, http.MethodPut, probe, []byte("ok"), a.token); err != nil {
				return err
			}
			_, err = consulDo(ctx, hc, http.MethodDelete, probe, nil, a.token)
			return err
		}()
		if last == nil {
			return nil
		}
	}
}

func consulDo(ctx context.Context, hc *http.Client, method, url string, body []byte, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("X-Consul-Token", token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read response: %w", method, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// logTail returns the last lines the agent wrote since offset.
func (a *ConsulAgent) logTail(offset int64) string {
	b, err := os.ReadFile(a.LogFile)
	if err != nil || int64(len(b)) < offset {
		return ""
	}
	b = b[offset:]
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// Done is closed when the agent process has exited, whether by Stop or on
// its own.
func (a *ConsulAgent) Done() <-chan struct{} { return a.done }

// Pid is the agent's process id, for reading its memory in /proc.
func (a *ConsulAgent) Pid() int { return a.cmd.Process.Pid }

// Stop interrupts the agent, waits for it to exit (killing it after 30
// seconds) and removes the temporary directory of a -dev agent. An agent
// that had already exited on its own is reported as an error. Later calls
// return the first call's result.
func (a *ConsulAgent) Stop() error {
	if a == nil || a.cmd == nil {
		return nil
	}
	a.stopOnce.Do(func() { a.stopErr = a.stop() })
	return a.stopErr
}

func (a *ConsulAgent) stop() error {
	defer a.cleanup()

	select {
	case <-a.done:
		return fmt.Errorf("consul agent on %s had exited on its own: %v (see %s)", a.Addr, a.waitErr, a.LogFile)
	default:
	}
	if err := a.cmd.Process.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop consul agent on %s: interrupt pid %d: %w", a.Addr, a.cmd.Process.Pid, err)
	}
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		a.log.Warn().Str("addr", a.Addr).Msg("consul agent did not exit 30s after interrupt; killing it")
		_ = a.cmd.Process.Kill()
		<-a.done
	}
	var ee *exec.ExitError
	if a.waitErr != nil && !(errors.As(a.waitErr, &ee) && interrupted(ee)) {
		return fmt.Errorf("stop consul agent on %s: %w (see %s)", a.Addr, a.waitErr, a.LogFile)
	}
	a.log.Debug().Str("addr", a.Addr).Msg("consul agent stopped")
	return nil
}

// interrupted reports whether the agent ended the way Consul ends on an
// interrupt: a server that skips leaving exits with status 1 after a clean
// shutdown, and a process that had not yet set up its handler dies of the
// signal itself.
func interrupted(ee *exec.ExitError) bool {
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal() == syscall.SIGINT
	}
	return ee.ExitCode() == 1
}

func (a *ConsulAgent) cleanup() {
	if a.logF != nil {
		_ = a.logF.Close()
		a.logF = nil
	}
	if a.tmpDir != "" {
		_ = os.RemoveAll(a.tmpDir)
		a.tmpDir = ""
	}
}
