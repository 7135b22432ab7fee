package web

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/runtime"
)

// View is a read view of one topic: a runtime.Table (or TableOf), or one
// topic of a fold of several.
type View interface {
	// Base is the topic's base name.
	Base() string
	// WaitCaughtUp returns once the view holds what the topic held.
	WaitCaughtUp(ctx context.Context) error
}

// Views are the read views an API answers from, and whether each has
// caught up with the end its topic had when reading started; until then
// it is not ready (for /readyz, /healthcheck and the answers that need a
// whole view: Need).
type Views struct {
	kafka  runtime.Kafka
	health *runtime.Health
	log    zerolog.Logger

	mu    sync.Mutex
	views []View
	why   map[string]string // base -> why it is not ready; "" once ready
	close []func()
}

// NewViews is an empty set of views, marked on health as it catches up.
func NewViews(k runtime.Kafka, health *runtime.Health, log zerolog.Logger) *Views {
	return &Views{kafka: k, health: health, log: log, why: map[string]string{}}
}

// Add adds a view, not ready until Run sees it caught up.
func (v *Views) Add(views ...View) {
	for _, view := range views {
		v.views = append(v.views, view)
		v.setWhy(view.Base(), "reading "+v.kafka.Topic(view.Base())+" from the start")
	}
}

// OnClose has Close call close (a view's follower's).
func (v *Views) OnClose(close func()) { v.close = append(v.close, close) }

// Close stops every view. Call it after Run returned.
func (v *Views) Close() {
	for _, c := range v.close {
		c()
	}
}

func (v *Views) healthName(base string) string { return "north-api view " + base }

// Run watches every view catch up (a missing topic is retried until it
// exists), then waits until ctx is done.
func (v *Views) Run(ctx context.Context) error {
	defer func() {
		for _, view := range v.views {
			v.health.Forget(v.healthName(view.Base()))
		}
	}()
	var wg sync.WaitGroup
	for _, view := range v.views {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v.catchUp(ctx, view)
		}()
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

func (v *Views) catchUp(ctx context.Context, view View) {
	for attempt := 0; ; attempt++ {
		err := view.WaitCaughtUp(ctx)
		if err == nil {
			v.setWhy(view.Base(), "")
			v.log.Info().Str("topic", v.kafka.Topic(view.Base())).Msg("read view caught up")
			return
		}
		if ctx.Err() != nil {
			return
		}
		v.setWhy(view.Base(), err.Error())
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(min(attempt+1, 10)) * 500 * time.Millisecond):
		}
	}
}

func (v *Views) setWhy(base, why string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.why[base] = why
	if why == "" {
		v.health.Ready(v.healthName(base))
	} else {
		v.health.NotReady(v.healthName(base), why)
	}
}

// ready reports whether the view of base is caught up, and why not.
func (v *Views) ready(base string) (bool, string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.why[base] == "", v.why[base]
}

// Ready reports whether every view has caught up.
func (v *Views) Ready() bool {
	for _, s := range v.States() {
		if s != "" {
			return false
		}
	}
	return true
}

// States is, per full topic name, "" for a view caught up and why not for
// the others.
func (v *Views) States() map[string]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]string, len(v.why))
	for b, why := range v.why {
		out[v.kafka.Topic(b)] = why
	}
	return out
}

// Topics lists the views' full topic names, sorted.
func (v *Views) Topics() []string {
	var out []string
	for t := range v.States() {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Need answers 503 while one of the named topics' views has not caught
// up, so no answer is built from a partial view.
func (v *Views) Need(bases ...string) *Error {
	for _, b := range bases {
		if ok, why := v.ready(b); !ok {
			return Errorf(http.StatusServiceUnavailable, "the North API is still reading %s (%s); retry in a few seconds", v.kafka.Topic(b), why)
		}
	}
	return nil
}
