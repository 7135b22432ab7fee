// Command pdpsim runs a simulated ONAP policy engine (PDP): POST /getConfig
// over policy versions loaded through its admin API (PUT /sim/policies,
// DELETE /sim/policies/{policyName}, GET /sim/policies), sending a PDP
// notification to --notify-url (with the bearer token of --notify-token)
// after every change. It prints
// `pdpsim listening on <addr>` once it accepts connections.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/pdpsim/pdp"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "pdpsim:", err)
		os.Exit(1)
	}
}

// errUsage marks command-line errors the flag package has already printed.
var errUsage = errors.New("usage")

type config struct {
	listen    string
	seed      bool
	notifyURL string
	// notifyToken is the bearer token sent with each notification.
	notifyToken string
	logLevel    string
	logFormat   string
}

func parseFlags(args []string) (config, error) {
	var c config
	fs, err := newFlags(&c)
	if err != nil {
		return c, err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, errUsage
	}
	if err := runtime.CheckLogFormat(c.logFormat); err != nil {
		return c, fmt.Errorf("PF_LOG_FORMAT: %w", err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "pdpsim: unexpected arguments %q\n", fs.Args())
		return c, errUsage
	}
	return c, nil
}

// newFlags is pdpsim's command line, filled into c on Parse.
func newFlags(c *config) (*flag.FlagSet, error) {
	fs := flag.NewFlagSet("pdpsim", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: pdpsim [flags]\n\nSimulates an ONAP policy engine (PDP) for policyflow.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	seed, err := strconv.ParseBool(runtime.EnvOr("PF_PDPSIM_SEED", "false"))
	if err != nil {
		return nil, fmt.Errorf("PF_PDPSIM_SEED=%q: want true or false", os.Getenv("PF_PDPSIM_SEED"))
	}
	fs.StringVar(&c.listen, "listen", runtime.EnvOr("PF_PDPSIM_LISTEN", "127.0.0.1:8181"),
		"host:port to serve on; port 0 picks a free one (env PF_PDPSIM_LISTEN)")
	fs.BoolVar(&c.seed, "seed", seed,
		"load the sample policies DCAE.Config_VM_MEMORY (version 5) and DCAE.Config_VM_STORAGE (version 1) at start, without notifying (env PF_PDPSIM_SEED)")
	fs.StringVar(&c.notifyURL, "notify-url", runtime.EnvOr("PF_PDPSIM_NOTIFY_URL", ""),
		"URL that receives a PDP notification (POST, JSON) after every change, e.g. http://127.0.0.1:8080/v1/pdp/notifications (env PF_PDPSIM_NOTIFY_URL)")
	fs.StringVar(&c.notifyToken, "notify-token", runtime.EnvOr("PF_PDPSIM_NOTIFY_TOKEN", ""),
		"bearer token sent with each notification; the North API needs one of role operator or admin (env PF_PDPSIM_NOTIFY_TOKEN)")
	fs.StringVar(&c.logLevel, "log-level", runtime.EnvOr("PF_LOG_LEVEL", "info"), "debug, info, warn or error (env PF_LOG_LEVEL)")
	runtime.LogFormatFlag(fs, &c.logFormat, runtime.LogJSON)
	return fs, nil
}

func run(args []string) error {
	c, err := parseFlags(args)
	if err != nil {
		return err
	}
	log := runtime.NewLogger(os.Stderr, c.logLevel, c.logFormat == runtime.LogText).With().Str("component", "pdpsim").Logger()

	opts := []pdp.Option{pdp.WithLogger(log)}
	if c.notifyURL != "" {
		opts = append(opts, pdp.WithNotifyURL(c.notifyURL))
	}
	if c.notifyToken != "" {
		opts = append(opts, pdp.WithHTTPClient(auth.Client(c.notifyToken)))
	}
	sim := pdp.NewServer(opts...)
	if c.seed {
		for _, b := range pdp.SeedPolicies() {
			if _, err := sim.Put(b); err != nil {
				return fmt.Errorf("load sample policy %s: %w", b.PolicyName(), err)
			}
		}
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.listen, err)
	}
	srv := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Printf("pdpsim listening on %s\n", ln.Addr())
	log.Info().Str("addr", ln.Addr().String()).Bool("seed", c.seed).Str("notify_url", c.notifyURL).Msg("serving")

	select {
	case err := <-errc:
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	stop() // a second signal ends the process at once
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	log.Info().Msg("stopped")
	return nil
}
