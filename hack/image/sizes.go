package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ImageSize is one platform's image in a layout or archive.
type ImageSize struct {
	Platform string `json:"platform"`
	Digest   string `json:"digest"`
	// Config is the config's digest: the image ID podman gives the image when it loads it.
	Config string `json:"configDigest"`
	// Compressed is what a pull transfers: the config plus the compressed layers.
	Compressed int64 `json:"compressedBytes"`
	Layers     int   `json:"layers"`
}

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	Platform  *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Variant      string `json:"variant,omitempty"`
	} `json:"platform,omitempty"`
}

type manifestOrIndex struct {
	MediaType string       `json:"mediaType"`
	Manifests []descriptor `json:"manifests"`
	Config    *descriptor  `json:"config"`
	Layers    []descriptor `json:"layers"`
}

func runSizes(args []string) error {
	fs := flag.NewFlagSet("sizes", flag.ExitOnError)
	layoutDir := fs.String("layout", "", "an OCI layout directory")
	archive := fs.String("archive", "", "an OCI archive (tar of a layout)")
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	_ = fs.Parse(args)
	var sizes []ImageSize
	var err error
	switch {
	case *layoutDir != "":
		sizes, err = LayoutSizes(func(name string) ([]byte, error) {
			return os.ReadFile(filepath.Join(*layoutDir, filepath.FromSlash(name)))
		})
	case *archive != "":
		sizes, err = ArchiveSizes(*archive)
	default:
		return errors.New("sizes: pass -layout DIR or -archive FILE")
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(sizes)
	}
	for _, s := range sizes {
		fmt.Printf("%s\t%s\t%d\t%.1f MiB\n", s.Platform, s.Digest, s.Compressed, float64(s.Compressed)/(1<<20))
	}
	return nil
}

// ArchiveSizes is LayoutSizes of an OCI archive. Only the small JSON blobs are kept in
// memory.
func ArchiveSizes(path string) ([]ImageSize, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	small := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Size > 1<<20 {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		small[strings.TrimPrefix(hdr.Name, "./")] = b
	}
	return LayoutSizes(func(name string) ([]byte, error) {
		b, ok := small[name]
		if !ok {
			return nil, fmt.Errorf("%s: no %s", path, name)
		}
		return b, nil
	})
}

// LayoutSizes walks index.json of an OCI layout (read through read, by slash path) down
// to every image manifest, and returns each image's platform, digest and compressed
// size.
func LayoutSizes(read func(name string) ([]byte, error)) ([]ImageSize, error) {
	var out []ImageSize
	var walk func(doc []byte, platform string) error
	walk = func(doc []byte, platform string) error {
		var m manifestOrIndex
		if err := json.Unmarshal(doc, &m); err != nil {
			return err
		}
		for _, d := range m.Manifests {
			b, err := read("blobs/" + strings.Replace(d.Digest, ":", "/", 1))
			if err != nil {
				return err
			}
			p := platform
			if d.Platform != nil {
				p = d.Platform.OS + "/" + d.Platform.Architecture
				if d.Platform.Variant != "" {
					p += "/" + d.Platform.Variant
				}
			}
			if strings.Contains(d.MediaType, "index") || strings.Contains(d.MediaType, "manifest.list") {
				if err := walk(b, p); err != nil {
					return err
				}
				continue
			}
			var img manifestOrIndex
			if err := json.Unmarshal(b, &img); err != nil {
				return err
			}
			s := ImageSize{Platform: p, Digest: d.Digest, Layers: len(img.Layers)}
			if img.Config != nil {
				s.Config = img.Config.Digest
				s.Compressed += img.Config.Size
			}
			for _, l := range img.Layers {
				s.Compressed += l.Size
			}
			out = append(out, s)
		}
		return nil
	}
	index, err := read("index.json")
	if err != nil {
		return nil, err
	}
	if err := walk(index, ""); err != nil {
		return nil, err
	}
	return out, nil
}
