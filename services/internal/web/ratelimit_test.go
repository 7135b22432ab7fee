package web

import (
	"testing"
	"time"
)

func TestLimiterIsATokenBucketPerKey(t *testing.T) {
	now := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	l := NewLimiter(RateLimit{PerSecond: 2, Burst: 3})
	l.now = func() time.Time { return now }
	for i := range 3 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, wait := l.Allow("a")
	if ok || wait != 500*time.Millisecond {
		t.Errorf("over the burst: allowed %v, wait %s; want refused, 500ms", ok, wait)
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Error("another key shares the first one's bucket")
	}
	now = now.Add(500 * time.Millisecond)
	if ok, _ := l.Allow("a"); !ok {
		t.Error("refused after the bucket refilled one token")
	}
	if ok, _ := l.Allow("a"); ok {
		t.Error("allowed a second request after one token was refilled")
	}
	// Buckets that refilled are dropped by the sweep.
	now = now.Add(2 * time.Minute)
	l.Allow("c")
	if _, kept := l.buckets["a"]; kept {
		t.Error("a full bucket was not swept")
	}
	off := NewLimiter(RateLimit{Off: true})
	for range 1000 {
		if ok, _ := off.Allow("a"); !ok {
			t.Fatal("a Limiter that is off refused a request")
		}
	}
}
