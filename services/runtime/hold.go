package runtime

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Hold says that the input's effect goes on after the handler returned
// (an at-least-once stage that starts work in the background, such as a
// participant's operation): its offset, and so every later one of its
// partition, is not committed until release is called, so that a member
// that dies before the effect ended leaves the input to the next owner
// of the partition. Call release once the effect ended (more calls do
// nothing); a release after the partition was revoked, or after the
// stage stopped, commits nothing. The handler must still release what it
// held when it then fails. In a transactional stage, or an input not
// handed in by the runtime, it holds nothing.
func (in Input) Hold() (release func()) {
	if in.hold == nil {
		return func() {}
	}
	return in.hold.take(in)
}

// holds keeps, per partition an at-least-once stage owns, the offsets of
// the inputs whose effect goes on (Input.Hold) and how far its records
// were handled, and marks for commit the offset below which every effect
// ended: the lowest held offset, or the one after the last record handled
// when nothing is held.
type holds struct {
	k Kafka

	mu     sync.Mutex
	cl     *kgo.Client
	parts  map[topicPartition]*partitionHolds
	closed bool
}

type topicPartition struct {
	topic     string // full name
	partition int32
}

type partitionHolds struct {
	held  map[int64]int // offset -> holds not released
	next  int64         // the offset after the last record handled; -1 before the first
	epoch int32         // leader epoch of the last record handled
}

func newHolds(k Kafka) *holds {
	return &holds{k: k, parts: map[topicPartition]*partitionHolds{}}
}

// use sets the client whose offsets are marked.
func (h *holds) use(cl *kgo.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cl = cl
}

func (h *holds) partitionLocked(tp topicPartition) *partitionHolds {
	ph := h.parts[tp]
	if ph == nil {
		ph = &partitionHolds{held: map[int64]int{}, next: -1, epoch: -1}
		h.parts[tp] = ph
	}
	return ph
}

// take holds in's offset and returns its release.
func (h *holds) take(in Input) func() {
	tp := topicPartition{h.k.Topic(in.Topic), in.Partition}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return func() {}
	}
	ph := h.partitionLocked(tp)
	ph.held[in.Offset]++
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.closed || h.parts[tp] != ph {
				return // stopped, or the partition was revoked since
			}
			if ph.held[in.Offset]--; ph.held[in.Offset] <= 0 {
				delete(ph.held, in.Offset)
			}
			h.markLocked(tp, ph)
		})
	}
}

// handled records that recs (one poll's, in order) were handled and
// their outputs produced, and marks what may be committed.
func (h *holds) handled(recs []*kgo.Record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	touched := map[topicPartition]*partitionHolds{}
	for _, rec := range recs {
		tp := topicPartition{rec.Topic, rec.Partition}
		ph := h.partitionLocked(tp)
		if rec.Offset+1 > ph.next {
			ph.next, ph.epoch = rec.Offset+1, rec.LeaderEpoch
		}
		touched[tp] = ph
	}
	for tp, ph := range touched {
		h.markLocked(tp, ph)
	}
}

// markLocked marks the offset below which every record of the partition
// was handled and every effect ended (kgo keeps the highest mark).
func (h *holds) markLocked(tp topicPartition, ph *partitionHolds) {
	safe := ph.next
	for off := range ph.held {
		if off < safe {
			safe = off
		}
	}
	if safe < 0 || h.cl == nil {
		return
	}
	h.cl.MarkCommitOffsets(map[string]map[int32]kgo.EpochOffset{tp.topic: {tp.partition: {Epoch: ph.epoch, Offset: safe}}})
}

// forget drops partitions (full topic names) the member no longer owns:
// the releases of their holds mark nothing.
func (h *holds) forget(parts map[string][]int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for t, ps := range parts {
		for _, p := range ps {
			delete(h.parts, topicPartition{t, p})
		}
	}
}

// close makes every later hold and release mark nothing.
func (h *holds) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
}
