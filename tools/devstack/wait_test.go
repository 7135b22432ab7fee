package devstack

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitHTTPWaitsForOK(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) < 3 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	if err := WaitHTTP(context.Background(), srv.URL, time.Minute); err != nil {
		t.Fatalf("WaitHTTP: %v", err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d requests, want 3 (two 503s, then 200)", n)
	}
}

func TestWaitHTTPSaysWhatItLastGot(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "starting", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	err := WaitHTTP(context.Background(), srv.URL, 0)
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("WaitHTTP = %v, want an error naming the 503", err)
	}
}
