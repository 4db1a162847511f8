package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time: go build -ldflags "-X main.version=v1.2.3".
// Unset, the module version from the build info is used.
var version = ""

func newVersionCmd(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print adaptq's version",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			v, note := buildVersion()
			fmt.Fprintf(e.stdout, "adaptq %s %s %s/%s\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			if note != "" {
				fmt.Fprintln(e.stdout, note)
			}
			return nil
		},
	}
}

// buildVersion is the binary's version, and a note on a line of its own
// when it has none to give.
func buildVersion() (v, note string) {
	if version != "" {
		return version, ""
	}
	return versionOf(debug.ReadBuildInfo())
}

// versionOf is the version a binary's build info gives. go build and go
// install from a clone (Go 1.24 and later) stamp the main module with a
// pseudo-version, v0.0.0-TIME-REVISION, +dirty if the tree was modified:
// it is kept as it is. A (devel) build with the VCS settings gets their
// revision; one without (go run, -buildvcs=false, a git worktree, which
// the go command does not recognise as a repository) says so in note.
func versionOf(bi *debug.BuildInfo, ok bool) (v, note string) {
	if !ok {
		return "(devel)", ""
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v, ""
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "(devel)", "(no VCS revision embedded: go run and -buildvcs=false embed none; go build or go install in a git clone does)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	v = "(devel)-" + rev
	if modified {
		v += "+modified"
	}
	if at != "" {
		v += "-" + at
	}
	return v, ""
}
