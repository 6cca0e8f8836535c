// Package version tells which build of hookkeeper is running: the release version set
// at link time (-X), else the module version, and the VCS revision and time Go records
// in every binary built from a git checkout.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is set at link time: -ldflags "-X github.com/hookkeeper/hookkeeper/internal/version.Version=v0.3.0".
// Empty means a development build.
var Version string

// Revision is the VCS revision set at link time (-X .../internal/version.Revision=<sha>);
// when empty, the revision Go recorded (builds without -buildvcs=false) is used.
var Revision string

// Info describes this binary.
type Info struct {
	Version   string
	Revision  string
	BuildTime string
	Modified  bool
	GoVersion string
	Platform  string
}

// Get reads the link-time version and the build information Go embeds.
func Get() Info {
	info := Info{Version: Version, Revision: Revision, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if info.Revision == "" {
					info.Revision = s.Value
				}
			case "vcs.time":
				info.BuildTime = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	return info
}

// String is one line: "hookkeeper v0.3.0 (revision abc123, 2026-12-01T06:00:00Z, go1.26.8 linux/amd64)".
func (i Info) String() string {
	rev := i.Revision
	if rev == "" {
		rev = "unknown"
	}
	if i.Modified {
		rev += "+modified"
	}
	when := ""
	if i.BuildTime != "" {
		when = ", " + i.BuildTime
	}
	return fmt.Sprintf("hookkeeper %s (revision %s%s, %s %s)", i.Version, rev, when, i.GoVersion, i.Platform)
}
