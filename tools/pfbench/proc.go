package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/devstack"
)

// stageProc is one stage binary running as its own process, the way it
// is deployed (devstack.StartStage): its memory is its own and can be
// read from /proc.
type stageProc struct {
	*devstack.StageProc
	name    string
	cmd     *exec.Cmd
	http    string // host:port of /metrics and /readyz
	logFile string
}

// startStage runs binDir/<name> against the bench's broker and Consul.
func startStage(ctx context.Context, binDir, logDir, name string, k runtime.Kafka, consulAddr string, extra ...string) (*stageProc, error) {
	return startStageLogged(ctx, binDir, filepath.Join(logDir, name+".log"), name, k, consulAddr, extra...)
}

// startStageLogged is startStage with the log in logFile: members of one
// stage running at once each have their own log (and their own ops port).
func startStageLogged(_ context.Context, binDir, logFile, name string, k runtime.Kafka, consulAddr string, extra ...string) (*stageProc, error) {
	p, err := devstack.StartStage(devstack.StageOptions{BinDir: binDir, Name: name, LogFile: logFile, Kafka: k, ConsulAddr: consulAddr, Args: extra})
	if err != nil {
		return nil, err
	}
	return &stageProc{StageProc: p, name: name, cmd: p.Cmd, http: p.HTTPAddr, logFile: logFile}, nil
}

// exited reports a stage that stopped on its own, with its log's tail.
func (p *stageProc) exited() error { return p.Exited() }

// stop drains the stage (SIGTERM) and waits for it, killing it after a
// while.
func (p *stageProc) stop() { p.Stop() }

// stopAll drains every process at once (devstack.StopAll).
func stopAll(procs []*stageProc) {
	ps := make([]*devstack.StageProc, len(procs))
	for i, p := range procs {
		ps[i] = p.StageProc
	}
	devstack.StopAll(ps)
}

// peakRSS is the process's resident-set high-water mark (VmHWM) in bytes.
func (p *stageProc) peakRSS() (int64, error) { return p.status("VmHWM:") }

// rss is the process's resident set now (VmRSS) in bytes.
func (p *stageProc) rss() (int64, error) { return p.status("VmRSS:") }

// status is a size in kB from the process's /proc status, in bytes.
func (p *stageProc) status(field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s %q: %w", field, rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc status (memory is read on Linux only)", field)
}

// recordsIn sums the stage's policyflow_records_in_total from /metrics.
func (p *stageProc) recordsIn(ctx context.Context) (float64, error) {
	return scrapeSum(ctx, "http://"+p.http+"/metrics", "policyflow_records_in_total")
}

var scrapeClient = &http.Client{Timeout: 2 * time.Second}

// scrapeSum adds up every sample of one metric in a Prometheus text page.
func scrapeSum(ctx context.Context, url, metric string) (float64, error) {
	return scrapeSumWith(ctx, url, metric, "")
}

// abortedTxns is how many transactions the stage has aborted (a
// rebalance aborts the transaction in flight; its records are handled
// again by the partition's next owner).
func (p *stageProc) abortedTxns(ctx context.Context) (float64, error) {
	return scrapeSumWith(ctx, "http://"+p.http+"/metrics", "policyflow_transactions_total", `outcome="aborted"`)
}

// scrapeSumWith adds up the samples of one metric whose labels hold label
// (name="value"; empty: every sample) in a Prometheus text page.
func scrapeSumWith(ctx context.Context, url, metric, label string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric) {
			continue
		}
		rest := line[len(metric):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // another metric sharing the prefix
		}
		if label != "" {
			labels, _, _ := strings.Cut(rest, "}")
			if rest[0] != '{' || !strings.Contains(","+labels[1:]+",", ","+label+",") {
				continue
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// cpuSeconds is the user+system CPU time a process has used so far, from
// /proc/<pid>/stat (clock ticks of 1/100 s, as on every Linux this runs on).
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields are counted after its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc stat format")
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("unexpected /proc stat format")
	}
	return (utime + stime) / 100, nil
}
