// Package buildinfo is what a gpudra binary was built from: the version, git commit and
// build date set at link time in k8s.io/component-base/version, as in Kubernetes'
// components (go build -ldflags "-X k8s.io/component-base/version.gitVersion=...", see
// LinkerFlags and the Makefile's build target). Every binary reports it with --version; a
// server's metrics registry takes it as the gpudra_build_info gauge (NewCollector).
package buildinfo

import (
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/component-base/version"
	"k8s.io/component-base/version/verflag"
)

// VersionPackage is the package whose variables the linker sets (-X VersionPackage.gitVersion=...).
const VersionPackage = "k8s.io/component-base/version"

// Get is this binary's build information. Without linker flags (a plain go build), the
// version is component-base's placeholder v0.0.0-master+$Format:%H$.
func Get() apimachineryversion.Info { return version.Get() }

// String is program's one-line version: "<program> <version> (commit <commit>, built
// <date>, <go version> <platform>)".
func String(program string) string {
	v := Get()
	return fmt.Sprintf("%s %s (commit %s, built %s, %s %s)", program, v.GitVersion, v.GitCommit, v.BuildDate, v.GoVersion, v.Platform)
}

// AddVersionFlag adds --version to fs: k8s.io/component-base/version/verflag's flag, the
// one kube-scheduler has (--version prints the version, --version=raw every field).
func AddVersionFlag(fs *pflag.FlagSet) { verflag.AddFlags(fs) }

// PrintVersion writes what fs's --version asks for to w (String(program), or with
// --version=raw every field of Get) and reports whether it asked for either; a command
// returns when it did.
func PrintVersion(w io.Writer, fs *pflag.FlagSet, program string) bool {
	f := fs.Lookup("version")
	if f == nil {
		return false
	}
	switch f.Value.String() {
	case string(verflag.VersionTrue):
		fmt.Fprintln(w, String(program))
	case string(verflag.VersionRaw):
		fmt.Fprintf(w, "%#v\n", Get())
	default:
		return false
	}
	return true
}

// The gpudra_build_info gauge: 1, labelled with what the binary was built from.
const (
	MetricName = "gpudra_build_info"
	MetricHelp = "A metric with a constant '1' value labelled by the version, git commit, build date and Go version the gpudra binary was built from."
)

// LabelNames are gpudra_build_info's labels, in the order of LabelValues.
var LabelNames = []string{"version", "git_commit", "build_date", "go_version"}

// LabelValues are gpudra_build_info's label values for this binary.
func LabelValues() []string {
	v := Get()
	return []string{v.GitVersion, v.GitCommit, v.BuildDate, v.GoVersion}
}

// NewCollector is gpudra_build_info for a client_golang registry.
func NewCollector() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricName, Help: MetricHelp}, LabelNames)
	g.WithLabelValues(LabelValues()...).Set(1)
	return g
}
