package auth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// DefaultReloadInterval is how often a Store looks at its file. A
// Kubernetes Secret mounted as a file changes within about a minute of
// the Secret, so a few seconds more do not matter.
const DefaultReloadInterval = 5 * time.Second

// Store is the tokens of a file, kept current: Watch reads the file again
// whenever its content changed. A file that cannot be read or parsed keeps
// the tokens loaded before (and is logged), so a half-edited file never
// locks everyone out or lets anyone in.
type Store struct {
	path string
	set  atomic.Pointer[Set]

	mu     sync.Mutex
	loaded [sha256.Size]byte // content of the file the set came from
	// stale is set while the file holds what cannot be loaded (Stale).
	stale atomic.Bool
}

// Stale reports whether the file, when last read, could not be used (it
// could not be read or parsed): the tokens loaded before it stay in force
// until it is mended.
func (s *Store) Stale() bool { return s.stale.Load() }

// Open loads the tokens file at path.
func Open(path string) (*Store, error) {
	s := &Store{path: path}
	if _, err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Path is the file the store reads.
func (s *Store) Path() string { return s.path }

// Len is the number of tokens loaded.
func (s *Store) Len() int { return s.set.Load().Len() }

// Lookup returns the holder of token among the tokens loaded last.
func (s *Store) Lookup(token string) (Principal, bool) { return s.set.Load().Lookup(token) }

// Reload reads the file again and, when its content changed and parses,
// makes it the set Lookup uses. It reports whether the tokens changed.
func (s *Store) Reload() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := os.ReadFile(s.path)
	if err != nil {
		s.stale.Store(true)
		return false, fmt.Errorf("read tokens file: %w", err)
	}
	sum := sha256.Sum256(data)
	if s.set.Load() != nil && sum == s.loaded {
		s.stale.Store(false)
		return false, nil
	}
	f, err := Parse(data)
	var set *Set
	if err == nil {
		set, err = f.Set()
	}
	if err != nil {
		s.stale.Store(true)
		return false, fmt.Errorf("tokens file %s: %w", s.path, err)
	}
	s.set.Store(set)
	s.loaded = sum
	s.stale.Store(false)
	return true, nil
}

// Watch reloads the file every interval (DefaultReloadInterval when not
// positive) until ctx is done, logging each change and each file that
// cannot be used (once per content).
func (s *Store) Watch(ctx context.Context, interval time.Duration, log zerolog.Logger) {
	if interval <= 0 {
		interval = DefaultReloadInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := s.Reload()
		switch {
		case err != nil:
			if err.Error() != lastErr {
				log.Error().Err(err).Int("tokens", s.Len()).Msg("tokens file not reloaded; the tokens loaded before stay in use")
			}
			lastErr = err.Error()
		case changed:
			lastErr = ""
			log.Info().Str("file", s.path).Int("tokens", s.Len()).Msg("tokens file reloaded")
		default:
			lastErr = ""
		}
	}
}
