package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionOf: a binary built from a clone says which revision it is.
// Go 1.24 and later stamp go build's and go install's main module with a
// pseudo-version (v0.0.0-TIME-REVISION, +dirty if modified), kept as it
// is; a build whose Main.Version is (devel) but that has the VCS settings
// prints the revision from them (it printed only "(devel)"); go run embeds
// neither, and says so.
func TestVersionOf(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "c3e89f0a1b2c3d4e5f60718293a4b5c6d7e8f901"},
		{Key: "vcs.time", Value: "2026-11-26T06:30:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want []string
		not  []string
	}{
		{"pseudo-version", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261126063000-c3e89f0a1b2c+dirty"}, Settings: vcs},
			[]string{"v0.0.0-20261126063000-c3e89f0a1b2c+dirty"}, []string{"(devel)"}},
		{"devel with VCS settings", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			[]string{"(devel)", "c3e89f0a1b2c", "modified", "2026-11-26T06:30:00Z"}, nil},
		{"devel, clean", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "c3e89f0a1b2c3d4e5f60718293a4b5c6d7e8f901"}, {Key: "vcs.modified", Value: "false"}}},
			[]string{"(devel)", "c3e89f0a1b2c"}, []string{"modified"}},
		{"go run", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			[]string{"(devel)", "no VCS revision", "go build"}, nil},
		{"release", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, []string{"v1.2.3"}, []string{"devel"}},
	} {
		v, note := versionOf(tc.bi, true)
		got := v + "\n" + note
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q does not say %q", tc.name, got, w)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(got, w) {
				t.Errorf("%s: %q says %q", tc.name, got, w)
			}
		}
	}
}
