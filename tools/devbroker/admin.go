package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/policyflow/policyflow/tools/devstack"
)

// The fault endpoint: off unless --admin-addr is given, only on a
// loopback address, and only with the bearer token of --admin-token-file
// (created with a random token, mode 0600, when missing). It lets a test
// or an operator rehearsing a qualification make the cluster do what a
// real one does (move leaders and coordinators, restart a broker, answer
// with retriable errors) while clients run against this process.
//
//	POST /v1/faults/leader-move                 every partition's leader re-elected
//	POST /v1/faults/coordinator-move            every group and transaction coordinator moved
//	POST /v1/faults/broker-restart?node=N&down=2s   broker N out for down, then back on its port
//	POST /v1/faults/retriable-errors?count=20   count each of NOT_LEADER_FOR_PARTITION on produce
//	                                            and fetch, COORDINATOR_LOAD_IN_PROGRESS on offset
//	                                            commits, CONCURRENT_TRANSACTIONS on EndTxn

// maxDown bounds broker-restart's down time, and maxBurst retriable-errors'
// count, so that a request cannot stall the cluster for long.
const (
	maxDown  = time.Minute
	maxBurst = 10000
)

// adminToken reads the token of path, creating the file with a random
// token when it does not exist.
func adminToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		tok := strings.TrimSpace(string(b))
		if len(tok) < 16 {
			return "", fmt.Errorf("--admin-token-file %s: the token is shorter than 16 characters; delete the file to get a random one", path)
		}
		return tok, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("--admin-token-file %s: %w", path, err)
	}
	var r [24]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(r[:])
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("--admin-token-file %s: write a new token: %w", path, err)
	}
	return tok, nil
}

// checkLoopback refuses an admin address that is not on a loopback
// interface: the endpoint can stop brokers.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--admin-addr %q: want host:port: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--admin-addr %q: the fault endpoint listens on a loopback address only (127.0.0.1, ::1 or localhost)", addr)
	}
	return nil
}

// adminHandler serves the fault endpoint for b, for requests with token.
func adminHandler(b *devstack.Broker, token string) http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(w http.ResponseWriter, code int, format string, a ...any) {
		reply(w, code, map[string]string{"error": fmt.Sprintf(format, a...)})
	}
	mux.HandleFunc("/v1/faults/{fault}", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			fail(w, http.StatusMethodNotAllowed, "faults are POSTed")
			return
		}
		q := r.URL.Query()
		switch f := r.PathValue("fault"); f {
		case "leader-move":
			b.Cluster.ShufflePartitionLeaders()
			reply(w, http.StatusOK, map[string]string{"done": "every partition's leader re-elected"})
		case "coordinator-move":
			b.Cluster.RehashCoordinators()
			reply(w, http.StatusOK, map[string]string{"done": "every group and transaction coordinator moved"})
		case "broker-restart":
			node, err := strconv.Atoi(q.Get("node"))
			if err != nil || node < 0 || node >= len(b.Addrs) {
				fail(w, http.StatusBadRequest, "node=%q: want a broker between 0 and %d", q.Get("node"), len(b.Addrs)-1)
				return
			}
			down := 2 * time.Second
			if v := q.Get("down"); v != "" {
				if down, err = time.ParseDuration(v); err != nil || down < 0 || down > maxDown {
					fail(w, http.StatusBadRequest, "down=%q: want a duration between 0s and %s", v, maxDown)
					return
				}
			}
			ctx, cancel := context.WithTimeout(r.Context(), down+time.Minute)
			defer cancel()
			if err := b.Restart(ctx, int32(node), down); err != nil {
				fail(w, http.StatusInternalServerError, "%v", err)
				return
			}
			reply(w, http.StatusOK, map[string]string{"done": fmt.Sprintf("broker %d stopped %s and back on its port", node, down)})
		case "retriable-errors":
			count := 20
			if v := q.Get("count"); v != "" {
				var err error
				if count, err = strconv.Atoi(v); err != nil || count < 1 || count > maxBurst {
					fail(w, http.StatusBadRequest, "count=%q: want a number between 1 and %d", v, maxBurst)
					return
				}
			}
			b.Cluster.Fault(
				kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotLeaderForPartition, Count: count},
				kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Err: kerr.NotLeaderForPartition, Count: count},
				kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit, kmsg.TxnOffsetCommit}, Err: kerr.CoordinatorLoadInProgress, Count: count},
				kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.ConcurrentTransactions, Count: count},
			)
			reply(w, http.StatusOK, map[string]string{"done": fmt.Sprintf("the next %d produce, fetch, offset commit and EndTxn requests each answer a retriable error", count)})
		default:
			fail(w, http.StatusNotFound, "no fault %q: the faults are leader-move, coordinator-move, broker-restart, retriable-errors", f)
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="devbroker"`)
			fail(w, http.StatusUnauthorized, "send Authorization: Bearer <the token of --admin-token-file>")
			return
		}
		mux.ServeHTTP(w, r)
	})
}
