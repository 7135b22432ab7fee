// Package edgeagent is the reference edge agent of node management: it
// registers its node with the hub (once with the org token, then with the
// node's own token), long-polls the node's directive, and at the
// directive's start time prechecks the host, downloads the agent package
// (with retries), checks its SHA-256 and its publisher's signature, runs
// the install command for each of the package's directories, restarts,
// and reports each step. A failed download is tried again after a
// backoff; a failed install rolls the node back to its previous version,
// and that version is never tried again, a newer one is. Its position is
// kept on disk, so a restart resumes (a download is
// started again; an interrupted install is rolled back, then tried once
// more).
package edgeagent

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/north-api/auth"
)

// Config is the agent's configuration.
type Config struct {
	Client   *Client
	StateDir string
	// InitialVersion is the agent's version when the state is new.
	InitialVersion string
	Registration   api.NodeRequest
	// InstallCmd is run, without a shell, once per package directory:
	// InstallCmd... <dir name> <dir path> <version>.
	InstallCmd []string
	// RestartCmd, when set, is run after a successful install.
	RestartCmd []string
	// NodeTokenFile keeps the node's own token (default
	// <StateDir>/node.token, mode 0600). When it holds none, the agent
	// registers with Client.Token (the org token) and keeps the token the
	// hub issues; from then on it uses only the node's own token.
	NodeTokenFile string
	// CmdTimeout bounds each command (default 5m).
	CmdTimeout time.Duration
	// PollWait is the long poll's wait (default 60s).
	PollWait time.Duration
	// TrustedKeys are the public keys whose signature a package must
	// carry (nmp.CheckSignature); an unsigned or otherwise signed package
	// is refused before anything of it is unpacked. Required.
	TrustedKeys []ed25519.PublicKey
	// InsecureHTTP allows a plain http:// hub (CheckHub).
	InsecureHTTP bool
	// MaxUnpackedBytes bounds a package's decompressed size (default
	// nmp.DefaultMaxUnpackedBytes): a gzip bomb is refused.
	MaxUnpackedBytes int64
	// MaxInterrupted is how many interrupted installs of one version are
	// rolled back and tried again before the version counts as failed
	// (default 1).
	MaxInterrupted int
	// DownloadAttempts is how many times a package download is tried
	// before the node reports download failed (default 3);
	// DownloadBackoff is the wait before the second try, doubled before
	// each next one (default 1s).
	DownloadAttempts int
	DownloadBackoff  time.Duration
	// RetryBackoff is the wait before a node left at download failed
	// tries the same directive again, doubled after each further failure
	// up to MaxRetryBackoff (default 30s).
	RetryBackoff time.Duration
	// FreeBytes answers the free space of the file system holding a
	// directory, for the precheck (default: the file system's; where it
	// cannot be known the check is skipped).
	FreeBytes func(dir string) (uint64, error)
	Log       zerolog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// DefaultDownloadAttempts is how many times a download is tried, as Open
// Horizon's agent does.
const DefaultDownloadAttempts = 3

// MaxRetryBackoff bounds the wait before a node left at download failed
// tries again.
const MaxRetryBackoff = 10 * time.Minute

// Agent is one node's agent.
type Agent struct {
	cfg Config
	st  *State
	log zerolog.Logger
	// retries counts the directive's download failures in a row.
	retries int
}

// New loads the agent's state.
func New(cfg Config) (*Agent, error) {
	if cfg.CmdTimeout <= 0 {
		cfg.CmdTimeout = 5 * time.Minute
	}
	if cfg.PollWait <= 0 {
		cfg.PollWait = 60 * time.Second
	}
	if cfg.MaxInterrupted <= 0 {
		cfg.MaxInterrupted = 1
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NodeTokenFile == "" {
		cfg.NodeTokenFile = filepath.Join(cfg.StateDir, "node.token")
	}
	if err := CheckHub(cfg.Client.Hub, cfg.InsecureHTTP); err != nil {
		return nil, err
	}
	if len(cfg.TrustedKeys) == 0 {
		return nil, errors.New("no trusted package key: give --trusted-key with the public key packages are signed with (policyctl agentpackage keygen makes one)")
	}
	if cfg.DownloadAttempts <= 0 {
		cfg.DownloadAttempts = DefaultDownloadAttempts
	}
	if cfg.DownloadBackoff <= 0 {
		cfg.DownloadBackoff = time.Second
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 30 * time.Second
	}
	if cfg.FreeBytes == nil {
		cfg.FreeBytes = freeBytes
	}
	if len(cfg.InstallCmd) == 0 {
		return nil, errors.New("no install command: give --install-cmd")
	}
	if _, err := nmp.ParseSemver(cfg.InitialVersion); err != nil {
		return nil, fmt.Errorf("--version: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "versions"), 0o755); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	st, err := LoadState(cfg.StateDir, cfg.InitialVersion)
	if err != nil {
		return nil, err
	}
	return &Agent{cfg: cfg, st: st, log: cfg.Log}, nil
}

// State is the agent's current position (a copy).
func (a *Agent) State() State { return *a.st }

func (a *Agent) save() error { return a.st.Save(a.cfg.StateDir) }

// Run registers the node, finishes what a previous run left, and follows
// the directive until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.enrol(ctx); err != nil {
		return err
	}
	if err := a.retry(ctx, "register", func() error { return a.register(ctx) }); err != nil {
		var he *HTTPError
		if errors.As(err, &he) && he.Code == http.StatusUnauthorized {
			return fmt.Errorf("%w: the node's token in %s is not accepted (rotated or revoked): put the token of `policyctl node token rotate %s/%s` there, "+
				"or remove the file to register again with the org token once the node's token is revoked", err, a.cfg.NodeTokenFile, a.cfg.Client.Org, a.cfg.Client.Node)
		}
		return err
	}
	if err := a.recover(ctx); err != nil {
		return err
	}
	if a.st.LastStatus != nil {
		_ = a.retry(ctx, "report", func() error { return a.cfg.Client.Report(ctx, *a.st.LastStatus) })
	}
	dirs := make(chan *api.DirectiveAnswer)
	go a.poll(ctx, dirs)
	var pending *api.DirectiveAnswer
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case d := <-dirs:
			a.retries = 0
			pending, timer = a.consider(ctx, d)
		case <-timer:
			d := pending
			pending, timer = nil, nil
			a.act(ctx, d)
			if l := a.st.LastStatus; l != nil && l.Status == nmp.StateDownloadFailed && l.DirectiveID == d.DirectiveID {
				// Left at download failed: the same directive again
				// after a backoff, unless a new one comes first.
				a.retries++
				wait := min(a.cfg.RetryBackoff<<min(a.retries-1, 16), MaxRetryBackoff)
				a.log.Info().Dur("in", wait).Msg("the download failed; trying the directive again")
				pending, timer = d, time.After(wait)
			}
		}
	}
}

// poll long-polls the directive and hands every new one over.
func (a *Agent) poll(ctx context.Context, out chan<- *api.DirectiveAnswer) {
	var index uint64
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		d, err := a.cfg.Client.Poll(ctx, index, a.cfg.PollWait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.log.Warn().Err(err).Msg("poll the directive")
			sleep(ctx, backoff)
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 200 * time.Millisecond
		if d == nil {
			if index == 0 {
				sleep(ctx, time.Second) // no directive yet
			}
			continue
		}
		index = d.Index
		select {
		case out <- d:
		case <-ctx.Done():
			return
		}
	}
}

// consider decides what to do with a new directive: nothing, or act at
// its start (the timer).
func (a *Agent) consider(ctx context.Context, d *api.DirectiveAnswer) (*api.DirectiveAnswer, <-chan time.Time) {
	a.log.Info().Str("directive", d.DirectiveID).Str("action", d.Action).Str("target", d.TargetVersion).Time("start", d.StartAt).Msg("directive")
	for _, c := range d.Conflicts {
		a.log.Warn().Str("conflict", c).Msg("policy conflict")
	}
	switch d.Action {
	case nmp.ActionUpgrade, nmp.ActionRollback:
	default:
		return nil, nil // none, paused, waiting: nothing starts
	}
	if d.DirectiveID == a.st.Handled {
		return nil, nil
	}
	target, err := nmp.ParseSemver(d.TargetVersion)
	if err != nil {
		a.log.Error().Err(err).Msg("directive with a bad target version; ignored")
		return nil, nil
	}
	cur, _ := nmp.ParseSemver(a.st.Version)
	if c := target.Compare(cur); c == 0 || (c < 0 && d.Action == nmp.ActionUpgrade && !d.AllowDowngrade) {
		a.st.Handled = d.DirectiveID
		// A directive re-issued by the same policy (its window moved)
		// after this node reached the version changes nothing: the
		// report stays the one that says so.
		if l := a.st.LastStatus; l != nil && l.Policy == d.Policy && l.SoftwareVersion == a.st.Version &&
			(l.Status == nmp.StateSuccessful || l.Status == nmp.StateNoActionRequired || l.Status == nmp.StateRollbackSuccessful || l.Status == nmp.StateRolledBack) {
			_ = a.save()
			return nil, nil
		}
		a.report(ctx, d, nmp.StateNoActionRequired, "")
		return nil, nil
	}
	if d.Action == nmp.ActionUpgrade && d.TargetVersion == a.st.Failed {
		a.log.Info().Str("version", d.TargetVersion).Msg("this version failed here before; waiting for a newer one")
		a.st.Handled = d.DirectiveID
		_ = a.save()
		return nil, nil
	}
	if d.Action == nmp.ActionUpgrade && d.TargetVersion == a.st.Rejected && (d.PackageSHA256 == "" || d.PackageSHA256 == a.st.RejectedSHA256) {
		a.log.Info().Str("version", d.TargetVersion).Msg("this package's signature was rejected here; waiting for another one")
		a.st.Handled = d.DirectiveID
		_ = a.save()
		return nil, nil
	}
	wait := d.StartAt.Sub(a.cfg.Now())
	if d.Action == nmp.ActionRollback || wait < 0 {
		wait = 0
	}
	return d, time.After(wait)
}

// act runs the upgrade (or the rollback order) of a directive.
func (a *Agent) act(ctx context.Context, d *api.DirectiveAnswer) {
	if d.Action == nmp.ActionUpgrade {
		if err := a.precheck(ctx, d); err != nil {
			a.log.Warn().Err(err).Str("version", d.TargetVersion).Msg("precheck failed; not starting")
			a.st.Handled = d.DirectiveID
			a.report(ctx, d, nmp.StatePrecheckFailed, err.Error())
			return
		}
	}
	now := a.cfg.Now().UTC()
	a.st.Phase, a.st.Target, a.st.TargetSHA256, a.st.Policy, a.st.DirectiveID = PhaseDownloading, d.TargetVersion, d.PackageSHA256, d.Policy, d.DirectiveID
	a.st.Rollback, a.st.Attempts, a.st.UpgradeStart, a.st.UpgradeEnd = d.Action == nmp.ActionRollback, 0, &now, nil
	if err := a.save(); err != nil {
		a.log.Error().Err(err).Msg("cannot keep the position; not starting")
		return
	}
	if a.st.Rollback {
		a.report(ctx, d, nmp.StateRollbackStarted, "")
	} else {
		a.report(ctx, d, nmp.StateDownloadStarted, "")
	}
	a.upgrade(ctx)
}

// upgrade continues the upgrade the state describes, from its phase.
func (a *Agent) upgrade(ctx context.Context) {
	d := a.directiveOfState()
	if a.st.Phase == PhaseDownloading {
		if err := a.fetch(ctx, a.st.Target, a.st.TargetSHA256); err != nil {
			if ctx.Err() != nil {
				return // stopping: a restart downloads again
			}
			if sig := (*SignatureError)(nil); errors.As(err, &sig) {
				// Not a download to try again: the same bytes
				// would be rejected again.
				a.st.Rejected, a.st.RejectedSHA256, a.st.Handled = a.st.Target, sig.SHA256, a.st.DirectiveID
				a.fail(ctx, d, nmp.StateSignatureRejected, err, false)
				return
			}
			a.fail(ctx, d, nmp.StateDownloadFailed, err, false)
			return
		}
		a.st.Phase = PhaseInstalling
		if err := a.save(); err != nil {
			a.log.Error().Err(err).Msg("cannot keep the position")
			return
		}
		if !a.st.Rollback {
			a.report(ctx, d, nmp.StateDownloaded, "")
			a.report(ctx, d, nmp.StateInitiated, "")
		}
	}
	if err := a.install(ctx, a.st.Target); err != nil {
		if ctx.Err() != nil {
			return // interrupted: the restart rolls back
		}
		a.fail(ctx, d, nmp.StateFailed, err, true)
		return
	}
	if len(a.cfg.RestartCmd) > 0 {
		if err := a.run(ctx, a.cfg.RestartCmd); err != nil {
			a.fail(ctx, d, nmp.StateFailed, fmt.Errorf("restart: %w", err), true)
			return
		}
	}
	man, _ := os.ReadFile(filepath.Join(a.versionDir(a.st.Target), "package.json"))
	end := a.cfg.Now().UTC()
	wasRollback := a.st.Rollback
	a.st.PreviousVersion, a.st.Version = a.st.Version, a.st.Target
	if wasRollback {
		a.st.PreviousVersion = ""
	}
	a.st.Package = compactJSON(man)
	a.st.Phase, a.st.UpgradeEnd, a.st.Handled = PhaseIdle, &end, a.st.DirectiveID
	if err := a.save(); err != nil {
		a.log.Error().Err(err).Msg("cannot keep the position")
	}
	_ = a.retry(ctx, "register", func() error { return a.register(ctx) })
	if wasRollback {
		// An ordered rollback, not a failed upgrade's.
		a.report(ctx, d, nmp.StateRolledBack, "")
	} else {
		a.report(ctx, d, nmp.StateSuccessful, "")
	}
}

// fail reports a failed step and, when the install had begun, rolls the
// node back to its version and never tries the version again. A failed
// download (nothing installed) leaves the directive unhandled: it is
// tried again after a backoff, and after a restart. A rejected signature
// is not a failed download: upgrade marks the package rejected first.
func (a *Agent) fail(ctx context.Context, d *api.DirectiveAnswer, state string, cause error, installed bool) {
	a.log.Error().Err(cause).Str("version", a.st.Target).Str("state", state).Msg("upgrade failed")
	if !a.st.Rollback && installed {
		a.st.Failed = a.st.Target
	}
	if !installed {
		a.st.Phase = PhaseIdle
		end := a.cfg.Now().UTC()
		a.st.UpgradeEnd = &end
		_ = a.save()
		a.report(ctx, d, state, cause.Error())
		return
	}
	if a.st.Rollback {
		// A rollback order that fails: back to the version it left.
		a.report(ctx, d, nmp.StateRollbackFailed, cause.Error())
	} else {
		a.report(ctx, d, nmp.StateFailed, cause.Error())
	}
	a.rollback(ctx, d, cause)
}

// rollback reinstalls the version the node had before the upgrade.
func (a *Agent) rollback(ctx context.Context, d *api.DirectiveAnswer, cause error) {
	a.st.Phase = PhaseRollingBack
	_ = a.save()
	a.report(ctx, d, nmp.StateRollbackStarted, cause.Error())
	err := a.fetch(ctx, a.st.Version, "")
	if err == nil {
		err = a.install(ctx, a.st.Version)
	}
	end := a.cfg.Now().UTC()
	a.st.Phase, a.st.UpgradeEnd, a.st.Handled = PhaseIdle, &end, a.st.DirectiveID
	_ = a.save()
	if err != nil {
		a.report(ctx, d, nmp.StateRollbackFailed, fmt.Sprintf("%v; rollback to %s: %v", cause, a.st.Version, err))
		return
	}
	a.report(ctx, d, nmp.StateRollbackSuccessful, cause.Error())
}

// recover finishes what a previous run left: a download starts again; an
// interrupted install or rollback is rolled back, and the upgrade is tried
// again up to MaxInterrupted times.
func (a *Agent) recover(ctx context.Context) error {
	switch a.st.Phase {
	case PhaseIdle:
		return nil
	case PhaseDownloading:
		a.log.Info().Str("version", a.st.Target).Msg("resuming an interrupted download")
		a.upgrade(ctx)
	case PhaseInstalling, PhaseRollingBack:
		d := a.directiveOfState()
		a.st.Attempts++
		cause := fmt.Errorf("the agent stopped while installing %s", a.st.Target)
		a.log.Warn().Err(cause).Msg("rolling back")
		if a.st.Phase == PhaseInstalling && a.st.Attempts <= a.cfg.MaxInterrupted && !a.st.Rollback {
			attempts := a.st.Attempts
			a.rollback(ctx, d, cause)
			// Try once more, from the download.
			a.st.Phase, a.st.Attempts, a.st.Handled = PhaseDownloading, attempts, ""
			_ = a.save()
			a.report(ctx, d, nmp.StateDownloadStarted, "")
			a.upgrade(ctx)
			return nil
		}
		if !a.st.Rollback {
			a.st.Failed = a.st.Target
		}
		a.rollback(ctx, d, cause)
	}
	return nil
}

func (a *Agent) directiveOfState() *api.DirectiveAnswer {
	return &api.DirectiveAnswer{DirectiveID: a.st.DirectiveID, Policy: a.st.Policy, TargetVersion: a.st.Target}
}

// report sends a status report (and keeps it, to send again after a
// restart if the hub cannot be reached).
func (a *Agent) report(ctx context.Context, d *api.DirectiveAnswer, state, msg string) {
	r := api.StatusRequest{DirectiveID: d.DirectiveID, Policy: d.Policy, Status: state, SoftwareVersion: a.st.Version, PreviousVersion: a.st.PreviousVersion, Error: msg,
		AgentVersion: api.AgentVersion{Package: a.st.Package, Failed: a.st.Failed, UpgradeStart: a.st.UpgradeStart, UpgradeEnd: a.st.UpgradeEnd}}
	a.st.LastStatus = &r
	_ = a.save()
	a.log.Info().Str("status", state).Str("version", a.st.Version).Str("error", msg).Msg("report")
	_ = a.retry(ctx, "report", func() error { return a.cfg.Client.Report(ctx, r) })
}

func (a *Agent) register(ctx context.Context) error {
	r := a.cfg.Registration
	r.SoftwareVersion = a.st.Version
	_, err := a.cfg.Client.Register(ctx, r)
	return err
}

// enrol makes the client use the node's own token: the one kept in
// NodeTokenFile, else the one the hub issues when the agent registers
// with the org token, kept there (mode 0600) before anything else.
func (a *Agent) enrol(ctx context.Context) error {
	path := a.cfg.NodeTokenFile
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read the node's token: %w", err)
	}
	if tok := strings.TrimSpace(string(data)); tok != "" {
		a.cfg.Client.Token = tok
		return nil
	}
	if a.cfg.Client.Token == "" {
		return fmt.Errorf("no node token in %s and no org token to register with: give --token-file with a token of role agent", path)
	}
	r := a.cfg.Registration
	r.SoftwareVersion = a.st.Version
	var issued string
	err = a.retry(ctx, "register", func() error {
		var err error
		issued, err = a.cfg.Client.Register(ctx, r)
		return err
	})
	if err != nil {
		return err
	}
	if issued == "" {
		a.log.Warn().Msg("the hub issued no node token (the node has one, or the hub is older); the token given stays in use")
		return nil
	}
	if err := auth.WriteSecretFile(path, []byte(issued+"\n")); err != nil {
		return fmt.Errorf("keep the node's token: %w", err)
	}
	a.log.Info().Str("file", path).Msg("registered with the org token; the node's own token is kept and used from now on")
	a.cfg.Client.Token = issued
	return nil
}

// retry calls f with backoff until it succeeds, fails with a 4xx (which
// retrying cannot fix) or ctx ends.
func (a *Agent) retry(ctx context.Context, what string, f func() error) error {
	backoff := 100 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		var he *HTTPError
		if errors.As(err, &he) && he.Code/100 == 4 && he.Code != 429 {
			a.log.Error().Err(err).Msg(what + " refused")
			return err
		}
		a.log.Warn().Err(err).Msg(what)
		if !sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (a *Agent) versionDir(v string) string { return filepath.Join(a.cfg.StateDir, "versions", v) }

// fetch makes sure versions/<v> holds the package of version v: it
// downloads it (checking sha), checks it and unpacks it.
func (a *Agent) fetch(ctx context.Context, v, sha string) error {
	dir := a.versionDir(v)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return nil
	}
	tmp := filepath.Join(a.cfg.StateDir, "download-"+v+".tar.gz")
	defer os.Remove(tmp)
	got, err := a.download(ctx, v, sha, tmp)
	if err != nil {
		return err
	}
	// The file is the publisher's, or nothing of it is read: the
	// signature is checked over the SHA-256 computed as it was written.
	if err := nmp.CheckSignature(a.cfg.TrustedKeys, v, got.SHA256, got.Signature); err != nil {
		return &SignatureError{SHA256: got.SHA256, Err: err}
	}
	f, err := os.Open(tmp)
	if err != nil {
		return err
	}
	man, _, err := nmp.ReadPackage(f, a.cfg.MaxUnpackedBytes)
	f.Close()
	if err != nil {
		return fmt.Errorf("package %s: %w", v, err)
	}
	if man.Version != v {
		return fmt.Errorf("package %s: its package.json says version %s", v, man.Version)
	}
	_ = os.RemoveAll(dir)
	if err := unpack(tmp, dir); err != nil {
		return fmt.Errorf("unpack package %s: %w", v, err)
	}
	return os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644)
}

// SignatureError is a downloaded package whose signature no trusted key
// verifies (SHA256 is the package's, as downloaded).
type SignatureError struct {
	SHA256 string
	Err    error
}

func (e *SignatureError) Error() string { return e.Err.Error() }
func (e *SignatureError) Unwrap() error { return e.Err }

// download is Client.Download tried DownloadAttempts times, with
// backoff.
func (a *Agent) download(ctx context.Context, v, sha, dest string) (Downloaded, error) {
	wait := a.cfg.DownloadBackoff
	for attempt := 1; ; attempt++ {
		got, err := a.cfg.Client.Download(ctx, v, sha, dest)
		if err == nil || attempt >= a.cfg.DownloadAttempts || ctx.Err() != nil {
			return got, err
		}
		a.log.Warn().Err(err).Int("attempt", attempt).Dur("in", wait).Msg("download failed; trying again")
		if !sleep(ctx, wait) {
			return Downloaded{}, err
		}
		wait *= 2
	}
}

// precheck says whether the host can take version d.TargetVersion before
// anything is downloaded: the running version must be one the policy
// upgrades from (its version guard, d.FromVersions), and the file system
// of the state directory must have room for the package twice (the
// archive and its unpacked files). What cannot be known (the package's
// size, the free space) is not checked.
func (a *Agent) precheck(ctx context.Context, d *api.DirectiveAnswer) error {
	if d.FromVersions != "" {
		g, err := nmp.ParseFromVersions(d.FromVersions)
		if err != nil {
			return fmt.Errorf("the policy's version guard: %w", err)
		}
		cur, err := nmp.ParseSemver(a.st.Version)
		if err != nil || !g.Admits(cur) {
			// The running version is in the report (its software
			// version); the reason does not repeat it.
			return fmt.Errorf("this NMP (%s) upgrades only from %s", d.Policy, d.FromVersions)
		}
	}
	if _, err := os.Stat(filepath.Join(a.versionDir(d.TargetVersion), ".complete")); err == nil {
		return nil // already here: nothing to download
	}
	size, err := a.cfg.Client.PackageSize(ctx, d.TargetVersion)
	if err != nil || size <= 0 {
		return nil
	}
	free, err := a.cfg.FreeBytes(a.cfg.StateDir)
	if err != nil {
		return nil
	}
	if need := uint64(2 * size); free < need {
		return fmt.Errorf("not enough free disk for package %s in %s: %d bytes free, %d needed (twice the package's %d bytes)", d.TargetVersion, a.cfg.StateDir, free, need, size)
	}
	return nil
}

// unpack extracts a package nmp.ReadPackage accepted (regular files and
// directories, all inside) into dir.
func unpack(src, dir string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." {
			continue
		}
		p := filepath.Join(dir, name)
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("entry %q leaves the package", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// install runs the install command for each directory of version v's
// package, in the order packages, ssl, config; a missing or empty
// directory is skipped.
func (a *Agent) install(ctx context.Context, v string) error {
	dir := a.versionDir(v)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		return fmt.Errorf("version %s is not unpacked", v)
	}
	for _, sub := range nmp.PackageDirs {
		p := filepath.Join(dir, sub)
		ents, err := os.ReadDir(p)
		if err != nil || len(ents) == 0 {
			continue
		}
		args := append(append([]string{}, a.cfg.InstallCmd...), sub, p, v)
		if err := a.run(ctx, args); err != nil {
			return fmt.Errorf("install %s of %s: %w", sub, v, err)
		}
	}
	return nil
}

// run runs a command without a shell, bounded by CmdTimeout.
func (a *Agent) run(ctx context.Context, args []string) error {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.CmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "PF_NODE=" + a.cfg.Client.Node, "PF_ORG=" + a.cfg.Client.Org}
	bindToAgent(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 500 {
			msg = msg[len(msg)-500:]
		}
		return fmt.Errorf("%s: %w: %s", args[0], err, msg)
	}
	return nil
}

func compactJSON(b []byte) json.RawMessage {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return nil
	}
	out, _ := json.Marshal(v)
	return out
}
