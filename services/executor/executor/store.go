package executor

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// collectionStore is the executor's view of component.policies: the latest
// collection of each component this member may update, and its own writes
// not yet read back.
//
// Its lock is its own and a leaf. The follower of component.policies
// takes it, on its own goroutine, to apply each record it reads, while the
// handler (under executor.mu) may be waiting for that follower to catch
// up; so executor.mu and this lock cannot be one lock. Nothing blocks
// while holding it, and it is never held while taking executor.mu.
type collectionStore struct {
	log   zerolog.Logger
	codec *events.Codec
	// comps is deploy.components, read by keep to place a component by
	// its registration.
	comps *runtime.TableOf[*events.Component, *registered]

	mu sync.Mutex
	// committed holds component.policies as read, compacted (see
	// compact): what Next needs of each component's latest collection,
	// with every string and body shared with the other components that
	// hold the same policy. The executor's own writes coming back are
	// recognised by their bytes as they are read.
	committed map[string]*kept
	overlay   map[string]overlayEntry // own writes not yet read back
	// owned are the policy.segments partitions this member holds, of
	// segParts; committed keeps only the collections of components whose
	// deployment (the collection's or the registration's) lives on one of
	// them (see keep). elsewhere are the components with a collection not
	// kept: one whose registration moves to an owned deployment is read
	// from component.policies when it is first needed (executor.fetch).
	owned     map[int32]bool
	segParts  int
	elsewhere map[string]struct{}
}

// overlayEntry is a collection this executor produced and has not yet
// seen come back committed; partition is the policy.segments partition
// whose update produced it. It is kept compacted, as it will be once read
// back, and the record as produced by its length and hash (sumOf), not
// its bytes: at 100,000 components the records in flight and their
// decoded updates, kept until read back, were about 25 MiB of the
// executor's heap.
type overlayEntry struct {
	k         *kept
	updateID  string
	size      int
	sum       uint64
	partition int32
}

// overlaySeed seeds the hashes of the records an executor produced.
var overlaySeed = maphash.MakeSeed()

// sumOf is the hash that recognises a record as one this executor
// produced (with its length): 64 bits of a hash seeded at random per
// process, so two records of one component that differ and hash alike
// are as likely as 2^-64.
func sumOf(raw []byte) uint64 { return maphash.Bytes(overlaySeed, raw) }

// mine says whether raw is the record o was produced as.
func (o overlayEntry) mine(raw []byte) bool { return len(raw) == o.size && sumOf(raw) == o.sum }

func newCollectionStore(log zerolog.Logger, codec *events.Codec) *collectionStore {
	return &collectionStore{
		log:       log,
		codec:     codec,
		committed: map[string]*kept{},
		overlay:   map[string]overlayEntry{},
		owned:     map[int32]bool{},
		elsewhere: map[string]struct{}{},
	}
}

// apply keeps committed current with component.policies, for the
// components this member may update (keep). It is the follower's apply
// function.
func (s *collectionStore) apply(ctx context.Context, rec *kgo.Record) error {
	key := string(rec.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec.Value == nil {
		delete(s.committed, key)
		delete(s.elsewhere, key)
		return nil
	}
	if o, ok := s.overlay[key]; ok && o.mine(rec.Value) {
		// Committed caught up with our own write: keep what we wrote.
		delete(s.overlay, key)
		s.storeKept(key, o.k)
		return nil
	}
	cp, err := s.decode(ctx, key, rec.Value)
	if err != nil {
		// Counted as none: the component gathers its whole collection
		// anew on its next update.
		delete(s.committed, key)
		delete(s.elsewhere, key)
		s.log.Error().Err(err).Str("component_id", key).Msg("committed collection unreadable; the component gathers anew")
		return nil
	}
	// Written by another member, or read back from an older run: compare
	// what it is.
	if o, ok := s.overlay[key]; ok && o.k.generation == cp.Generation && o.updateID == cp.UpdateID {
		delete(s.overlay, key)
	}
	s.store(key, cp)
	return nil
}

// store keeps a component's latest collection compacted when this member
// may update the component, and otherwise notes that it has one
// elsewhere. Callers hold mu.
func (s *collectionStore) store(key string, cp *events.ComponentPolicies) {
	if s.keep(key, cp.DeploymentID) {
		s.committed[key] = compact(key, cp, s.registration(key))
		delete(s.elsewhere, key)
		return
	}
	s.notKept(key)
}

// storeKept is store of a collection already compacted. Callers hold mu.
func (s *collectionStore) storeKept(key string, k *kept) {
	if s.keep(key, k.deploymentID) {
		s.committed[key] = k
		delete(s.elsewhere, key)
		return
	}
	s.notKept(key)
}

// notKept notes that the component has a collection, kept elsewhere.
// Callers hold mu.
func (s *collectionStore) notKept(key string) {
	delete(s.committed, key)
	s.elsewhere[strings.Clone(key)] = struct{}{}
}

// keep says whether this member may update the component: its
// collection's deployment, or the one it is registered in now, lives on a
// policy.segments partition it holds. Callers hold mu.
func (s *collectionStore) keep(key, deploymentID string) bool {
	if s.ownsDeployment(deploymentID) {
		return true
	}
	r := s.registration(key)
	return r != nil && s.ownsDeployment(r.deploymentID)
}

// registration is what deploy.components holds of the component, if
// anything.
func (s *collectionStore) registration(key string) *registered {
	if s.comps == nil {
		return nil
	}
	r, _ := s.comps.Get(key)
	return r
}

// ownsDeployment says whether the deployment's updates come to this
// member: its key's partition of policy.segments is one it holds. Callers
// hold mu.
func (s *collectionStore) ownsDeployment(dep string) bool {
	return dep != "" && s.segParts > 0 && s.owned[runtime.KeyPartition(dep, s.segParts)]
}

// decode decodes a component.policies value.
func (s *collectionStore) decode(ctx context.Context, key string, raw []byte) (*events.ComponentPolicies, error) {
	cp, err := runtime.DecodeAs[*events.ComponentPolicies](ctx, s.codec, raw)
	if err != nil {
		return nil, fmt.Errorf("decode component.policies of %s: %w", key, err)
	}
	return cp, nil
}

// lookup is the component's latest collection as held: our own latest
// write, or the committed one. elsewhere says none is held here but
// component.policies has one (executor.fetch reads it).
func (s *collectionStore) lookup(id string) (cp *events.ComponentPolicies, elsewhere bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.overlay[id]; ok {
		return o.k.collection(id), false
	}
	_, other := s.elsewhere[id]
	return s.committed[id].collection(id), other
}

// fetched keeps the collection executor.fetch read for a component
// (latest: its last value; nil, none) and returns what is held for it
// now: the follower may have got there first.
func (s *collectionStore) fetched(ctx context.Context, id string, latest []byte) *events.ComponentPolicies {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.committed[id]; ok { // the follower got there first
		return k.collection(id)
	}
	delete(s.elsewhere, id)
	if latest == nil {
		return nil
	}
	cp, err := s.decode(ctx, id, latest)
	if err != nil {
		s.log.Error().Err(err).Str("component_id", id).Msg("committed collection unreadable; the component gathers anew")
		return nil
	}
	k := compact(id, cp, s.registration(id))
	s.committed[id] = k
	s.log.Info().Str("component_id", id).Int64("generation", cp.Generation).
		Msg("read the collection of a component that moved to a deployment of this member's")
	return k.collection(id)
}

// own adds policy.segments partitions (of n) to those held and says
// whether any was gained (or the partition count changed): the
// collections it skipped before are then to be read again.
func (s *collectionStore) own(n int, ps []int32) (gained bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gained = n != s.segParts
	s.segParts = n
	for _, p := range ps {
		gained = gained || !s.owned[p]
		s.owned[p] = true
	}
	return gained
}

// disown gives up policy.segments partitions: the collections of the
// components this member may no longer update go.
func (s *collectionStore) disown(lost []int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range lost {
		delete(s.owned, p)
	}
	for key, k := range s.committed {
		if !s.keep(key, k.deploymentID) {
			delete(s.committed, key)
			s.elsewhere[key] = struct{}{}
		}
	}
}

// wrote records the collections produced for an update read from a
// policy.segments partition, until they are read back.
func (s *collectionStore) wrote(writes []written, partition int32) {
	entries := make([]overlayEntry, len(writes))
	// The writes of an update share one copy of its id, and those that
	// hold the same policies one look-up of their list.
	var updateID string
	var last lastList
	for i, w := range writes {
		id := w.cp.ComponentID
		if w.cp.UpdateID != updateID || updateID == "" {
			updateID = strings.Clone(w.cp.UpdateID)
		}
		entries[i] = overlayEntry{k: compactAfter(&last, id, w.cp, s.registration(id)), updateID: updateID,
			size: len(w.raw), sum: sumOf(w.raw), partition: partition}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range writes {
		s.overlay[strings.Clone(w.cp.ComponentID)] = entries[i]
	}
}

// dropOverlay forgets the collections written for a partition's updates.
func (s *collectionStore) dropOverlay(p int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, o := range s.overlay {
		if o.partition == p {
			delete(s.overlay, id)
		}
	}
}

// counts are how many collections are kept here and how many components
// have one elsewhere.
func (s *collectionStore) counts() (kept, elsewhere int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.committed), len(s.elsewhere)
}

// current is the component's latest collection: our own latest write, or
// the committed one (compacted: only what Next reads, see kept). A
// committed value that could not be decoded counts as none, so
// the component gathers its whole collection anew. The caller must not
// change what it returns.
func (e *executor) current(ctx context.Context, id string) (*events.ComponentPolicies, error) {
	cp, elsewhere := e.cols.lookup(id)
	if cp != nil || !elsewhere {
		return cp, nil
	}
	return e.fetch(ctx, id)
}

// fetch reads a component's latest collection from component.policies:
// one whose collection was not kept (another member's deployment) and
// whose registration has since moved to a deployment of this member's.
// It reads the one partition the component's key lives on. Callers hold
// mu.
func (e *executor) fetch(ctx context.Context, id string) (*events.ComponentPolicies, error) {
	n, err := runtime.TopicPartitions(ctx, e.env.Kafka, topology.ComponentPolicies)
	if err != nil {
		return nil, fmt.Errorf("executor: read the collection of component %s: %w", id, err)
	}
	var latest []byte
	p := runtime.KeyPartition(id, int(n))
	err = runtime.ReadPartitions(ctx, e.env.Kafka, topology.ComponentPolicies, []int32{p}, func(r *kgo.Record) error {
		if string(r.Key) == id {
			latest = bytes.Clone(r.Value)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("executor: read the collection of component %s from %s[%d]: %w", id, topology.ComponentPolicies, p, err)
	}
	return e.cols.fetched(ctx, id, latest), nil
}
