package helm_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/component-base/featuregate"

	"github.com/gpudra/gpudra/internal/features"
)

func controllerArg(m manifest, prefix string) string {
	for _, a := range m.get("Deployment", "gpudra-controller").(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, prefix) {
			return a
		}
	}
	return ""
}

// featureGates reaches every component as one --feature-gates, its gates sorted so that
// renders are stable; none given, none passed (each binary's defaults).
func TestFeatureGatesReachEveryComponent(t *testing.T) {
	m := render(t)
	if a := pluginArg(m.get("DaemonSet", "gpudra-kubelet-plugin").(*appsv1.DaemonSet), "--feature-gates"); a != "" {
		t.Errorf("defaults: plugin arg %q, want none", a)
	}
	if a := controllerArg(m, "--feature-gates"); a != "" {
		t.Errorf("defaults: controller arg %q, want none", a)
	}
	want := "--feature-gates=DynamicMIG=true,MPSDaemonPods=false,WebView=true"
	m = render(t, `featureGates={"WebView":true,"MPSDaemonPods":false,"DynamicMIG":true}`, "kubeletPlugin.mpsControlDaemons=process",
		`kubeletPlugin.pools=[{"name":"h100","mig":"dynamic","nodeSelector":{"pool":"h100"}}]`)
	for _, ds := range []string{"gpudra-kubelet-plugin", "gpudra-kubelet-plugin-h100"} {
		if a := pluginArg(m.get("DaemonSet", ds).(*appsv1.DaemonSet), "--feature-gates"); a != want {
			t.Errorf("DaemonSet %s: %q, want %q", ds, a, want)
		}
	}
	if a := controllerArg(m, "--feature-gates"); a != want {
		t.Errorf("controller: %q, want %q", a, want)
	}
}

// A value asking for a gated behaviour whose gate is off fails the install, naming the
// value and the gate; turning the gate on (alpha) or leaving it on (beta) renders it.
func TestGatedValuesNeedTheirGate(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		gate string // alpha: what turns it on; beta: what turns it off
		want string
	}{
		{[]string{"kubeletPlugin.mig=dynamic"}, "featureGates.DynamicMIG=true",
			"kubeletPlugin.mig=dynamic requires featureGates.DynamicMIG=true (alpha)"},
		{[]string{`kubeletPlugin.pools=[{"name":"h100","mig":"dynamic","nodeSelector":{"pool":"h100"}}]`}, "featureGates.DynamicMIG=true",
			"kubeletPlugin.pools[h100].mig=dynamic requires featureGates.DynamicMIG=true (alpha)"},
		{[]string{"kubeletPlugin.memoryOversubscription=1.5", "kubeletPlugin.vgpuLibrary=/usr/local/vgpu/libvgpu.so", "featureGates.HAMiCoreEnforcement=true"}, "featureGates.MemoryOversubscription=true",
			"kubeletPlugin.memoryOversubscription=1.5 requires featureGates.MemoryOversubscription=true (alpha)"},
		{[]string{"kubeletPlugin.vgpuLibrary=/usr/local/vgpu/libvgpu.so"}, "featureGates.HAMiCoreEnforcement=true",
			"kubeletPlugin.vgpuLibrary requires featureGates.HAMiCoreEnforcement=true (alpha)"},
		{[]string{"kubeletPlugin.sharePriorityThreshold=1000"}, "featureGates.SharePriorityFromPods=true",
			"kubeletPlugin.sharePriorityThreshold requires featureGates.SharePriorityFromPods=true (alpha)"},
		{[]string{"controller.dashboardPort=8444"}, "featureGates.WebView=true",
			"controller.dashboardPort requires featureGates.WebView=true (alpha)"},
		{nil, "featureGates.MIGLayouts=false",
			"kubeletPlugin.migLayouts (null installs none) requires featureGates.MIGLayouts=true (beta, on by default)"},
		{[]string{"kubeletPlugin.migLayouts=null"}, "featureGates.MPSDaemonPods=false",
			"kubeletPlugin.mpsControlDaemons=pod requires featureGates.MPSDaemonPods=true (beta, on by default)"},
		{[]string{"kubeletPlugin.shareUsage=true"}, "featureGates.ClaimUsage=false",
			"kubeletPlugin.shareUsage=true requires featureGates.ClaimUsage=true (beta, on by default)"},
		{[]string{"kueue.admissionCheck=true"}, "featureGates.TopologyAdmissionCheck=false",
			"kueue.admissionCheck=true requires featureGates.TopologyAdmissionCheck=true (beta, on by default)"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			alpha := strings.HasSuffix(tc.gate, "=true")
			off := tc.sets
			if !alpha {
				off = append(append([]string{}, tc.sets...), tc.gate)
			}
			out, err := template(t, off)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("%v: err %v, output should say %q:\n%s", off, err, tc.want, out)
			}
			if alpha {
				render(t, append(append([]string{}, tc.sets...), tc.gate)...)
			} else {
				render(t, tc.sets...)
			}
		})
	}
	// AllAlpha turns on every alpha gate, as it does in the binaries.
	render(t, "featureGates.AllAlpha=true", "kubeletPlugin.mig=dynamic", "controller.dashboardPort=8444")
}

func TestFeatureGatesValuesAreChecked(t *testing.T) {
	for set, want := range map[string]string{
		"featureGates.DynamicMig=true": "featureGates.DynamicMig: not a gpudra feature gate; known gates: ClaimUsage, DataPrewarm, Defragmentation, DynamicMIG",
		"featureGates.DynamicMIG=yes":  "featureGates.DynamicMIG=yes: want true or false",
	} {
		if out, err := template(t, []string{set}); err == nil || !strings.Contains(out, want) {
			t.Errorf("--set %s: err %v, output should say %q:\n%s", set, err, want, out)
		}
	}
}

// The chart knows the binaries' gates, each at the binaries' stage.
func TestChartGateStagesAreTheBinaries(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "templates", "_helpers.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)define "gpudra.featureGateStages" -}}\n(.*?)\{\{- end`).FindSubmatch(data)
	if block == nil {
		t.Fatal(`_helpers.tpl has no "gpudra.featureGateStages"`)
	}
	chart := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(block[1])), "\n") {
		name, stage, _ := strings.Cut(line, ": ")
		chart[name] = stage
	}
	for _, name := range features.Known() {
		want, _, _ := strings.Cut(features.Stage(featuregate.Feature(name)), ",")
		if chart[name] != want {
			t.Errorf("gate %s: the chart says %q, the binaries %q", name, chart[name], want)
		}
		delete(chart, name)
	}
	for name := range chart {
		t.Errorf("the chart knows a gate %s the binaries do not", name)
	}
}
