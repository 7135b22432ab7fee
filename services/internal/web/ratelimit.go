package web

import (
	"sync"
	"time"
)

// Rate limit defaults: enough for policyctl, a deployment system and a
// PDP's notifications, not for one client to crowd out the others.
const (
	DefaultRatePerSecond = 50
	DefaultRateBurst     = 100
)

// RateLimit bounds the requests of one client: a token bucket per token
// name, or per client address for requests without a known token. The
// zero value takes the defaults.
type RateLimit struct {
	// PerSecond is the sustained rate (default DefaultRatePerSecond).
	PerSecond float64
	// Burst is how many requests may come at once (default DefaultRateBurst).
	Burst int
	// Off turns the limit off.
	Off bool
}

// Limiter is a token bucket per key (NewLimiter). Buckets idle long enough to be full
// again are dropped, so addresses that came once do not pile up.
type Limiter struct {
	rate  float64
	burst int
	off   bool
	now   func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// NewLimiter is a limiter of l, its zero fields taking the defaults.
func NewLimiter(l RateLimit) *Limiter {
	if l.PerSecond <= 0 {
		l.PerSecond = DefaultRatePerSecond
	}
	if l.Burst <= 0 {
		l.Burst = DefaultRateBurst
	}
	return &Limiter{rate: l.PerSecond, burst: l.Burst, off: l.Off, now: time.Now, buckets: map[string]*bucket{}}
}

// Allow takes a token from key's bucket; when there is none it says how
// long until there is.
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	if l.off {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sweep(now)
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: float64(l.burst), last: now}
		l.buckets[key] = b
	}
	b.tokens = min(float64(l.burst), b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// sweep drops, at most once a minute, the buckets that have refilled.
func (l *Limiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Minute {
		return
	}
	l.lastSweep = now
	full := time.Duration(float64(l.burst) / l.rate * float64(time.Second))
	for k, b := range l.buckets {
		if now.Sub(b.last) >= full {
			delete(l.buckets, k)
		}
	}
}

// Rate is the sustained rate a client may have, per second.
func (l *Limiter) Rate() float64 { return l.rate }

// Burst is how many requests a client may send at once.
func (l *Limiter) Burst() int { return l.burst }
