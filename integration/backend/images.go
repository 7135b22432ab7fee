package backend

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/testcontainers/testcontainers-go"
)

// localRepo is the repository of the images deploy/build-images.sh builds.
const localRepo = "policyflow"

// LocalBuildTarget says whether deploy/build-images.sh can build the image
// and with which target and tag: "policyflow/devbroker:dev" is target
// "devbroker", tag "dev". Images of other repositories are pulled, not
// built.
func LocalBuildTarget(image string) (target, tag string, ok bool) {
	name, tag := image, "latest"
	if i := strings.LastIndexByte(image, ':'); i > strings.LastIndexByte(image, '/') {
		name, tag = image[:i], image[i+1:]
	}
	repo, target, found := strings.Cut(name, "/")
	if !found || repo != localRepo || target == "" || strings.Contains(target, "/") || strings.Contains(image, "@") {
		return "", "", false
	}
	return target, tag, true
}

// ensureImages builds, with deploy/build-images.sh, every local image that
// the Docker engine does not have. Other missing images are left for Docker
// to pull when the container starts.
func ensureImages(ctx context.Context, dc *client.Client, images ...string) error {
	byTag := map[string][]string{}
	for _, image := range images {
		_, err := dc.ImageInspect(ctx, image)
		switch {
		case err == nil:
			continue
		case !cerrdefs.IsNotFound(err):
			return fmt.Errorf("inspect image %s: %w", image, err)
		}
		target, tag, ok := LocalBuildTarget(image)
		if !ok {
			log.Info().Str("image", image).Msg("image not present; Docker will pull it")
			continue
		}
		byTag[tag] = append(byTag[tag], target)
	}
	if len(byTag) == 0 {
		return nil
	}

	root, err := devstack.RepoRoot()
	if err != nil {
		return fmt.Errorf("build missing images: %w", err)
	}
	unlock, err := lockFile(filepath.Join(root, ".cache", "build-images.lock"))
	if err != nil {
		return fmt.Errorf("build missing images: %w", err)
	}
	defer unlock()

	for tag, targets := range byTag {
		// Another test binary may have built them while this one waited
		// for the lock.
		var missing []string
		for _, target := range targets {
			image := localRepo + "/" + target + ":" + tag
			if _, err := dc.ImageInspect(ctx, image); err != nil {
				missing = append(missing, target)
			}
		}
		if len(missing) == 0 {
			continue
		}
		if err := buildImages(ctx, root, tag, missing); err != nil {
			return err
		}
	}
	return nil
}

// buildImages runs deploy/build-images.sh for the targets, with its output on
// stderr. Cancelling ctx sends SIGTERM to the script and everything it
// started.
func buildImages(ctx context.Context, root, tag string, targets []string) error {
	script := filepath.Join(root, "deploy", "build-images.sh")
	log.Info().Strs("images", targets).Str("tag", tag).Msg("building missing images with deploy/build-images.sh (the first time takes a while)")
	began := time.Now()
	cmd := exec.CommandContext(ctx, "sh", append([]string{script}, targets...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "PF_IMAGE_REPO="+localRepo, "PF_IMAGE_TAG="+tag)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build images %s with %s: %w", strings.Join(targets, ", "), script, err)
	}
	log.Info().Strs("images", targets).Str("took", time.Since(began).Round(time.Second).String()).Msg("images built")
	return nil
}

// lockFile takes an exclusive lock on path, creating it, so that test
// binaries running at the same time build images one after another.
func lockFile(path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create directory of lock file %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// EnsureImages builds, with deploy/build-images.sh, every local image of
// images (policyflow/<target>:<tag>) that the Docker engine does not have,
// for suites that start containers of their own.
func EnsureImages(ctx context.Context, images ...string) error {
	dc, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("connect to the Docker engine: %w", err)
	}
	defer dc.Close()
	return ensureImages(ctx, dc.Client, images...)
}
