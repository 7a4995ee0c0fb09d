package buildinfo

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// Source is what a build is made from, for LinkerFlags.
type Source struct {
	// Version is Version of the tree's git description; Commit its HEAD; TreeState clean
	// or dirty (empty: unknown); Date the build date, ISO 8601 in UTC.
	Version, Commit, TreeState, Date string
}

// LinkerFlags are the go build -ldflags that set what Get reports in a binary built from
// s; a field left empty keeps component-base's placeholder.
func LinkerFlags(s Source) string {
	var flags []string
	for _, v := range []struct{ name, value string }{
		{"gitVersion", s.Version}, {"gitCommit", s.Commit}, {"gitTreeState", s.TreeState}, {"buildDate", s.Date},
	} {
		if v.value != "" {
			flags = append(flags, "-X "+VersionPackage+"."+v.name+"="+v.value)
		}
	}
	return strings.Join(flags, " ")
}

// Version is the version of a build whose `git describe --tags --always --dirty` is
// describe: the description itself when it starts from a tag (v1.2.3, v1.2.3-4-gabcdef0,
// ...-dirty), else v0.0.0-<describe> (no tag below the commit), v0.0.0-dev without git.
// The result parses as a semantic version, which Kubernetes' libraries in gpudra-scheduler
// require of it. The Makefile's build target applies the same rule.
func Version(describe string) string {
	describe = strings.TrimSpace(describe)
	switch {
	case describe == "":
		return "v0.0.0-dev"
	case strings.HasPrefix(describe, "v"):
		return describe
	}
	return "v0.0.0-" + describe
}

// dateLayout is ISO 8601 in UTC, as Kubernetes' builds write buildDate.
const dateLayout = "2006-01-02T15:04:05Z"

// FromGit is the Source of the git work tree at repo, dated at its HEAD commit (as a
// reproducible build's SOURCE_DATE_EPOCH is): builds of one tree link the same binary, which
// go build then leaves in place. Without git, or outside a work tree, the version is
// v0.0.0-dev and the rest left unknown.
func FromGit(ctx context.Context, repo string) Source {
	git := func(args ...string) string {
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", repo}, args...)...).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	describe := git("describe", "--tags", "--always", "--dirty")
	s := Source{Version: Version(describe), Commit: git("rev-parse", "HEAD")}
	if describe != "" {
		s.TreeState = "clean"
		if strings.HasSuffix(describe, "-dirty") {
			s.TreeState = "dirty"
		}
	}
	if unix := git("show", "-s", "--format=%ct", "HEAD"); unix != "" {
		if sec, err := strconv.ParseInt(unix, 10, 64); err == nil {
			s.Date = time.Unix(sec, 0).UTC().Format(dateLayout)
		}
	}
	return s
}

// ParseVersion is a version given by hand (make release VERSION=...): a semantic version,
// its leading v optional, returned with it (v1.2.3-rc.1). Build metadata (+...) is refused:
// an image tag cannot hold a +.
func ParseVersion(s string) (string, error) {
	v := "v" + strings.TrimPrefix(strings.TrimSpace(s), "v")
	if _, err := utilversion.ParseSemantic(v); err != nil || strings.Contains(v, "+") {
		return "", fmt.Errorf("version %q: want a semantic version without build metadata, such as v1.2.3, 1.2.3 or v1.2.3-rc.1", s)
	}
	return v, nil
}

// ChartVersion is version as a Helm chart's version and appVersion and gpudra's image tags
// write it: without the leading v (v1.2.3-4-gabcdef0 → 1.2.3-4-gabcdef0).
func ChartVersion(version string) string { return strings.TrimPrefix(version, "v") }
