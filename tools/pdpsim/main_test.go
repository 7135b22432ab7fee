package main

import (
	"errors"
	"testing"
)

func TestParseFlags(t *testing.T) {
	t.Setenv("PF_PDPSIM_LISTEN", "")
	t.Setenv("PF_PDPSIM_SEED", "")
	t.Setenv("PF_PDPSIM_NOTIFY_URL", "")
	t.Setenv("PF_PDPSIM_NOTIFY_TOKEN", "")
	c, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != "127.0.0.1:8181" || c.seed || c.notifyURL != "" || c.notifyToken != "" {
		t.Fatalf("defaults = %+v", c)
	}

	c, err = parseFlags([]string{"--listen", "127.0.0.1:0", "--seed", "--notify-url", "http://127.0.0.1:8080/v1/pdp/notifications"})
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != "127.0.0.1:0" || !c.seed || c.notifyURL != "http://127.0.0.1:8080/v1/pdp/notifications" {
		t.Fatalf("flags = %+v", c)
	}

	t.Setenv("PF_PDPSIM_SEED", "true")
	t.Setenv("PF_PDPSIM_NOTIFY_URL", "http://north/v1/pdp/notifications")
	t.Setenv("PF_PDPSIM_NOTIFY_TOKEN", "tok")
	if c, err = parseFlags(nil); err != nil || !c.seed || c.notifyURL != "http://north/v1/pdp/notifications" || c.notifyToken != "tok" {
		t.Fatalf("env: %+v, %v", c, err)
	}

	t.Setenv("PF_PDPSIM_SEED", "maybe")
	if _, err := parseFlags(nil); err == nil {
		t.Fatalf("PF_PDPSIM_SEED=maybe accepted")
	}
	t.Setenv("PF_PDPSIM_SEED", "")
	if _, err := parseFlags([]string{"extra"}); !errors.Is(err, errUsage) {
		t.Fatalf("extra argument: %v", err)
	}
	if _, err := parseFlags([]string{"--no-such-flag"}); !errors.Is(err, errUsage) {
		t.Fatalf("unknown flag: %v", err)
	}
}
