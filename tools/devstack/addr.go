package devstack

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// FreeAddr returns a loopback host:port that was free a moment ago. Another
// process may take it before the caller binds it, so callers that can retry
// should.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free loopback port: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("release free port %s: %w", addr, err)
	}
	return addr, nil
}

// freePorts returns n distinct loopback ports free a moment ago, none of
// them in taken. Each listener is held until all are picked: closed one by
// one, the kernel may hand the same port out twice, and a Consul agent
// given one port for two uses does not start.
func freePorts(n int, taken ...int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for len(ports) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free loopback port: %w", err)
		}
		lns = append(lns, ln)
		if p := ln.Addr().(*net.TCPAddr).Port; !slices.Contains(taken, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

func freePort() (int, error) {
	addr, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("parse free address %s: %w", addr, err)
	}
	return strconv.Atoi(p)
}

// splitHostPort parses host:port where the port may be 0 (pick one).
func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("parse address %q (want host:port): %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("parse address %q: port %q is not a number between 0 and 65535", addr, p)
	}
	return host, port, nil
}

// isUnspecified reports whether host means "every interface".
func isUnspecified(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// RepoRoot returns the policyflow checkout that holds the working
// directory: the nearest parent directory with a go.work file.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("find repository root: look for go.work in %s: %w", dir, err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.work in the working directory or any parent")
		}
		dir = parent
	}
}
