package nmpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/topology"
)

// DefaultMaxPackageBytes bounds an uploaded agent package.
const DefaultMaxPackageBytes = 512 << 20

func packageAnswer(p *events.AgentPackage) api.PackageAnswer {
	return api.PackageAnswer{Version: p.Version, PackagesVersion: p.PackagesVersion, SSLVersion: p.SSLVersion, ConfigVersion: p.ConfigVersion,
		SHA256: p.SHA256, Size: p.Size, Signature: p.Signature, SigningKey: p.SigningKey, UploadedBy: p.UploadedBy, UploadedAt: p.UploadedAt.UTC()}
}

func (s *API) packageDir() (string, *web.Error) {
	if s.opts.PackageDir == "" {
		return "", web.Errorf(http.StatusServiceUnavailable, "this North API stores no agent packages: start it with --package-dir")
	}
	return s.opts.PackageDir, nil
}

func (s *API) ListPackages(w http.ResponseWriter, r *http.Request) *web.Error {
	if e := s.Views.Need(topology.AgentPackages); e != nil {
		return e
	}
	out := []api.PackageAnswer{}
	for _, p := range s.nm.world.PackageList() {
		out = append(out, packageAnswer(p))
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"packages": out})
	return nil
}

func (s *API) lookupPackage(r *http.Request) (*events.AgentPackage, *web.Error) {
	v := r.PathValue("version")
	if _, err := nmp.ParseSemver(v); err != nil {
		return nil, web.Errorf(http.StatusBadRequest, "%v", err)
	}
	if e := s.Views.Need(topology.AgentPackages); e != nil {
		return nil, e
	}
	p := s.nm.world.Package(v)
	if p == nil {
		return nil, web.Errorf(http.StatusNotFound, "the hub has no agent package %s", v)
	}
	return p, nil
}

func (s *API) GetPackage(w http.ResponseWriter, r *http.Request) *web.Error {
	p, e := s.lookupPackage(r)
	if e != nil {
		return e
	}
	web.WriteJSON(w, http.StatusOK, packageAnswer(p))
	return nil
}

// downloadPackage serves the tar.gz with its SHA-256 in X-Checksum-Sha256,
// once the stored file's SHA-256 is the record's.
func (s *API) DownloadPackage(w http.ResponseWriter, r *http.Request) *web.Error {
	p, e := s.lookupPackage(r)
	if e != nil {
		return e
	}
	dir, e := s.packageDir()
	if e != nil {
		return e
	}
	f, err := os.Open(filepath.Join(dir, p.SHA256+".tar.gz"))
	if err != nil {
		return web.Errorf(http.StatusServiceUnavailable, "agent package %s (%s) is not in this North API's package store %s: %v", p.Version, p.SHA256, dir, err)
	}
	defer f.Close()
	// The file is checked against its record before anything of it is
	// sent, and served from the same open file: one altered on disk (or
	// replaced with another under the same name) is never served under
	// the record's checksum.
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return web.Errorf(http.StatusServiceUnavailable, "read agent package %s from the package store: %v", p.Version, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != p.SHA256 {
		s.Log.Error().Str("version", p.Version).Str("want", p.SHA256).Str("got", got).Str("dir", dir).Msg("an agent package file was altered in the package store; not served")
		return web.Errorf(http.StatusInternalServerError, "the stored file of agent package %s has SHA-256 %s, not %s as published: it was altered in the package store and is not served; publish the package again under a new version",
			p.Version, got, p.SHA256)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return web.Errorf(http.StatusServiceUnavailable, "reread agent package %s: %v", p.Version, err)
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set(api.ChecksumHeader, p.SHA256)
	if p.Signature != "" {
		w.Header().Set(api.SignatureHeader, p.Signature)
		w.Header().Set(api.SigningKeyHeader, p.SigningKey)
	}
	w.Header().Set("ETag", `"`+p.SHA256+`"`)
	http.ServeContent(w, r, p.Version+".tar.gz", p.UploadedAt, f)
	return nil
}

// uploadPackage takes a tar.gz as the body. ?sha256= (or the header
// X-Checksum-Sha256), when given, must be the body's SHA-256. The
// publisher's signature (api.SignatureHeader, api.SigningKeyHeader) travels with
// the record; agents check it, the hub keeps it as given (the same file
// uploaded again with another signature replaces it). The package
// is checked (nmp.ReadPackage), stored as <dir>/<sha256>.tar.gz and
// announced on agent.packages; a version already on the hub with other
// content is refused.
func (s *API) UploadPackage(w http.ResponseWriter, r *http.Request) *web.Error {
	dir, e := s.packageDir()
	if e != nil {
		return e
	}
	if e := s.Views.Need(topology.AgentPackages); e != nil {
		return e
	}
	want := strings.ToLower(r.URL.Query().Get("sha256"))
	if want == "" {
		want = strings.ToLower(r.Header.Get(api.ChecksumHeader))
	}
	tmp, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		return web.Errorf(http.StatusServiceUnavailable, "package store %s: %v", dir, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	max := s.opts.MaxPackageBytes
	if max <= 0 {
		max = DefaultMaxPackageBytes
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return web.Errorf(http.StatusRequestEntityTooLarge, "the package is over %d bytes", max)
		}
		return web.Errorf(http.StatusBadRequest, "read the package: %v", err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if want != "" && want != sum {
		return web.Errorf(http.StatusBadRequest, "the package's SHA-256 is %s, not %s as given: it was damaged or is not the file meant", sum, want)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return web.Errorf(http.StatusInternalServerError, "reread the upload: %v", err)
	}
	man, raw, err := nmp.ReadPackage(tmp, s.opts.MaxUnpackedPackageBytes)
	if err != nil {
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	unlock := s.Lock("package " + man.Version)
	defer unlock()
	// The same file with another signature (signed anew, or signed now
	// where it was not) replaces the record's signature.
	if old := s.nm.world.Package(man.Version); old != nil {
		switch {
		case old.SHA256 != sum:
			return web.Errorf(http.StatusConflict, "the hub already has agent package %s with SHA-256 %s; publish a new version instead of changing one", man.Version, old.SHA256)
		case old.Signature == r.Header.Get(api.SignatureHeader):
			web.WriteJSON(w, http.StatusOK, packageAnswer(old))
			return nil
		}
	}
	if err := tmp.Sync(); err != nil {
		return web.Errorf(http.StatusServiceUnavailable, "store the package: %v", err)
	}
	final := filepath.Join(dir, sum+".tar.gz")
	if err := os.Rename(tmp.Name(), final); err != nil {
		return web.Errorf(http.StatusServiceUnavailable, "store the package: %v", err)
	}
	ev := &events.AgentPackage{Version: man.Version, PackagesVersion: man.PackagesVersion, SSLVersion: man.SSLVersion, ConfigVersion: man.ConfigVersion,
		Manifest: string(raw), SHA256: sum, Size: n, Signature: r.Header.Get(api.SignatureHeader), SigningKey: r.Header.Get(api.SigningKeyHeader), UploadedBy: web.PrincipalOf(r.Context()).Name, UploadedAt: time.Now().UTC().Truncate(time.Millisecond)}
	rec, e := s.ProduceRecord(r.Context(), topology.AgentPackages, man.Version, ev)
	if e != nil {
		return e
	}
	s.WaitOwnWrite(r.Context(), s.nm.world.Topic(topology.AgentPackages), rec)
	web.WriteJSON(w, http.StatusOK, packageAnswer(ev))
	return nil
}
