package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The faults of a Kafka cluster, run on the stack's in-process broker of
// three (kfake): what a real cluster does all day, injected while updates
// flow.
//
// leader-move elects new leaders for every partition (ShufflePartitionLeaders)
// LeaderMoves times, LeaderMovePace apart: producers, fetchers and the
// offset listings must follow the leaders. coordinator-move moves every
// group and transaction coordinator (RehashCoordinators) each time a stage
// ends a transaction (EndTxn), CoordinatorMoves times: the transaction
// being committed meets NOT_COORDINATOR and must find its coordinator
// again, the groups' heartbeats and commits too. broker-rolling-restart
// stops each broker in turn (RemoveNode: its listener and connections
// closed, its partitions led by the others) for BrokerDown and brings it
// back on its port (AddNode). retriable-errors answers a burst of
// requests with the retriable errors of a busy cluster:
// NOT_LEADER_FOR_PARTITION on produce and fetch, COORDINATOR_LOAD_IN_PROGRESS
// on offset commits (plain and transactional), CONCURRENT_TRANSACTIONS on
// EndTxn, ErrorBurst of each.
const (
	FaultLeaderMove       = "leader-move"
	FaultCoordinatorMove  = "coordinator-move"
	FaultBrokerRolling    = "broker-rolling-restart"
	FaultRetriableErrors  = "retriable-errors"
	LeaderMoves           = 6
	LeaderMovePace        = 500 * time.Millisecond
	CoordinatorMoves      = 5
	BrokerDown            = 2 * time.Second
	ErrorBurst            = 20
	retriableErrorsWindow = 15 * time.Second
)

// ClusterFaults are the faults of a Kafka cluster, in the order AllFaults
// runs them.
func ClusterFaults() []string {
	return []string{FaultLeaderMove, FaultCoordinatorMove, FaultBrokerRolling, FaultRetriableErrors}
}

// clusterFault reports the faults that need the in-process cluster.
func clusterFault(f string) bool {
	for _, c := range ClusterFaults() {
		if f == c {
			return true
		}
	}
	return false
}

// clusterFault runs one of ClusterFaults on the stack's broker and
// returns what it did, for the matrix's notes.
func (s *stack) clusterFault(ctx context.Context, fault string, started func()) (string, error) {
	b := s.broker
	if b == nil || b.Cluster == nil {
		return "", fmt.Errorf("%s needs the in-process broker", fault)
	}
	pause := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	switch fault {
	case FaultLeaderMove:
		started()
		for i := 0; i < LeaderMoves && ctx.Err() == nil; i++ {
			b.Cluster.ShufflePartitionLeaders()
			pause(LeaderMovePace)
		}
		return fmt.Sprintf("every partition's leader re-elected %d times, %s apart", LeaderMoves, LeaderMovePace), ctx.Err()

	case FaultCoordinatorMove:
		// Each EndTxn seen moves every coordinator just before the
		// broker answers it: the commit meets NOT_COORDINATOR mid-way.
		var mu sync.Mutex
		moved := 0
		done := make(chan struct{})
		b.Cluster.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
			mu.Lock()
			defer mu.Unlock()
			if moved < CoordinatorMoves {
				b.Cluster.RehashCoordinators()
				moved++
				if moved == CoordinatorMoves {
					close(done)
				}
			}
			if moved < CoordinatorMoves {
				b.Cluster.KeepControl()
			} else {
				b.Cluster.DropControl()
			}
			return nil, nil, false
		})
		started()
		select {
		case <-done:
		case <-ctx.Done():
		case <-time.After(30 * time.Second):
		}
		mu.Lock()
		n := moved
		if n < CoordinatorMoves {
			// Fewer transactions than moves: the control function
			// stays until its next EndTxn, which it then lets through.
			moved = CoordinatorMoves
		}
		mu.Unlock()
		return fmt.Sprintf("group and transaction coordinators moved %d times, each as a transaction was being ended (EndTxn)", n), ctx.Err()

	case FaultBrokerRolling:
		started()
		var done []string
		for node := int32(0); int(node) < len(b.Addrs) && ctx.Err() == nil; node++ {
			if err := b.Restart(ctx, node, BrokerDown); err != nil {
				return strings.Join(done, ", "), err
			}
			done = append(done, fmt.Sprintf("broker %d", node))
			pause(time.Second)
		}
		return fmt.Sprintf("rolling restart: %s each stopped %s (connections closed) and back on its port", strings.Join(done, ", "), BrokerDown), ctx.Err()

	case FaultRetriableErrors:
		type burst struct {
			what string
			h    *kfake.FaultHandle
		}
		var bursts []burst
		add := func(what string, err *kerr.Error, keys ...kmsg.Key) {
			bursts = append(bursts, burst{what + " " + err.Message, b.Cluster.Fault(kfake.Fault{Keys: keys, Err: err, Count: ErrorBurst})})
		}
		add("produce", kerr.NotLeaderForPartition, kmsg.Produce)
		add("fetch", kerr.NotLeaderForPartition, kmsg.Fetch)
		add("offset commit", kerr.CoordinatorLoadInProgress, kmsg.OffsetCommit, kmsg.TxnOffsetCommit)
		add("end transaction", kerr.ConcurrentTransactions, kmsg.EndTxn)
		started()
		deadline := time.Now().Add(retriableErrorsWindow)
		for ctx.Err() == nil && time.Now().Before(deadline) {
			all := true
			for _, x := range bursts {
				all = all && x.h.Hits() >= ErrorBurst
			}
			if all {
				break
			}
			pause(100 * time.Millisecond)
		}
		var parts []string
		for _, x := range bursts {
			x.h.Remove()
			parts = append(parts, fmt.Sprintf("%s %d/%d", x.what, x.h.Hits(), ErrorBurst))
		}
		return "answered with retriable errors: " + strings.Join(parts, ", "), ctx.Err()
	}
	return "", fmt.Errorf("unknown cluster fault %q", fault)
}
