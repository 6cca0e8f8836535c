package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// stampVersion changes whenever this tool changes what it writes, so a stamp from an
// older tool never keeps an output.
const stampVersion = "hookkeeper-image/3"

const (
	versionPkg  = "github.com/hookkeeper/hookkeeper/internal/version.Version"
	revisionPkg = "github.com/hookkeeper/hookkeeper/internal/version.Revision"
	caFile      = "/etc/ssl/certs/ca-certificates.crt"
	nonrootID   = 65532
)

// Standard OCI annotation keys, used as config labels and as index annotations.
const (
	labelSource   = "org.opencontainers.image.source"
	labelVersion  = "org.opencontainers.image.version"
	labelRevision = "org.opencontainers.image.revision"
	labelCreated  = "org.opencontainers.image.created"
	labelTitle    = "org.opencontainers.image.title"
	labelRefName  = "org.opencontainers.image.ref.name"
)

type buildOptions struct {
	root      string
	platforms []v1.Platform
	layoutDir string
	archive   string
	binDir    string
	caFile    string
	version   string
	revision  string
	source    string
	created   time.Time
	refName   string
	goCmd     string
}

func runBuild(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	var o buildOptions
	var platforms, created string
	fs.StringVar(&o.root, "root", ".", "the hookkeeper module's root directory")
	fs.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list")
	fs.StringVar(&o.layoutDir, "layout", "", "write an OCI layout to this directory (replaced)")
	fs.StringVar(&o.archive, "archive", "", "write an OCI archive (tar of the layout) to this file")
	fs.StringVar(&o.binDir, "bin-dir", "", "where the per-platform binaries are built (default ROOT/bin/image-build)")
	fs.StringVar(&o.caFile, "ca-certificates", caFile, "the CA bundle copied to "+caFile)
	fs.StringVar(&o.version, "version", "dev", "version: -X "+versionPkg+" and the "+labelVersion+" label")
	fs.StringVar(&o.revision, "revision", "", "VCS revision for the "+labelRevision+" label")
	fs.StringVar(&o.source, "source", "https://github.com/hookkeeper/hookkeeper", labelSource+" label")
	fs.StringVar(&created, "created", "", "creation time (RFC 3339) for the config and every file; default the Unix epoch")
	fs.StringVar(&o.refName, "ref-name", "", "the "+labelRefName+" annotation in index.json (e.g. a tag)")
	fs.StringVar(&o.goCmd, "go", "go", "the go command")
	_ = fs.Parse(args)
	if o.layoutDir == "" && o.archive == "" {
		return errors.New("build: pass -layout DIR and/or -archive FILE")
	}
	for p := range strings.SplitSeq(platforms, ",") {
		plat, err := v1.ParsePlatform(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		if plat.OS != "linux" {
			return fmt.Errorf("build: %s: only linux images", p)
		}
		if plat.Architecture == "arm64" && plat.Variant == "" {
			plat.Variant = "v8"
		}
		o.platforms = append(o.platforms, *plat)
	}
	if created != "" {
		t, err := time.Parse(time.RFC3339, created)
		if err != nil {
			return fmt.Errorf("build: -created: %w", err)
		}
		o.created = t.UTC()
	} else {
		o.created = time.Unix(0, 0).UTC()
	}
	root, err := filepath.Abs(o.root)
	if err != nil {
		return err
	}
	o.root = root
	if o.binDir == "" {
		o.binDir = filepath.Join(o.root, "bin", "image-build")
	}
	return build(o)
}

func build(o buildOptions) error {
	start := time.Now()
	base, baseKey, err := baseFiles(o)
	if err != nil {
		return err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n%s\n%s\n%s\n", stampVersion, o.version, o.revision, o.source,
		o.created.Format(time.RFC3339), o.refName, baseKey)

	binaries := make([][]string, len(o.platforms))
	for i, p := range o.platforms {
		for _, b := range imageBinaries {
			bin, err := goBuild(o, p, b)
			if err != nil {
				return err
			}
			binaries[i] = append(binaries[i], bin)
			sum, err := fileSHA256(bin)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s %s %s\n", p.String(), b.name, sum)
		}
	}
	key := hex.EncodeToString(h.Sum(nil))

	outputs := []string{o.layoutDir, o.archive}
	if summary, ok := upToDate(outputs, key); ok {
		fmt.Print(summary)
		fmt.Printf("image: inputs unchanged, kept %s (%.1fs)\n", strings.Join(nonEmpty(outputs), " and "), time.Since(start).Seconds())
		return nil
	}

	baseLayer, err := layerFromFiles(base)
	if err != nil {
		return err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var summary strings.Builder
	for i, p := range o.platforms {
		img, err := platformImage(o, p, baseLayer, binaries[i])
		if err != nil {
			return err
		}
		desc, err := descriptorOf(img, p)
		if err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: desc})
		size, err := compressedSize(img)
		if err != nil {
			return err
		}
		fmt.Fprintf(&summary, "%-14s %s  compressed %s\n", p.String(), desc.Digest, humanBytes(size))
	}
	idx = mutate.Annotations(idx, labels(o)).(v1.ImageIndex)
	idxDigest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(&summary, "%-14s %s\n", "index", idxDigest)
	stamp := summary.String()

	if o.layoutDir != "" {
		if err := writeLayout(o.layoutDir, idx, o.refName); err != nil {
			return err
		}
		fmt.Fprintf(&summary, "wrote OCI layout %s\n", o.layoutDir)
	}
	if o.archive != "" {
		if err := writeArchive(o.archive, idx, o.refName); err != nil {
			return err
		}
		fmt.Fprintf(&summary, "wrote OCI archive %s\n", o.archive)
	}
	for _, out := range nonEmpty(outputs) {
		if err := os.WriteFile(stampPath(out), []byte(key+"\n"+stamp), 0o644); err != nil {
			return err
		}
	}
	fmt.Print(summary.String())
	fmt.Printf("image: built in %.1fs\n", time.Since(start).Seconds())
	return nil
}

// imageBinary is one binary of the image: /name, built from pkg.
type imageBinary struct{ name, pkg string }

// imageBinaries are the image's binaries. The first is the entrypoint (the operator and
// every subcommand); the second is the data plane alone (receiver, migrate, version),
// which the operator's receiver Deployments and migration Jobs name as their command
// (internal/resources.ReceiverCommand): it links neither client-go nor
// controller-runtime, so a receiver pod maps half the memory.
var imageBinaries = []imageBinary{
	{name: "hookkeeper", pkg: "./cmd/hookkeeper"},
	{name: "hookkeeper-receiver", pkg: "./cmd/hookkeeper-receiver"},
}

// goBuild cross-compiles b for p. Go skips the link when the output is already up to
// date, so an unchanged tree costs little.
func goBuild(o buildOptions, p v1.Platform, b imageBinary) (string, error) {
	out := filepath.Join(o.binDir, p.OS+"-"+p.Architecture, b.name)
	cmd := exec.Command(o.goCmd, "build", "-trimpath",
		"-ldflags", "-s -w -X "+versionPkg+"="+o.version+" -X "+revisionPkg+"="+o.revision,
		"-o", out, b.pkg)
	cmd.Dir = o.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if p.Architecture == "arm64" {
		cmd.Env = append(cmd.Env, "GOARM64=v8.0")
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	fmt.Fprintf(os.Stderr, "==> go build %s (%s)\n", out, p.String())
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build for %s: %w", p.String(), err)
	}
	return out, nil
}

// file is one entry of a layer.
type file struct {
	name     string // without a leading slash; directories end in "/"
	mode     int64
	uid, gid int
	data     []byte
}

// baseFiles are the platform-independent files: what a static Go binary needs from an
// OS (the CA bundle, the nonroot user, nsswitch.conf) and the directories it may use.
// The second result summarises them for the stamp.
func baseFiles(o buildOptions) ([]file, string, error) {
	read := func(p string) ([]byte, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("base layer: %w", err)
		}
		return b, nil
	}
	ca, err := read(o.caFile)
	if err != nil {
		return nil, "", err
	}
	rootfs := filepath.Join(o.root, "hack", "image", "rootfs", "etc")
	var etc []file
	for _, n := range []string{"group", "nsswitch.conf", "passwd"} {
		b, err := read(filepath.Join(rootfs, n))
		if err != nil {
			return nil, "", err
		}
		etc = append(etc, file{name: "etc/" + n, mode: 0o644, data: b})
	}
	files := []file{
		{name: "etc/", mode: 0o755},
		etc[0], etc[1], etc[2],
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: nonrootID, gid: nonrootID},
		{name: "tmp/", mode: 0o1777},
	}
	// The binary links controller-runtime's envtest (for `hookkeeper dev`), whose
	// internal/testing/addr package runs os.MkdirAll of $HOME/.cache/kubebuilder-envtest,
	// else of /tmp/kubebuilder-envtest, at init and panics when both fail: on a read-only
	// root without a /tmp volume (the manager Deployment) every subcommand would crash.
	// MkdirAll of an existing directory writes nothing, so shipping both lets the binary
	// start on a read-only root; a mounted /tmp hides the second and is writable.
	files = append(files,
		file{name: "home/nonroot/.cache/", mode: 0o700, uid: nonrootID, gid: nonrootID},
		file{name: "home/nonroot/.cache/kubebuilder-envtest/", mode: 0o750, uid: nonrootID, gid: nonrootID},
		file{name: "tmp/kubebuilder-envtest/", mode: 0o750, uid: nonrootID, gid: nonrootID},
	)
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s %o %d %d %x\n", f.name, f.mode, f.uid, f.gid, sha256.Sum256(f.data))
	}
	return files, hex.EncodeToString(h.Sum(nil)), nil
}

// layerFromFiles is a gzip'd OCI layer of files, with every time at the Unix epoch
// (the config records the creation time; file times only make digests vary).
func layerFromFiles(files []file) (v1.Layer, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, f := range files {
		hdr := &tar.Header{
			Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid,
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX,
		}
		if strings.HasSuffix(f.name, "/") {
			hdr.Typeflag = tar.TypeDir
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	// Compress once here; tarball recognises gzip'd input and only decompresses it
	// to compute the diff ID.
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	data := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// platformImage is the image for p: the base layer, then one layer with the binaries
// (paths in the order of imageBinaries).
func platformImage(o buildOptions, p v1.Platform, base v1.Layer, binaries []string) (v1.Image, error) {
	var files []file
	for i, path := range binaries {
		bin, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		files = append(files, file{name: imageBinaries[i].name, mode: 0o755, data: bin})
	}
	binLayer, err := layerFromFiles(files)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: o.created}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "hack/image: CA certificates, nonroot user (65532), nsswitch.conf, /tmp",
		}},
		mutate.Addendum{Layer: binLayer, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "hack/image: /hookkeeper, /hookkeeper-receiver (CGO_ENABLED=0 go build -trimpath -ldflags=-s -w)",
		}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = created
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", nonrootID, nonrootID),
		Entrypoint: []string{"/" + imageBinaries[0].name},
		WorkingDir: "/",
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=" + caFile,
		},
		Labels: labels(o),
	}
	return mutate.ConfigFile(img, cf)
}

func labels(o buildOptions) map[string]string {
	l := map[string]string{
		labelTitle:   "hookkeeper",
		labelSource:  o.source,
		labelVersion: o.version,
		labelCreated: o.created.Format(time.RFC3339),
	}
	if o.revision != "" {
		l[labelRevision] = o.revision
	}
	return l
}

func descriptorOf(img v1.Image, p v1.Platform) (v1.Descriptor, error) {
	d, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{
		MediaType: types.OCIManifestSchema1, Digest: d, Size: int64(len(raw)), Platform: &p,
	}, nil
}

// compressedSize is what a pull transfers for img: its config and compressed layers.
func compressedSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	n := m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

// writeLayout replaces dir with an OCI layout whose index.json holds idx: the image
// index for several platforms, or the image itself for one, so `podman load` and
// `skopeo copy oci-archive:` find a manifest without choosing.
func writeLayout(dir string, idx v1.ImageIndex, refName string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	var opts []layout.Option
	if refName != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{labelRefName: refName}))
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if len(im.Manifests) == 1 {
		img, err := idx.Image(im.Manifests[0].Digest)
		if err != nil {
			return err
		}
		return p.AppendImage(img, append(opts, layout.WithPlatform(*im.Manifests[0].Platform))...)
	}
	return p.AppendIndex(idx, opts...)
}

// writeArchive writes the layout as a tar (the oci-archive format): entries sorted,
// times at the epoch.
func writeArchive(file string, idx v1.ImageIndex, refName string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(file), ".image-layout-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	dir := filepath.Join(tmp, "layout")
	if err := writeLayout(dir, idx, refName); err != nil {
		return err
	}
	var names []string
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		names = append(names, path)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	out, err := os.CreateTemp(filepath.Dir(file), ".image-archive-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(out.Name()) }()
	tw := tar.NewWriter(out)
	for _, path := range names {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if fi.IsDir() {
			hdr.Name += "/"
			hdr.Mode, hdr.Typeflag = 0o755, tar.TypeDir
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		_ = f.Close()
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(out.Name(), file)
}

func stampPath(out string) string {
	return filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".inputs")
}

// upToDate reports whether every output exists with a stamp of key, and returns the
// summary printed when it was built.
func upToDate(outputs []string, key string) (string, bool) {
	var summary string
	for _, out := range nonEmpty(outputs) {
		if _, err := os.Stat(out); err != nil {
			return "", false
		}
		b, err := os.ReadFile(stampPath(out))
		if err != nil {
			return "", false
		}
		k, rest, _ := strings.Cut(string(b), "\n")
		if k != key {
			return "", false
		}
		summary = rest
	}
	return summary, true
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func humanBytes(n int64) string {
	return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
}
