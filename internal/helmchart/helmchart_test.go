package helmchart

import (
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

func TestRenderAppliesValuesAsHelmTemplate(t *testing.T) {
	out, err := Render("testdata/mini", Options{Release: "r", Namespace: "ns", KubeVersion: "v1.37.2"},
		Values{YAML: []byte("mode: fast\nlabels: {owner: b}\n"), Set: []string{"replicas=3"}, SetJSON: []string{`labels={"team":"c"}`}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# Source: mini/templates/cm.yaml",
		"name: r-cm", "namespace: ns",
		`replicas: "3"`,
		// the values file's map merges with --set-json's, which wins where both set a key
		`labels: "{\"owner\":\"b\",\"team\":\"c\"}"`,
		`kube: "v1.37.2"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered chart lacks %q:\n%s", want, out)
		}
	}
}

func TestRenderNamesWhatTheChartRefuses(t *testing.T) {
	_, err := Render("testdata/mini", Options{}, SetArgs([]string{"mode=auto"}))
	if err == nil || !strings.Contains(err.Error(), "mode=auto: accepted values are fast, safe") {
		t.Fatalf("mode=auto rendered (err %v), want the chart's refusal", err)
	}
	if _, err := Render("testdata/mini", Options{KubeVersion: "one"}, SetArgs([]string{"mode=fast"})); err == nil || !strings.Contains(err.Error(), `kube version "one"`) {
		t.Errorf("a bad kube version: err %v", err)
	}
	if _, err := Render("testdata/none", Options{}, Values{}); err == nil {
		t.Error("a missing chart rendered")
	}
}

func TestPackageCarriesTheVersion(t *testing.T) {
	dest := t.TempDir()
	archive, err := Package("testdata/mini", "1.2.3-rc.1", "1.2.3-rc.1", dest)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dest, "mini-1.2.3-rc.1.tgz"); archive != want {
		t.Errorf("archive %s, want %s", archive, want)
	}
	ch, err := loader.Load(archive)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "1.2.3-rc.1" || ch.Metadata.AppVersion != "1.2.3-rc.1" {
		t.Errorf("packaged chart: version %q appVersion %q", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
	if _, err := Package("testdata/mini", "not a version", "", dest); err == nil {
		t.Error("a chart packaged with version \"not a version\"")
	}
}

func TestSetArgs(t *testing.T) {
	v := SetArgs([]string{"a=1", "b=[1,2]", `c={"x":1}`, "d=x[0]"})
	if strings.Join(v.Set, " ") != "a=1 d=x[0]" || strings.Join(v.SetJSON, " ") != `b=[1,2] c={"x":1}` {
		t.Errorf("SetArgs: set %q, json %q", v.Set, v.SetJSON)
	}
}
