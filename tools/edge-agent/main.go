// Command edge-agent is the reference edge agent of node management: it
// registers its node with the hub's North API, long-polls the node's
// directive and upgrades itself as node management policies say (see
// package edgeagent and README.md).
package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/edge-agent/edgeagent"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func env(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

// envInt is the integer in the environment variable k, or d.
func envInt(k string, d int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return n
	}
	return d
}

func main() {
	fs := flag.NewFlagSet("edge-agent", flag.ContinueOnError)
	hub := fs.String("hub", env("PF_HUB", "http://127.0.0.1:8080"), "the hub's North API (env PF_HUB)")
	token := fs.String("token", os.Getenv("PF_TOKEN"), "the org token (role agent) the node registers with once, when it has no own token yet (env PF_TOKEN)")
	tokenFile := fs.String("token-file", os.Getenv("PF_TOKEN_FILE"), "file holding the org token (env PF_TOKEN_FILE)")
	nodeTokenFile := fs.String("node-token-file", os.Getenv("PF_NODE_TOKEN_FILE"), "file keeping the node's own token, issued at registration (mode 0600); default <state-dir>/node.token (env PF_NODE_TOKEN_FILE)")
	var trusted multi
	if v := os.Getenv("PF_TRUSTED_KEYS"); v != "" {
		trusted = strings.Split(v, ",")
	}
	fs.Var(&trusted, "trusted-key", "PEM file of a public key agent packages must be signed with (the .pub of policyctl agentpackage keygen); repeatable; required (env PF_TRUSTED_KEYS, comma separated)")
	caFile := fs.String("ca-file", os.Getenv("PF_CA_FILE"), "PEM CA bundle the hub's HTTPS certificate is checked against; default the system's (env PF_CA_FILE)")
	insecure := fs.Bool("insecure", false, "allow a plain http:// --hub, which anyone on the network path can read and answer; only for development")
	org := fs.String("org", os.Getenv("PF_ORG"), "the node's org (env PF_ORG)")
	node := fs.String("node", os.Getenv("PF_NODE"), "the node id (env PF_NODE)")
	stateDir := fs.String("state-dir", env("PF_STATE_DIR", "/var/lib/policyflow-agent"), "where the agent keeps its position and unpacked packages (env PF_STATE_DIR)")
	version := fs.String("version", env("PF_AGENT_VERSION", ""), "the installed agent version when the state directory is new (env PF_AGENT_VERSION)")
	pattern := fs.String("pattern", "", "the pattern the node uses (org/name), for a pattern node")
	props := fs.String("properties", "", `node policy properties, JSON: [{"name":"arch","value":"amd64"}]`)
	var cons multi
	fs.Var(&cons, "constraint", "node policy constraint (repeatable)")
	install := fs.String("install-cmd", env("PF_INSTALL_CMD", ""), "command run per package directory, without a shell: <cmd> <dir name> <dir path> <version> (words split on spaces; env PF_INSTALL_CMD)")
	restart := fs.String("restart-cmd", env("PF_RESTART_CMD", ""), "command run after a successful install (env PF_RESTART_CMD)")
	pollWait := fs.Duration("poll-wait", 60*time.Second, "long poll wait")
	cmdTimeout := fs.Duration("cmd-timeout", 5*time.Minute, "timeout of the install and restart commands")
	maxUnpacked := fs.Int64("max-unpacked-bytes", nmp.DefaultMaxUnpackedBytes, "largest decompressed size of an agent package; a package decompressing to more (a gzip bomb) is refused before anything is unpacked")
	downloads := fs.Int("download-attempts", envInt("PF_DOWNLOAD_ATTEMPTS", edgeagent.DefaultDownloadAttempts), "how many times a package download is tried, with backoff, before the node reports download failed (env PF_DOWNLOAD_ATTEMPTS)")
	logLevel := fs.String("log-level", env("PF_LOG_LEVEL", "info"), "log level")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	fail := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "edge-agent: "+format+"\n", a...)
		os.Exit(2)
	}
	if *tokenFile != "" && *token == "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fail("read --token-file: %v", err)
		}
		*token = strings.TrimSpace(string(b))
	}
	if *org == "" || *node == "" || *version == "" || *install == "" {
		fail("--org, --node, --version and --install-cmd are required (and --token or --token-file until the node has its own token)")
	}
	var keys []ed25519.PublicKey
	for _, path := range trusted {
		data, err := os.ReadFile(path)
		if err != nil {
			fail("read --trusted-key: %v", err)
		}
		k, err := nmp.ParseTrustedKeys(data)
		if err != nil {
			fail("--trusted-key %s: %v", path, err)
		}
		keys = append(keys, k...)
	}
	transport, err := edgeagent.Transport(*caFile)
	if err != nil {
		fail("%v", err)
	}
	reg := edgeagent.Registration{Pattern: *pattern, Constraints: cons}
	if *props != "" {
		if !json.Valid([]byte(*props)) {
			fail("--properties is not JSON")
		}
		reg.Properties = json.RawMessage(*props)
	}
	cfg := edgeagent.Config{
		Client: &edgeagent.Client{Hub: *hub, Token: *token, Org: *org, Node: *node,
			HTTP: &http.Client{Timeout: *pollWait + 30*time.Second, Transport: transport}},
		NodeTokenFile:    *nodeTokenFile,
		TrustedKeys:      keys,
		InsecureHTTP:     *insecure,
		StateDir:         *stateDir,
		InitialVersion:   *version,
		Registration:     reg,
		InstallCmd:       strings.Fields(*install),
		RestartCmd:       strings.Fields(*restart),
		CmdTimeout:       *cmdTimeout,
		PollWait:         *pollWait,
		MaxUnpackedBytes: *maxUnpacked,
		Log:              runtime.NewLogger(os.Stderr, *logLevel, false).With().Str("node", *org+"/"+*node).Logger(),
	}
	cfg.DownloadAttempts = *downloads
	a, err := edgeagent.New(cfg)
	if err != nil {
		fail("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := a.Run(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "edge-agent: %v\n", err)
		os.Exit(1)
	}
}
