package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
)

// imageSize is one entry of `hookkeeper-image sizes -json`.
type imageSize struct {
	Platform   string `json:"platform"`
	Digest     string `json:"digest"`
	Compressed int64  `json:"compressedBytes"`
	Layers     int    `json:"layers"`
}

// runImageSuite reports what a regression in the image would show first: the
// compressed size a node pulls. The receiver's RSS is the receiver suite's row, measured
// on the image's own binary when make bench runs it (bin/image-build/linux-amd64).
func runImageSuite(ctx context.Context, env *Env) ([]Row, error) {
	for _, p := range []string{env.ImageTool, env.ImageArchive} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("image suite: %w (make image-test-archive builds both)", err)
		}
	}
	out, err := exec.CommandContext(ctx, env.ImageTool, "sizes", "-archive", env.ImageArchive, "-json").Output() //nolint:gosec // the bench's own flags name the tool
	if err != nil {
		return nil, fmt.Errorf("image suite: %s sizes: %w", env.ImageTool, err)
	}
	var sizes []imageSize
	if err := json.Unmarshal(out, &sizes); err != nil {
		return nil, fmt.Errorf("image suite: read %s sizes: %w", env.ImageTool, err)
	}
	var rows []Row
	for _, s := range sizes {
		rows = append(rows, Row{
			Measure: "image compressed size, " + s.Platform,
			Value:   fmt.Sprintf("%.1f MiB", float64(s.Compressed)/(1<<20)),
			Note:    fmt.Sprintf("%d layers, config and layers as pulled; %s", s.Layers, s.Digest),
		})
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("image suite: %s holds no image", env.ImageArchive)
	}
	return rows, nil
}
