package northapi

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// keyedView is a compacted topic as a map of what each key's latest record
// becomes (build): the views whose records are parsed or compiled once as
// they are read. A tombstone deletes its key; a record build cannot decode
// is an error of the view's reader.
type keyedView[T any] struct {
	build func(ctx context.Context, id string, raw []byte) (*T, error)
	mu    sync.RWMutex
	byID  map[string]*T
}

func newKeyedView[T any](build func(ctx context.Context, id string, raw []byte) (*T, error)) *keyedView[T] {
	return &keyedView[T]{build: build, byID: map[string]*T{}}
}

func (v *keyedView[T]) apply(ctx context.Context, rec *kgo.Record) error {
	id := string(rec.Key)
	if rec.Value == nil {
		v.mu.Lock()
		delete(v.byID, id)
		v.mu.Unlock()
		return nil
	}
	t, err := v.build(ctx, id, rec.Value)
	if err != nil {
		return err
	}
	v.mu.Lock()
	v.byID[id] = t
	v.mu.Unlock()
	return nil
}

func (v *keyedView[T]) get(id string) (*T, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	t, ok := v.byID[id]
	return t, ok
}

// sorted returns every value, by key.
func (v *keyedView[T]) sorted() []*T {
	v.mu.RLock()
	defer v.mu.RUnlock()
	ids := make([]string, 0, len(v.byID))
	for id := range v.byID {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, cmp.Compare[string])
	out := make([]*T, len(ids))
	for i, id := range ids {
		out[i] = v.byID[id]
	}
	return out
}

// find returns the key of a value match accepts, if any.
func (v *keyedView[T]) find(match func(*T) bool) (string, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for id, t := range v.byID {
		if match(t) {
			return id, true
		}
	}
	return "", false
}
