package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/tools/devstack"
)

// ShardRun is one Consul shard holding the folders of a fleet's
// components as the consul-writer and the agent-notifier leave them,
// on a real Consul server (one, with its Raft log on disk).
type ShardRun struct {
	Components int   `json:"components"`
	Keys       int   `json:"keys"`
	ValueBytes int64 `json:"value_bytes"`
	// Write is writing every folder in shared transactions of up to
	// consulkv.MaxTxnOps operations, writers at once (the
	// consul-writer's way; the claims are the notifier's).
	Writers   int     `json:"writers"`
	WriteTxns int     `json:"write_txns"`
	WriteS    float64 `json:"write_s"`
	KeysPerS  float64 `json:"keys_per_s"`
	// The agent's resident memory before the writes, after them, and
	// its most; PerComponentKiB is the growth per component.
	RSSBeforeMiB    float64 `json:"agent_rss_before_mib"`
	RSSAfterMiB     float64 `json:"agent_rss_after_mib"`
	HWMMiB          float64 `json:"agent_peak_rss_mib"`
	PerComponentKiB float64 `json:"agent_kib_per_component"`
	// SnapshotBytes is the size of a snapshot of the server's state
	// (GET /v1/snapshot, compressed as Consul writes it).
	SnapshotBytes        int64   `json:"snapshot_bytes"`
	SnapshotPerComponent float64 `json:"snapshot_bytes_per_component"`
	// ListS is a catch-up's check of every folder as the consul-writer
	// makes it today: a listing of its item keys per component (writers
	// at once); CheckS is the check it aims at: check-index
	// transactions of the event keys, MaxTxnOps a transaction.
	ListS      float64 `json:"catchup_listings_s"`
	ListPerS   float64 `json:"catchup_listings_per_s"`
	CheckS     float64 `json:"catchup_check_index_s"`
	CheckTxns  int     `json:"catchup_check_index_txns"`
	CheckPerS  float64 `json:"catchup_check_index_components_per_s"`
	LoadBefore string  `json:"loadavg_before"`
	LoadAfter  string  `json:"loadavg_after"`
}

// shard writes n components' folders to a new Consul server and measures
// it.
func shard(ctx context.Context, n, bodyBytes, writers int, progress func(string, ...any)) (*ShardRun, error) {
	res := &ShardRun{Components: n, Writers: writers, LoadBefore: loadavg()}
	b, err := (&sim{bodyBytes: bodyBytes, rounds: 1}).bodies()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "capsim-consul-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	agent, err := devstack.StartConsul(ctx, devstack.ConsulOptions{DataDir: dir})
	if err != nil {
		return nil, err
	}
	defer agent.Stop()
	cfg := api.DefaultConfig()
	cfg.Address = agent.Addr
	cl, err := api.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	rss := func() (cur, peak float64) { return procMiB(agent.Pid(), "VmRSS"), procMiB(agent.Pid(), "VmHWM") }
	res.RSSBeforeMiB, _ = rss()

	// Every folder: five items, the event, the notifier's claim.
	perTxn := consulkv.MaxTxnOps / (perComp + 2)
	eventIdx := make([]uint64, n)
	var next atomic.Int64
	var keys, bytes, txns atomic.Int64
	start := time.Now()
	err = each(writers, func() error {
		for {
			first := int(next.Add(int64(perTxn))) - perTxn
			if first >= n {
				return nil
			}
			last := min(first+perTxn, n)
			var ops api.TxnOps
			var events []int // the op index of each component's event
			for i := first; i < last; i++ {
				cp := collection(i, b, true)
				scn := cp.ServiceComponentName
				for _, p := range cp.Policies {
					ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: consulkv.ItemKey(scn, p.PolicyID), Value: []byte(p.Body)}})
				}
				ev := consulkv.Event{Action: consulkv.ActionGathered, Timestamp: t0.Format(consulkv.TimestampFormat), UpdateID: cp.UpdateID,
					PoliciesCount: len(cp.Policies), Generation: cp.Generation}
				events = append(events, len(ops))
				ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: consulkv.EventKey(scn), Value: ev.JSON(), Index: 0}})
				code := 0
				claim := consulkv.Claim{UpdateID: cp.UpdateID, Generation: cp.Generation, ExitCode: &code, At: t0.Format(consulkv.TimestampFormat),
					HTTPStatus: 200, Attempts: 1, Outcome: consulkv.OutcomeOK}
				ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: consulkv.ClaimKey(scn), Value: claim.JSON()}})
			}
			ok, resp, _, err := cl.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("write transaction refused: %s", consulkv.TxnReasons(resp))
			}
			for k, at := range events {
				eventIdx[first+k] = resp.Results[at].KV.ModifyIndex
			}
			txns.Add(1)
			keys.Add(int64(len(ops)))
			for _, op := range ops {
				bytes.Add(int64(len(op.KV.Value)))
			}
		}
	})
	if err != nil {
		return nil, err
	}
	res.WriteS = time.Since(start).Seconds()
	res.Keys, res.ValueBytes, res.WriteTxns = int(keys.Load()), bytes.Load(), int(txns.Load())
	res.KeysPerS = float64(res.Keys) / res.WriteS
	progress("consul: %d components, %d keys written in %.1f s (%.0f keys/s)", n, res.Keys, res.WriteS, res.KeysPerS)
	time.Sleep(2 * time.Second) // let the agent settle before its memory is read
	res.RSSAfterMiB, res.HWMMiB = rss()
	res.PerComponentKiB = (res.RSSAfterMiB - res.RSSBeforeMiB) * 1024 / float64(n)

	snap, _, err := cl.Snapshot().Save((&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	size, err := io.Copy(io.Discard, snap)
	snap.Close()
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	res.SnapshotBytes, res.SnapshotPerComponent = size, float64(size)/float64(n)

	// A catch-up's check of every folder, today's way: a listing each.
	next.Store(0)
	start = time.Now()
	err = each(writers, func() error {
		for {
			i := int(next.Add(1)) - 1
			if i >= n {
				return nil
			}
			scn := componentID(i)
			ks, _, err := cl.KV().Keys(consulkv.ItemsPrefix(scn), "", (&api.QueryOptions{}).WithContext(ctx))
			if err != nil {
				return err
			}
			if len(ks) != perComp {
				return fmt.Errorf("folder %s lists %d items, want %d", scn, len(ks), perComp)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	res.ListS = time.Since(start).Seconds()
	res.ListPerS = float64(n) / res.ListS

	// The aim: check-index transactions of the event keys.
	next.Store(0)
	var checks atomic.Int64
	start = time.Now()
	err = each(writers, func() error {
		for {
			first := int(next.Add(consulkv.MaxTxnOps)) - consulkv.MaxTxnOps
			if first >= n {
				return nil
			}
			var ops api.TxnOps
			for i := first; i < min(first+consulkv.MaxTxnOps, n); i++ {
				ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: consulkv.EventKey(componentID(i)), Index: eventIdx[i]}})
			}
			ok, resp, _, err := cl.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("check-index transaction failed: %s", consulkv.TxnReasons(resp))
			}
			checks.Add(1)
		}
	})
	if err != nil {
		return nil, err
	}
	res.CheckS = time.Since(start).Seconds()
	res.CheckTxns = int(checks.Load())
	res.CheckPerS = float64(n) / res.CheckS
	res.LoadAfter = loadavg()
	progress("consul: agent %.0f MiB (%.0f before, %.0f KiB per component), snapshot %.1f MiB; catch-up listings %.1f s, check-index %.2f s",
		res.RSSAfterMiB, res.RSSBeforeMiB, res.PerComponentKiB, float64(res.SnapshotBytes)/(1<<20), res.ListS, res.CheckS)
	return res, nil
}

// each runs f on k goroutines and returns the first error.
func each(k int, f func() error) error {
	var wg sync.WaitGroup
	errs := make(chan error, k)
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// procMiB is a memory line of /proc/<pid>/status (VmRSS, VmHWM) in MiB;
// 0 when it cannot be read.
func procMiB(pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb / 1024
			}
		}
	}
	return 0
}
