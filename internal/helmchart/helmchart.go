// Package helmchart renders and packages gpudra's Helm chart through Helm's Go SDK
// (helm.sh/helm/v4), in process: the chart tests, the lab and the release need no helm
// binary.
//
// It uses Helm's chart loader, values, template engine and manifest sorter, not its
// action package: that one links Helm's Kubernetes client, whose kustomize support
// imports Go's plugin package, and the Go linker then binds every symbol at start-up
// (BIND_NOW), which go-nvml's lazily resolved NVML symbols do not survive. The gpudra
// CLI links both this package (through the lab) and go-nvml.
package helmchart

import (
	"bytes"
	"fmt"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"helm.sh/helm/v4/pkg/strvals"
	"sigs.k8s.io/yaml"
)

// Values are a chart's values as `helm` takes them on its command line.
type Values struct {
	// Set are key=value pairs, as --set takes them.
	Set []string
	// SetJSON are key=JSON pairs, as --set-json takes them.
	SetJSON []string
	// YAML is a values file's content, as --values reads it; Set and SetJSON win over it.
	YAML []byte
}

// SetArgs sorts key=value pairs into Values: a value that starts with [ or { is JSON
// (--set-json), any other a plain --set.
func SetArgs(pairs []string) Values {
	var v Values
	for _, p := range pairs {
		_, val, _ := strings.Cut(p, "=")
		if strings.HasPrefix(val, "[") || strings.HasPrefix(val, "{") {
			v.SetJSON = append(v.SetJSON, p)
		} else {
			v.Set = append(v.Set, p)
		}
	}
	return v
}

// Merge merges the values as helm does: the values file, then --set-json, then --set.
func (v Values) Merge() (map[string]any, error) {
	base := map[string]any{}
	if len(v.YAML) > 0 {
		if err := yaml.Unmarshal(v.YAML, &base); err != nil {
			return nil, fmt.Errorf("values: %w", err)
		}
	}
	// As helm's command line: --set-json first, then --set, each over the values file.
	set := map[string]any{}
	for _, kv := range v.SetJSON {
		if err := strvals.ParseJSON(kv, set); err != nil {
			return nil, fmt.Errorf("--set-json %s: %w", kv, err)
		}
	}
	for _, kv := range v.Set {
		if err := strvals.ParseInto(kv, set); err != nil {
			return nil, fmt.Errorf("--set %s: %w", kv, err)
		}
	}
	return mergeMaps(base, set), nil
}

// mergeMaps merges b into a, key by key where both hold maps, as helm merges values files.
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// Options say where the chart is rendered: release name, namespace and Kubernetes version.
type Options struct {
	Release     string // default "release-name", as helm template
	Namespace   string // default "default"
	KubeVersion string // e.g. v1.37.2; default Helm's
}

func (o Options) release() string {
	if o.Release == "" {
		return "release-name"
	}
	return o.Release
}

func (o Options) namespace() string {
	if o.Namespace == "" {
		return "default"
	}
	return o.Namespace
}

func (o Options) kubeVersion() (*common.KubeVersion, error) {
	if o.KubeVersion == "" {
		return nil, nil
	}
	kv, err := common.ParseKubeVersion(o.KubeVersion)
	if err != nil {
		return nil, fmt.Errorf("kube version %q: %w", o.KubeVersion, err)
	}
	return kv, nil
}

// Render renders the chart in dir as `helm template` does, without a cluster: the
// manifests in Helm's install order, then the hooks, each document under its
// `# Source:` line; NOTES.txt is left out.
func Render(dir string, o Options, v Values) (string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return "", err
	}
	vals, err := v.Merge()
	if err != nil {
		return "", err
	}
	kv, err := o.kubeVersion()
	if err != nil {
		return "", err
	}
	caps := common.DefaultCapabilities.Copy()
	if kv != nil {
		caps.KubeVersion = *kv
	}
	if err := chartutil.ProcessDependencies(ch, vals); err != nil {
		return "", err
	}
	top, err := util.ToRenderValuesWithSchemaValidation(ch, vals, common.ReleaseOptions{
		Name: o.release(), Namespace: o.namespace(), Revision: 1, IsInstall: true,
	}, caps, false)
	if err != nil {
		return "", err
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return "", err
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return "", fmt.Errorf("rendering %s: %w", dir, err)
	}
	var out bytes.Buffer
	for _, m := range manifests {
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	for _, h := range hooks {
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return out.String(), nil
}

// Package packages the chart in dir as `helm package --version --app-version
// --destination` does and returns the archive's path (<dest>/<name>-<version>.tgz).
func Package(dir, version, appVersion, dest string) (string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return "", err
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = version, appVersion
	if err := ch.Validate(); err != nil {
		return "", fmt.Errorf("%s: %w", dir, err)
	}
	return chartutil.Save(ch, dest)
}
