package notifytarget

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// MaxArgBytes is the longest notification a script can be given: it is
// one argument, and Linux passes at most MAX_ARG_STRLEN (32 pages, 128
// KiB) per argument, the terminating NUL included; execve fails with
// E2BIG past it. It holds on every system, so a component is notified
// the same wherever the agent-notifier runs.
const MaxArgBytes = 128*1024 - 1

// MaxPathBytes bounds a script_path (Linux's PATH_MAX).
const MaxPathBytes = 4096

// ScriptPATH is the whole environment a script runs with.
const ScriptPATH = "PATH=/usr/bin:/bin"

// ErrNoScriptDirs is why every script is refused when the operator named
// no script directory.
var ErrNoScriptDirs = errors.New("no script may run here: no script directory is allowed; " +
	"set --script-dir (env PF_SCRIPT_DIRS) on the North API and the agent-notifier, or notify by webhook")

// ScriptEnv is the environment of a script: PATH=/usr/bin:/bin and nothing
// else, so nothing of the agent-notifier's own environment (credentials
// included) reaches it.
func ScriptEnv() []string { return []string{ScriptPATH} }

// CheckArg says why a notification of n bytes cannot be given to a
// script, or nil when it can.
func CheckArg(n int) error {
	if n > MaxArgBytes {
		return fmt.Errorf("the notification is %d bytes, more than a script can be given in one argument "+
			"(%d bytes: Linux's limit of 128 KiB per argument); notify this component by webhook instead", n, MaxArgBytes)
	}
	return nil
}

// scriptDir is one allowed directory, as given and with its symbolic
// links resolved.
type scriptDir struct {
	given, resolved string
}

func newScriptDir(d string) (scriptDir, error) {
	switch {
	case !filepath.IsAbs(d):
		return scriptDir{}, errors.New("want an absolute path")
	case filepath.Clean(d) == string(filepath.Separator):
		return scriptDir{}, errors.New("allowing / would allow every program on the host; name the directory that holds the scripts")
	}
	d = filepath.Clean(d)
	resolved, err := filepath.EvalSymlinks(d)
	if err != nil {
		return scriptDir{}, fmt.Errorf("resolve the directory: %w", err)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return scriptDir{}, fmt.Errorf("read the directory: %w", err)
	}
	if !fi.IsDir() {
		return scriptDir{}, fmt.Errorf("%s is not a directory", resolved)
	}
	return scriptDir{given: d, resolved: resolved}, nil
}

// inside reports whether the clean absolute path p lies below dir.
func inside(dir, p string) bool {
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}

// ScriptDirs lists the allowed directories as the operator gave them.
func (r Rules) ScriptDirs() []string {
	out := make([]string, len(r.scriptDirs))
	for i, d := range r.scriptDirs {
		out[i] = d.given
	}
	return out
}

// CheckScript says whether path may run as a reconfigure script and
// returns the file to run. path must be absolute and clean, lie in an
// allowed directory, and resolve (symbolic links followed) to a regular
// executable file that lies in an allowed directory too. The North API
// checks it when the component is registered, the agent-notifier again
// right before it runs the file, so a file replaced since is refused.
func (r Rules) CheckScript(path string) (string, error) {
	if len(r.scriptDirs) == 0 {
		return "", ErrNoScriptDirs
	}
	switch {
	case len(path) > MaxPathBytes:
		return "", fmt.Errorf("script_path is %d bytes long; the limit is %d", len(path), MaxPathBytes)
	case !filepath.IsAbs(path):
		return "", fmt.Errorf("script_path %q is not an absolute path; give the absolute path of the script in %s", path, r.dirList())
	case filepath.Clean(path) != path:
		return "", fmt.Errorf("script_path %q is not clean; give it as %q (no '.', '..', doubled or trailing '/')", path, filepath.Clean(path))
	}
	in := false
	for _, d := range r.scriptDirs {
		in = in || inside(d.given, path) || inside(d.resolved, path)
	}
	if !in {
		return "", fmt.Errorf("script_path %q is not in an allowed directory; scripts run only from %s (--script-dir, env PF_SCRIPT_DIRS)", path, r.dirList())
	}
	resolved, err := filepath.EvalSymlinks(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("script_path %q does not exist; put the script there or fix the path", path)
	case err != nil:
		return "", fmt.Errorf("script_path %q: %w", path, err)
	}
	in = false
	for _, d := range r.scriptDirs {
		in = in || inside(d.resolved, resolved)
	}
	if !in {
		return "", fmt.Errorf("script_path %q resolves to %q, which is not in an allowed directory (%s)", path, resolved, r.dirList())
	}
	fi, err := os.Stat(resolved)
	switch {
	case err != nil:
		return "", fmt.Errorf("script_path %q: %w", path, err)
	case fi.IsDir():
		return "", fmt.Errorf("script_path %q is a directory; give the script file in it", path)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("script_path %q is not a regular file (%s)", path, fi.Mode().Type())
	case fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("script_path %q is not executable (mode %s); make it so (chmod +x)", path, fi.Mode().Perm())
	}
	return resolved, nil
}

func (r Rules) dirList() string {
	return strings.Join(r.ScriptDirs(), ", ")
}
