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
	"os"
	"os/exec"
	"path/filepath"
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
	addr    string   // the client agent's HTTP API, from this host
	stages  []string // stage containers
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
			c.remove("")
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
func (c *cluster) killLeader(ctx context.Context, started func()) error {
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
		started()
		_, err = c.waitLeader(ctx, l, 2*time.Minute)
		return err
	}
	return fmt.Errorf("no server of %v has the leader's address %s", c.servers, l)
}

// remove saves the stage containers' logs in dir (not when "") and
// deletes the containers and the network.
func (c *cluster) remove(dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range c.stages {
		if dir == "" {
			break
		}
		cmd := exec.CommandContext(ctx, "docker", "logs", s)
		if out, err := cmd.CombinedOutput(); err == nil {
			_ = os.WriteFile(filepath.Join(dir, strings.TrimPrefix(s, c.name+"-")+".log"), out, 0o644)
		}
	}
	names := append(append(append([]string(nil), c.stages...), c.servers...), c.client)
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

// gateway is the cluster network's gateway: the address of this host on
// that network, where the containers reach the broker and this host
// reaches it too.
func (c *cluster) gateway(ctx context.Context) (string, error) {
	gw, err := docker(ctx, "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Gateway}}{{end}}", c.name)
	if err != nil {
		return "", err
	}
	if net.ParseIP(gw) == nil {
		return "", fmt.Errorf("network %s has no gateway address (%q)", c.name, gw)
	}
	return gw, nil
}

// runStage runs a stage's image (deploy/build-images.sh builds it) on the
// cluster network, talking to the client agent, with args; its ops port
// is published on this host's loopback, returned.
func (c *cluster) runStage(ctx context.Context, image, name string, env, args []string) (ops string, err error) {
	cname := c.name + "-" + name
	run := []string{"run", "-d", "--name", cname, "--network", c.name, "--label", "policyflow.pfchaos=1", "-p", "127.0.0.1::9090",
		"-e", "PF_CONSUL_ADDR=" + c.client + ":8500"}
	for _, e := range env {
		run = append(run, "-e", e)
	}
	if _, err := docker(ctx, append(append(run, image), args...)...); err != nil {
		return "", err
	}
	c.stages = append(c.stages, cname)
	port, err := docker(ctx, "port", cname, "9090/tcp")
	if err != nil {
		return "", err
	}
	return strings.Split(port, "\n")[0], nil
}

// disconnect cuts the stage's container off the cluster network (no
// Kafka, no Consul) for d, then connects it again.
func (c *cluster) disconnect(ctx context.Context, name string, d time.Duration, started func()) error {
	cname := c.name + "-" + name
	if _, err := docker(ctx, "network", "disconnect", c.name, cname); err != nil {
		return err
	}
	started()
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	_, err := docker(ctx, "network", "connect", c.name, cname)
	return err
}
