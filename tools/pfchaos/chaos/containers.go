package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"time"
)

// DefaultConsulImage is the image of the Consul servers of the containers
// faults (deploy/build-images.sh consul builds it FROM scratch).
const DefaultConsulImage = "policyflow/consul:dev"

// cluster is three Consul servers and a client agent in containers on a
// network of their own; the stack talks to the client agent, as a
// deployment talks to its node's agent, which forwards to the leader.
type cluster struct {
	name    string // prefix of the containers, and the network
	servers []string
	client  string
	addr    string // the client agent's HTTP API, from this host
}

// docker runs the docker CLI and returns its trimmed output.
func docker(ctx context.Context, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// DockerWorks reports whether a Docker engine answers.
func DockerWorks(ctx context.Context) error {
	_, err := docker(ctx, "info", "--format", "{{.ServerVersion}}")
	return err
}

func startCluster(ctx context.Context, image string) (c *cluster, err error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	c = &cluster{name: "pfchaos-" + hex.EncodeToString(b)}
	defer func() {
		if err != nil {
			c.remove()
			c = nil
		}
	}()
	if _, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", image); err != nil {
		return c, fmt.Errorf("the Consul image %s is not here (build it with deploy/build-images.sh consul): %w", image, err)
	}
	if _, err := docker(ctx, "network", "create", "--label", "policyflow.pfchaos=1", c.name); err != nil {
		return c, err
	}
	var join []string
	for i := 1; i <= 3; i++ {
		join = append(join, fmt.Sprintf("-retry-join=%s-server%d", c.name, i))
	}
	agent := func(name string, extra ...string) error {
		args := append([]string{"run", "-d", "--name", name, "--hostname", name, "--network", c.name, "--label", "policyflow.pfchaos=1",
			"--tmpfs", "/data", "-p", "127.0.0.1::8500", image,
			"agent", "-node=" + name, "-client=0.0.0.0", "-data-dir=/data", "-log-level=warn",
			"-hcl", "disable_update_check = true", "-hcl", "performance { raft_multiplier = 1 }"}, extra...)
		_, err := docker(ctx, append(args, join...)...)
		return err
	}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("%s-server%d", c.name, i)
		c.servers = append(c.servers, name)
		if err := agent(name, "-server", "-bootstrap-expect=3"); err != nil {
			return c, err
		}
	}
	c.client = c.name + "-client"
	if err := agent(c.client); err != nil {
		return c, err
	}
	port, err := docker(ctx, "port", c.client, "8500/tcp")
	if err != nil {
		return c, err
	}
	c.addr = strings.Split(port, "\n")[0]
	if _, err := c.waitLeader(ctx, "", 2*time.Minute); err != nil {
		return c, err
	}
	return c, nil
}

// leader is the address (ip:8300) Consul names as its leader, "" when it
// has none.
func (c *cluster) leader(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.addr+"/v1/status/leader", nil)
	if err != nil {
		return "", err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var leader string
	if err := json.NewDecoder(resp.Body).Decode(&leader); err != nil {
		return "", fmt.Errorf("Consul's /v1/status/leader: %w", err)
	}
	return leader, nil
}

// waitLeader waits until Consul names a leader other than not.
func (c *cluster) waitLeader(ctx context.Context, not string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		l, err := c.leader(ctx)
		if err == nil && l != "" && l != not {
			return l, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no Consul leader (other than %q) after %s: %v", not, wait, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// killLeader kills the server that leads (SIGKILL, no leave) and waits for
// the other two to elect a new leader.
func (c *cluster) killLeader(ctx context.Context) error {
	l, err := c.waitLeader(ctx, "", time.Minute)
	if err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(l)
	for _, s := range c.servers {
		ip, err := docker(ctx, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", s)
		if err != nil || ip != host {
			continue
		}
		if _, err := docker(ctx, "kill", s); err != nil {
			return err
		}
		_, err = c.waitLeader(ctx, l, 2*time.Minute)
		return err
	}
	return fmt.Errorf("no server of %v has the leader's address %s", c.servers, l)
}

// remove deletes the containers and the network.
func (c *cluster) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := append(append([]string(nil), c.servers...), c.client)
	var live []string
	for _, n := range names {
		if n != "" {
			live = append(live, n)
		}
	}
	if len(live) > 0 {
		_, _ = docker(ctx, append([]string{"rm", "-f", "-v"}, live...)...)
	}
	_, _ = docker(ctx, "network", "rm", c.name)
}
