package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	wire "github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/devstack"
)

const (
	agentPackageNewSummary     = "make the directory of a new agent package: package.json and empty packages/, ssl/ and config/"
	agentPackageListSummary    = "list the agent packages on the hub with their SHA-256"
	agentPackagePublishSummary = "sign an agent package (a directory made by 'agentpackage new', or a .tar.gz) and upload it to the hub"
	agentPackageKeygenSummary  = "make an ed25519 key pair to sign agent packages with: FILE (private, mode 0600) and FILE.pub (for the agents' --trusted-key)"
)

func init() {
	register(command{name: "agentpackage new", summary: agentPackageNewSummary, run: runAgentPackageNew})
	register(command{name: "agentpackage list", summary: agentPackageListSummary, run: runAgentPackageList})
	register(command{name: "agentpackage publish", summary: agentPackagePublishSummary, run: runAgentPackagePublish})
	register(command{name: "agentpackage keygen", summary: agentPackageKeygenSummary, run: runAgentPackageKeygen})
}

func runAgentPackageKeygen(ctx context.Context, args []string) error {
	fset := newFlagSet(ctx, "agentpackage keygen", agentPackageKeygenSummary+
		"\n\nKeep FILE where only the publisher can read it and give 'agentpackage publish --key FILE'; install FILE.pub"+
		"\non every node and give it to the edge agent as --trusted-key.", "FILE")
	if err := parseFlags(fset, args); err != nil {
		return err
	}
	if fset.NArg() != 1 {
		return usageErrorf("agentpackage keygen takes one FILE, got %d arguments", fset.NArg())
	}
	path := fset.Arg(0)
	for _, p := range []string{path, path + ".pub"} {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s exists; give a new file (a key is never overwritten)", p)
		}
	}
	pub, err := nmp.WriteSigningKey(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout(ctx), "made signing key %s (id %s) and its public key %s\n", path, nmp.KeyID(pub), path+".pub")
	return nil
}

// defaultSigningKey is the dev stack's signing key when it exists
// (package-signing.key next to the dev token), else "".
func defaultSigningKey() string {
	tok := defaultTokenFile()
	if tok == "" {
		return ""
	}
	path := filepath.Join(filepath.Dir(tok), devstack.SigningKeyFileName)
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

// readSigningKey reads the private key of --key (the dev stack's when
// none is given and it exists).
func readSigningKey(path string) (ed25519.PrivateKey, error) {
	if path == "" {
		path = defaultSigningKey()
	}
	if path == "" {
		return nil, usageErrorf("agentpackage publish needs --key (PF_PACKAGE_KEY): agents run only signed packages; make a key with policyctl agentpackage keygen")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the signing key: %w", err)
	}
	k, err := nmp.ParseSigningKey(data)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	return k, nil
}

func runAgentPackageNew(ctx context.Context, args []string) error {
	fset := newFlagSet(ctx, "agentpackage new", agentPackageNewSummary+
		"\n\nPut the node's package manager packages in packages/, the hub's certificate in ssl/ and the agent's"+
		"\nconfiguration in config/; the agent runs its install command once for each directory that is not empty.", "VERSION DIR")
	if err := parseFlags(fset, args); err != nil {
		return err
	}
	if fset.NArg() != 2 {
		return usageErrorf("agentpackage new takes VERSION and DIR, got %d arguments", fset.NArg())
	}
	version, dir := fset.Arg(0), fset.Arg(1)
	if _, err := nmp.ParseSemver(version); err != nil {
		return usageErrorf("%v", err)
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists; give a new directory", dir)
	}
	for _, d := range nmp.PackageDirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	man, _ := json.MarshalIndent(nmp.Manifest{Version: version, PackagesVersion: version, SSLVersion: version, ConfigVersion: version}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "package.json"), append(man, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout(ctx), "made %s: fill packages/, ssl/ and config/, then run policyctl agentpackage publish %s\n", dir, dir)
	return nil
}

func runAgentPackageList(ctx context.Context, args []string) error {
	fset := newFlagSet(ctx, "agentpackage list", agentPackageListSummary, "")
	api := registerAPIFlags(fset)
	out := registerOutputFlag(fset, outputTable).withJSONFlag(fset)
	if err := parseFlags(fset, args); err != nil {
		return err
	}
	format, err := out.check()
	if err != nil {
		return err
	}
	if fset.NArg() != 0 {
		return usageErrorf("agentpackage list takes no arguments, got %q", fset.Args())
	}
	data, err := api.do(ctx, http.MethodGet, "/v1/agentpackages", nil)
	if err != nil {
		return err
	}
	return printOutput(stdout(ctx), format, data, agentPackageTable)
}

// agentPackageTable draws the answer of GET /v1/agentpackages.
func agentPackageTable(w io.Writer, data []byte) error {
	var ans wire.PackageList
	if err := json.Unmarshal(data, &ans); err != nil {
		return fmt.Errorf("the North API's answer is not the list expected: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tSIZE\tSHA256\tUPLOADED BY\tUPLOADED AT")
	for _, p := range ans.Packages {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", p.Version, p.Size, p.SHA256, p.UploadedBy, p.UploadedAt.Format(time.RFC3339Nano))
	}
	return tw.Flush()
}

// packDir writes a package directory as a tar.gz: package.json and what
// is under packages/, ssl/ and config/ (regular files only).
func packDir(dir string) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	add := func(rel, path string) error {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	}
	if err := add("package.json", filepath.Join(dir, "package.json")); err != nil {
		return nil, fmt.Errorf("%s has no package.json (make one with policyctl agentpackage new): %w", dir, err)
	}
	for _, d := range nmp.PackageDirs {
		root := filepath.Join(dir, d)
		err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) && path == root {
					return filepath.SkipDir
				}
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			rel = filepath.ToSlash(rel)
			switch {
			case e.IsDir():
				return tw.WriteHeader(&tar.Header{Name: rel + "/", Mode: 0o755, Typeflag: tar.TypeDir})
			case e.Type().IsRegular():
				return add(rel, path)
			}
			return fmt.Errorf("%s is not a regular file or directory; a package holds only those", path)
		})
		if err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func runAgentPackagePublish(ctx context.Context, args []string) error {
	fset := newFlagSet(ctx, "agentpackage publish", agentPackagePublishSummary+
		"\n\nThe package is checked here (package.json with a semantic version, only /packages, /ssl and /config) and"+
		"\nagain by the hub, which stores it with its SHA-256; a version already on the hub cannot change.", "DIR|FILE.tar.gz")
	api := registerAPIFlags(fset)
	maxUnpacked := fset.Int64("max-unpacked-bytes", nmp.DefaultMaxUnpackedBytes, "largest decompressed size of the package; the hub has its own limit (--max-unpacked-package-bytes)")
	keyFile := fset.String("key", runtime.EnvOr("PF_PACKAGE_KEY", ""), "ed25519 private key (PEM, from agentpackage keygen) the package is signed with (env PF_PACKAGE_KEY; default: package-signing.key of 'policyctl dev''s data dir, when it exists)")
	if err := parseFlags(fset, args); err != nil {
		return err
	}
	key, err := readSigningKey(*keyFile)
	if err != nil {
		return err
	}
	if fset.NArg() != 1 {
		return usageErrorf("agentpackage publish takes one DIR or FILE.tar.gz, got %d arguments", fset.NArg())
	}
	src := fset.Arg(0)
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	var pkg []byte
	if info.IsDir() {
		pkg, err = packDir(src)
	} else {
		pkg, err = os.ReadFile(src)
	}
	if err != nil {
		return err
	}
	man, _, err := nmp.ReadPackage(bytes.NewReader(pkg), *maxUnpacked)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	sum := sha256.Sum256(pkg)
	hexSum := hex.EncodeToString(sum[:])
	sig, keyID := nmp.SignPackage(key, man.Version, hexSum)
	api.header = http.Header{wire.SignatureHeader: {sig}, wire.SigningKeyHeader: {keyID}}
	if _, err := api.doType(ctx, http.MethodPost, "/v1/agentpackages?sha256="+hexSum, pkg, "application/gzip"); err != nil {
		return err
	}
	fmt.Fprintf(stdout(ctx), "published agent package %s (%d bytes, sha256 %s, signed by key %s)\n", man.Version, len(pkg), hexSum, keyID)
	return nil
}
