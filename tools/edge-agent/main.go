// Command edge-agent is the reference edge agent of node management: it
// registers its node with the hub's North API, long-polls the node's
// directive and upgrades itself as node management policies say (see
// package edgeagent and README.md).
package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/nmp/constraint"
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

// settings are what edge-agent's flags set.
type settings struct {
	hub, token, tokenFile, nodeTokenFile, caFile, org, node, stateDir, version string
	pattern, props, install, restart, logLevel                                 string
	trusted, cons                                                              multi
	insecure                                                                   bool
	pollWait, cmdTimeout                                                       time.Duration
	maxUnpacked                                                                int64
	downloads                                                                  int
	// keys are the public keys of the --trusted-key files.
	keys []ed25519.PublicKey
	// properties are --properties, decoded.
	properties []constraint.Property
}

// newFlags is edge-agent's command line, filled into st on Parse.
func newFlags(st *settings) *flag.FlagSet {
	fs := flag.NewFlagSet("edge-agent", flag.ContinueOnError)
	fs.StringVar(&st.hub, "hub", env("PF_HUB", "http://127.0.0.1:8080"), "the hub's North API (env PF_HUB)")
	fs.StringVar(&st.token, "token", os.Getenv("PF_TOKEN"), "the org token (role agent) the node registers with once, when it has no own token yet (env PF_TOKEN)")
	fs.StringVar(&st.tokenFile, "token-file", os.Getenv("PF_TOKEN_FILE"), "file holding the org token (env PF_TOKEN_FILE)")
	fs.StringVar(&st.nodeTokenFile, "node-token-file", os.Getenv("PF_NODE_TOKEN_FILE"), "file keeping the node's own token, issued at registration (mode 0600); default <state-dir>/node.token (env PF_NODE_TOKEN_FILE)")
	if v := os.Getenv("PF_TRUSTED_KEYS"); v != "" {
		st.trusted = strings.Split(v, ",")
	}
	fs.Var(&st.trusted, "trusted-key", "PEM file of a public key agent packages must be signed with (the .pub of policyctl agentpackage keygen); repeatable; required (env PF_TRUSTED_KEYS, comma separated)")
	fs.StringVar(&st.caFile, "ca-file", os.Getenv("PF_CA_FILE"), "PEM CA bundle the hub's HTTPS certificate is checked against; default the system's (env PF_CA_FILE)")
	fs.BoolVar(&st.insecure, "insecure", false, "allow a plain http:// --hub, which anyone on the network path can read and answer; only for development")
	fs.StringVar(&st.org, "org", os.Getenv("PF_ORG"), "the node's org (env PF_ORG)")
	fs.StringVar(&st.node, "node", os.Getenv("PF_NODE"), "the node id (env PF_NODE)")
	fs.StringVar(&st.stateDir, "state-dir", env("PF_STATE_DIR", "/var/lib/policyflow-agent"), "where the agent keeps its position and unpacked packages (env PF_STATE_DIR)")
	fs.StringVar(&st.version, "version", env("PF_AGENT_VERSION", ""), "the installed agent version when the state directory is new (env PF_AGENT_VERSION)")
	fs.StringVar(&st.pattern, "pattern", "", "the pattern the node uses (org/name), for a pattern node")
	fs.StringVar(&st.props, "properties", "", `node policy properties, JSON: [{"name":"arch","value":"amd64"}]`)
	fs.Var(&st.cons, "constraint", "node policy constraint (repeatable)")
	fs.StringVar(&st.install, "install-cmd", env("PF_INSTALL_CMD", ""), "command run per package directory, without a shell: <cmd> <dir name> <dir path> <version> (words split on spaces; env PF_INSTALL_CMD)")
	fs.StringVar(&st.restart, "restart-cmd", env("PF_RESTART_CMD", ""), "command run after a successful install (env PF_RESTART_CMD)")
	fs.DurationVar(&st.pollWait, "poll-wait", 60*time.Second, "long poll wait")
	fs.DurationVar(&st.cmdTimeout, "cmd-timeout", 5*time.Minute, "timeout of the install and restart commands")
	fs.Int64Var(&st.maxUnpacked, "max-unpacked-bytes", nmp.DefaultMaxUnpackedBytes, "largest decompressed size of an agent package; a package decompressing to more (a gzip bomb) is refused before anything is unpacked")
	fs.IntVar(&st.downloads, "download-attempts", envInt("PF_DOWNLOAD_ATTEMPTS", edgeagent.DefaultDownloadAttempts), "how many times a package download is tried, with backoff, before the node reports download failed (env PF_DOWNLOAD_ATTEMPTS)")
	fs.StringVar(&st.logLevel, "log-level", env("PF_LOG_LEVEL", "info"), "log level")
	return fs
}

// parse reads the command line and checks it: what main runs the agent
// with (a test sets each flag and checks it reaches the settings).
func parse(args []string) (*settings, error) {
	st := &settings{}
	fs := newFlags(st)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("edge-agent takes no arguments, got %q; every setting is a flag (see -h)", fs.Args())
	}
	if st.tokenFile != "" && st.token == "" {
		b, err := os.ReadFile(st.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("read --token-file: %w", err)
		}
		st.token = strings.TrimSpace(string(b))
	}
	if st.org == "" || st.node == "" || st.version == "" || st.install == "" {
		return nil, errors.New("--org, --node, --version and --install-cmd are required (and --token or --token-file until the node has its own token)")
	}
	for _, path := range st.trusted {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read --trusted-key: %w", err)
		}
		k, err := nmp.ParseTrustedKeys(data)
		if err != nil {
			return nil, fmt.Errorf("--trusted-key %s: %w", path, err)
		}
		st.keys = append(st.keys, k...)
	}
	if st.props != "" {
		dec := json.NewDecoder(strings.NewReader(st.props))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&st.properties); err != nil {
			return nil, fmt.Errorf(`--properties: want a JSON list such as [{"name":"arch","value":"amd64"}]: %v`, err)
		}
	}
	return st, nil
}

func main() {
	st, err := parse(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	fail := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "edge-agent: "+format+"\n", a...)
		os.Exit(2)
	}
	if err != nil {
		fail("%v", err)
	}
	transport, err := edgeagent.Transport(st.caFile)
	if err != nil {
		fail("%v", err)
	}
	reg := api.NodeRequest{Pattern: st.pattern, Properties: st.properties, Constraints: st.cons}
	cfg := edgeagent.Config{
		Client: &edgeagent.Client{Hub: st.hub, Token: st.token, Org: st.org, Node: st.node,
			HTTP: &http.Client{Timeout: st.pollWait + 30*time.Second, Transport: transport}},
		NodeTokenFile:    st.nodeTokenFile,
		TrustedKeys:      st.keys,
		InsecureHTTP:     st.insecure,
		StateDir:         st.stateDir,
		InitialVersion:   st.version,
		Registration:     reg,
		InstallCmd:       strings.Fields(st.install),
		RestartCmd:       strings.Fields(st.restart),
		CmdTimeout:       st.cmdTimeout,
		PollWait:         st.pollWait,
		MaxUnpackedBytes: st.maxUnpacked,
		DownloadAttempts: st.downloads,
		Log:              runtime.NewLogger(os.Stderr, st.logLevel, false).With().Str("node", st.org+"/"+st.node).Logger(),
	}
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
