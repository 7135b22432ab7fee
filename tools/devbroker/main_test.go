package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var readyLine = regexp.MustCompile(`(?m)^devbroker listening on (\S+)$`)

// startDevbroker runs the command and returns the address of its ready line.
func startDevbroker(t *testing.T, args ...string) (addr string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, &out, &errOut) }()
	deadline := time.After(time.Minute)
	for {
		if m := readyLine.FindStringSubmatch(out.String()); m != nil {
			return m[1], func() error { cancel(); return <-done }
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("devbroker %v ended before its ready line: %v\nstderr: %s", args, err, errOut.String())
		case <-deadline:
			cancel()
			t.Fatalf("devbroker %v printed no ready line within a minute\nstdout: %s\nstderr: %s", args, out.String(), errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestDevbrokerServesAndKeepsRecordsInItsDataDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	args := []string{"--listen", "127.0.0.1:0", "--data-dir", dir, "--partitions", "2", "--broker-config", "message.max.bytes=2097152", "--log-level", "none"}

	addr, stop := startDevbroker(t, args...)
	// Three brokers by default, each listed on the ready line.
	if n := len(strings.Split(addr, ",")); n != 3 {
		t.Fatalf("ready line lists %q, want three brokers", addr)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(addr, ",")...), kgo.DefaultProduceTopic("orders"), kgo.ProducerBatchMaxBytes(4<<20), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	// A topic created without a partition count gets --partitions.
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, -1, -1, nil, "orders")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	if resp.NumPartitions != 2 {
		t.Errorf("topic created without a count has %d partitions, want 2 (--partitions)", resp.NumPartitions)
	}
	// --broker-config is applied: a 1.5 MB record fits under 2 MiB.
	big := strings.Repeat("x", 1536*1024)
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte(big)}).FirstErr(); err != nil {
		t.Fatalf("produce a 1.5 MB record with message.max.bytes=2097152: %v", err)
	}
	cl.Close()
	if err := stop(); err != nil {
		t.Fatalf("devbroker ended with %v", err)
	}

	addr, stop = startDevbroker(t, args...)
	defer stop()
	cl, err = kgo.NewClient(kgo.SeedBrokers(strings.Split(addr, ",")...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("record not read back after a restart on the same data dir: %v", ctx.Err())
		}
		if recs := fs.Records(); len(recs) > 0 {
			if string(recs[0].Key) != "k" || len(recs[0].Value) != len(big) {
				t.Fatalf("read back key %q with %d bytes, want k with %d", recs[0].Key, len(recs[0].Value), len(big))
			}
			return
		}
	}
}

// --broker-count sets the number of brokers, PF_BROKER_COUNT its default.
func TestDevbrokerBrokerCount(t *testing.T) {
	addr, stop := startDevbroker(t, "--listen", "127.0.0.1:0", "--broker-count", "1", "--log-level", "none")
	if strings.Contains(addr, ",") {
		t.Errorf("--broker-count 1 listens on %q, want one address", addr)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PF_BROKER_COUNT", "2")
	addr, stop = startDevbroker(t, "--listen", "127.0.0.1:0", "--log-level", "none")
	defer stop()
	if n := len(strings.Split(addr, ",")); n != 2 {
		t.Errorf("PF_BROKER_COUNT=2 listens on %q, want two addresses", addr)
	}
	t.Setenv("PF_BROKER_COUNT", "three")
	if err := run(context.Background(), nil, &syncBuffer{}, &syncBuffer{}); err == nil || !strings.Contains(err.Error(), "PF_BROKER_COUNT") {
		t.Errorf("PF_BROKER_COUNT=three: %v, want an error naming it", err)
	}
}

func TestDevbrokerRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--broker-config", "no-equals-sign"},
		{"--log-level", "loud"},
		{"--partitions", "0"},
		{"--broker-count", "0"},
		{"--broker-count", "17"},
		{"--listen", "nowhere"},
		{"extra-argument"},
	} {
		var out, errOut syncBuffer
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := run(ctx, args, &out, &errOut)
		cancel()
		if err == nil {
			t.Errorf("devbroker %v: no error", args)
		}
		if strings.Contains(out.String(), "listening") {
			t.Errorf("devbroker %v: started anyway: %s", args, out.String())
		}
	}
}
