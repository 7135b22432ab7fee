package edgeagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/policyflow/policyflow/services/api"
)

// Phases of an upgrade, kept on disk so that a restart knows where the
// agent stopped.
const (
	PhaseIdle        = ""
	PhaseDownloading = "downloading"
	PhaseInstalling  = "installing"
	PhaseRollingBack = "rolling back"
)

// State is the agent's position, kept in <state-dir>/state.json.
type State struct {
	Version         string          `json:"version"`
	PreviousVersion string          `json:"previousVersion,omitempty"`
	Package         json.RawMessage `json:"package,omitempty"`
	// Failed is the last version an upgrade failed on: it is never
	// tried again, only a newer one is.
	Failed string `json:"failed,omitempty"`
	// Rejected is the package (version and SHA-256) whose signature no
	// trusted key verified: it is not downloaded again; a package
	// published anew (another SHA-256) is.
	Rejected       string `json:"rejected,omitempty"`
	RejectedSHA256 string `json:"rejectedSha256,omitempty"`
	// Phase is where an upgrade stands; Target and Policy what it is
	// about; Attempts how many times it was interrupted.
	Phase        string     `json:"phase,omitempty"`
	Target       string     `json:"target,omitempty"`
	TargetSHA256 string     `json:"targetSha256,omitempty"`
	Policy       string     `json:"policy,omitempty"`
	DirectiveID  string     `json:"directiveId,omitempty"`
	Rollback     bool       `json:"rollback,omitempty"`
	Attempts     int        `json:"attempts,omitempty"`
	UpgradeStart *time.Time `json:"upgradeStart,omitempty"`
	UpgradeEnd   *time.Time `json:"upgradeEnd,omitempty"`
	// Handled is the directive last acted on (or found to need nothing).
	Handled string `json:"handled,omitempty"`
	// LastStatus is the last report, sent again after a restart.
	LastStatus *api.StatusRequest `json:"lastStatus,omitempty"`
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// LoadState reads the state; a missing file is a new agent at version.
func LoadState(dir, version string) (*State, error) {
	raw, err := os.ReadFile(statePath(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return &State{Version: version}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the agent state: %w", err)
	}
	var s State
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("the agent state %s is damaged (%v); move it away to start as a new agent", statePath(dir), err)
	}
	return &s, nil
}

// Save writes the state atomically (temporary file, fsync, rename).
func (s *State) Save(dir string) error {
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return fmt.Errorf("save the agent state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return fmt.Errorf("save the agent state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("save the agent state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save the agent state: %w", err)
	}
	if err := os.Rename(tmp.Name(), statePath(dir)); err != nil {
		return fmt.Errorf("save the agent state: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
