package northapi

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/runtime"
)

// applyFunc folds one record of a view's topic into the view.
type applyFunc = runtime.ApplyFunc

// reader keeps the read views live with a runtime.Follower and tracks, per
// topic, whether its view has caught up with the end the topic had when
// reading started; until then the view is not ready (for /readyz and for
// answers that need a whole view).
type reader struct {
	kafka  runtime.Kafka
	health *runtime.Health
	log    zerolog.Logger
	apply  map[string]applyFunc // full topic name -> apply

	mu  sync.Mutex
	f   *runtime.Follower
	why map[string]string // full topic name -> why it is not ready; "" once ready
	up  chan struct{}     // closed once f is set
}

func newReader(k runtime.Kafka, health *runtime.Health, log zerolog.Logger, apply map[string]applyFunc) *reader {
	r := &reader{kafka: k, health: health, log: log, apply: apply, why: map[string]string{}, up: make(chan struct{})}
	for t := range apply {
		r.setWhy(t, "reading "+t+" from the start")
	}
	return r
}

func (r *reader) topics() []string {
	out := make([]string, 0, len(r.apply))
	for t := range r.apply {
		out = append(out, t)
	}
	return out
}

func (r *reader) healthName(topic string) string {
	return "north-api view " + strings.TrimPrefix(topic, r.kafka.Prefix)
}

// run follows the views' topics until ctx is done.
func (r *reader) run(ctx context.Context) error {
	bases := map[string]runtime.ApplyFunc{}
	for t, fn := range r.apply {
		bases[strings.TrimPrefix(t, r.kafka.Prefix)] = fn
	}
	f, err := runtime.Follow(r.kafka, r.log, bases)
	if err != nil {
		return err
	}
	defer f.Close()
	r.mu.Lock()
	r.f = f
	close(r.up)
	r.mu.Unlock()
	defer func() {
		for t := range r.apply {
			r.health.Forget(r.healthName(t))
		}
	}()
	var wg sync.WaitGroup
	for t := range r.apply {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.catchUp(ctx, f, t)
		}()
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

// catchUp waits until topic's view has read what the topic held at the
// first successful listing; a missing topic is retried until it exists.
func (r *reader) catchUp(ctx context.Context, f *runtime.Follower, topic string) {
	for attempt := 0; ; attempt++ {
		err := f.WaitCaughtUp(ctx, strings.TrimPrefix(topic, r.kafka.Prefix))
		if err == nil {
			r.setWhy(topic, "")
			r.log.Info().Str("topic", topic).Msg("read view caught up")
			return
		}
		if ctx.Err() != nil {
			return
		}
		r.setWhy(topic, err.Error())
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(min(attempt+1, 10)) * 500 * time.Millisecond):
		}
	}
}

func (r *reader) setWhy(topic, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.why[topic] = why
	if why == "" {
		r.health.Ready(r.healthName(topic))
	} else {
		r.health.NotReady(r.healthName(topic), why)
	}
}

// ready reports whether topic's view is caught up, and why not.
func (r *reader) ready(topic string) (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.why[topic] == "", r.why[topic]
}

// waitFor waits until the view of topic has read the record at offset of
// partition (or ctx ends).
func (r *reader) waitFor(ctx context.Context, topic string, partition int32, offset int64) error {
	select {
	case <-r.up:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.f.WaitFor(ctx, strings.TrimPrefix(topic, r.kafka.Prefix), partition, offset)
}
