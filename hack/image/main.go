// Command image builds hookkeeper's OCI image without Docker: static binaries from the
// Go build on an empty base, plus CA certificates, a passwd/group entry for the nonroot
// user (65532) and nsswitch.conf (hack/image/rootfs), as one image index over the
// requested platforms. It writes an OCI layout and/or an OCI archive (a tar of the
// layout, which `podman load` and `skopeo copy oci-archive:` read).
//
//	image build -root . -platforms linux/amd64,linux/arm64 -layout bin/image
//	image sizes -layout bin/image          # compressed size of each image (tab-separated)
//	image sizes -archive bin/x.tar -json   # the same as JSON, for the bench table
//
// The output is reproducible: every file in the layers has the Unix epoch as its time, the
// layers are gzip'd deterministically, and the config's created time is the commit's
// time, so unchanged inputs give the same digests. A stamp file next to each output
// records its inputs; when they are unchanged the output is left as it is.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = runBuild(os.Args[2:])
	case "sizes":
		err = runSizes(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage:
  image build -root DIR [-platforms linux/amd64,linux/arm64] [-layout DIR] [-archive FILE]
              [-version V] [-revision R] [-source URL] [-created RFC3339] [-ref-name NAME]
  image sizes (-layout DIR | -archive FILE) [-json]`)
	os.Exit(2)
}
