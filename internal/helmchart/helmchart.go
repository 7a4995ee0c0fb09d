// Package helmchart renders, lints and installs gpudra's Helm chart through Helm's Go SDK
// (helm.sh/helm/v4), in process: the chart tests and the lab need no helm binary.
package helmchart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"
	"helm.sh/helm/v4/pkg/kube"
	rspb "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
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

func (v Values) merge() (map[string]any, error) {
	base := map[string]any{}
	if len(v.YAML) > 0 {
		if err := yaml.Unmarshal(v.YAML, &base); err != nil {
			return nil, fmt.Errorf("values: %w", err)
		}
	}
	opts := values.Options{Values: v.Set, JSONValues: v.SetJSON}
	set, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		return nil, err
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

func quietConfig() *action.Configuration {
	return action.NewConfiguration(action.ConfigurationSetLogger(slog.New(slog.NewTextHandler(io.Discard, nil)).Handler()))
}

// Render renders the chart in dir as `helm template` does, without a cluster: the
// manifests, then the hooks, each document under its `# Source:` line.
func Render(dir string, o Options, v Values) (string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return "", err
	}
	vals, err := v.merge()
	if err != nil {
		return "", err
	}
	kv, err := o.kubeVersion()
	if err != nil {
		return "", err
	}
	inst := action.NewInstall(quietConfig())
	inst.DryRunStrategy = action.DryRunClient
	inst.Replace = true
	inst.ReleaseName = o.release()
	inst.Namespace = o.namespace()
	inst.KubeVersion = kv
	r, err := inst.Run(ch, vals)
	if err != nil {
		return "", err
	}
	rel, ok := r.(*rspb.Release)
	if !ok {
		return "", fmt.Errorf("rendering %s: unexpected release type %T", dir, r)
	}
	var out bytes.Buffer
	fmt.Fprintln(&out, strings.TrimSpace(rel.Manifest))
	for _, h := range rel.Hooks {
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return out.String(), nil
}

// Lint lints the chart in dir as `helm lint` does; strict counts warnings as errors.
func Lint(dir string, o Options, v Values, strict bool) error {
	vals, err := v.merge()
	if err != nil {
		return err
	}
	kv, err := o.kubeVersion()
	if err != nil {
		return err
	}
	l := action.NewLint()
	l.Strict = strict
	l.Namespace = o.namespace()
	l.KubeVersion = kv
	// Errors holds each message at or above the tolerance (warnings too when strict).
	return errors.Join(l.Run([]string{dir}, vals).Errors...)
}

// Install installs the chart in dir as release o.Release in o.Namespace (created when
// missing) of the cluster kubeconfig names, as `helm install --create-namespace` does,
// and returns the release's notes.
func Install(ctx context.Context, kubeconfig, dir string, o Options, v Values) (string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return "", err
	}
	vals, err := v.merge()
	if err != nil {
		return "", err
	}
	ns := o.namespace()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &ns
	cfg := quietConfig()
	if err := cfg.Init(flags, ns, "secret"); err != nil {
		return "", err
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName = o.release()
	inst.Namespace = ns
	inst.CreateNamespace = true
	inst.WaitStrategy = kube.HookOnlyStrategy
	r, err := inst.RunWithContext(ctx, ch, vals)
	if err != nil {
		return "", err
	}
	if rel, ok := r.(*rspb.Release); ok && rel.Info != nil {
		return rel.Info.Notes, nil
	}
	return "", nil
}

// Load loads the chart in dir (for callers that read its metadata).
func Load(dir string) (*chart.Chart, error) { return loader.Load(dir) }

// Package packages the chart in dir as `helm package --version --app-version
// --destination` does and returns the archive's path (<dest>/<name>-<version>.tgz).
func Package(dir, version, appVersion, dest string) (string, error) {
	p := action.NewPackage()
	p.Version, p.AppVersion, p.Destination = version, appVersion, dest
	return p.Run(dir, nil)
}
