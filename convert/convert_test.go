package convert

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenClasses stand for gpudra's DeviceClasses in the golden tests, so that their
// reports do not change with the chart's list of MIG profiles: gpu.gpudra.dev serves
// nvidia.com/gpu and one class serves nvidia.com/mig-1g.5gb.
func goldenClasses() []*resourceapi.DeviceClass {
	gpu := &resourceapi.DeviceClass{Spec: resourceapi.DeviceClassSpec{ExtendedResourceName: ptr.To("nvidia.com/gpu")}}
	gpu.Name = "gpu.gpudra.dev"
	mig := &resourceapi.DeviceClass{Spec: resourceapi.DeviceClassSpec{ExtendedResourceName: ptr.To("nvidia.com/mig-1g.5gb")}}
	mig.Name = "mig-1g.5gb.gpudra.dev"
	return []*resourceapi.DeviceClass{gpu, mig}
}

// goldenCase is one input of testdata converted with some options.
type goldenCase struct {
	input  string // testdata/<input>.yaml
	suffix string // output files testdata/<input><suffix>.out.yaml and .report.txt
	opts   Options
}

var goldenCases = []goldenCase{
	{input: "one-gpu"},
	{input: "shared-containers"},
	{input: "shared-pods"},
	{input: "mig-parent"},
	{input: "timeslicing"},
	{input: "mps"},
	{input: "memory-shares"},
	{input: "compute-domain"},
	{input: "device-plugin"},
	{input: "device-plugin", suffix: ".claims", opts: Options{Claims: true}},
	{input: "deviceclass"},
	{input: "unconvertible"},
	{input: "v1beta1"},
	{input: "hami-shares"},
	{input: "hami-invalid"},
}

func (g goldenCase) name() string { return g.input + g.suffix }

func (g goldenCase) run(t *testing.T) (in []byte, res *Result) {
	t.Helper()
	in, err := os.ReadFile(filepath.Join("testdata", g.input+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	opts := g.opts
	opts.Classes = goldenClasses()
	res, err = Convert(in, opts)
	if err != nil {
		t.Fatalf("%s: %v", g.name(), err)
	}
	return in, res
}

func TestGolden(t *testing.T) {
	for _, g := range goldenCases {
		t.Run(g.name(), func(t *testing.T) {
			_, res := g.run(t)
			var report bytes.Buffer
			if err := res.WriteReport(&report); err != nil {
				t.Fatal(err)
			}
			compareGolden(t, filepath.Join("testdata", g.name()+".out.yaml"), res.Output)
			compareGolden(t, filepath.Join("testdata", g.name()+".report.txt"), report.Bytes())
		})
	}
}

func compareGolden(t *testing.T, file string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test ./convert/ -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test ./convert/ -update rewrites it):\n--- got\n%s\n--- want\n%s", file, got, want)
	}
}

// Every report line names an object and says something.
func TestReportEntriesNameObjectAndReason(t *testing.T) {
	for _, g := range goldenCases {
		_, res := g.run(t)
		for _, e := range res.Entries {
			if e.Object == "" || strings.HasSuffix(e.Object, " ") || e.Message == "" {
				t.Errorf("%s: entry without object or message: %+v", g.name(), e)
			}
		}
	}
}

func convertString(t *testing.T, in string, opts Options) (string, *Result) {
	t.Helper()
	if opts.Classes == nil {
		opts.Classes = goldenClasses()
	}
	res, err := Convert([]byte(in), opts)
	if err != nil {
		t.Fatal(err)
	}
	return string(res.Output), res
}

func TestListItemsAndSubrequests(t *testing.T) {
	out, res := convertString(t, `apiVersion: v1
kind: List
items:
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaim
  metadata: {name: any-gpu, namespace: ns}
  spec:
    devices:
      requests:
      - name: gpu
        firstAvailable:
        - name: h100
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel: {expression: 'device.attributes["gpu.nvidia.com"].productName.contains("H100")'}
        - name: small
          deviceClassName: mig.nvidia.com
          selectors:
          - cel: {expression: 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'}
      - name: nic
        exactly: {deviceClassName: nic.example.com}
      constraints:
      - matchAttribute: resource.kubernetes.io/pcieRoot
`, Options{})
	for _, want := range []string{
		"deviceClassName: gpu.gpudra.dev",
		"deviceClassName: mig.gpudra.dev",
		`device.attributes["gpu.gpudra.dev"].migProfile == "1g.10gb"`,
		"deviceClassName: nic.example.com",
		"matchAttribute: resource.kubernetes.io/pcieRoot",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if res.Count(NotConverted) != 0 || res.Objects != 1 {
		t.Errorf("objects %d, report %v", res.Objects, res.Entries)
	}
	for _, e := range res.Entries {
		if !strings.HasPrefix(e.Path, "items[0].spec.devices.requests[0].firstAvailable[") {
			t.Errorf("path %q does not lead into the List's item", e.Path)
		}
	}
}

// A constraint in NVIDIA's domain that also covers another driver's request cannot be
// converted, and neither can the claim.
func TestConstraintAcrossDrivers(t *testing.T) {
	in := `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com}
    - name: nic
      exactly: {deviceClassName: nic.example.com}
    constraints:
    - matchAttribute: gpu.nvidia.com/productName
`
	out, res := convertString(t, in, Options{})
	if out != in {
		t.Errorf("the claim changed:\n%s", out)
	}
	if res.Count(NotConverted) != 1 || !strings.Contains(res.Entries[0].Message, "not for NVIDIA's GPU driver") {
		t.Errorf("report: %v", res.Entries)
	}
}

// A MIG constraint on an attribute gpudra's MIG devices lack, and a class that is not in
// the input but whose requests read NVIDIA's attributes.
func TestClaimsLeftAsTheyWere(t *testing.T) {
	for name, in := range map[string]string{
		"uuid constraint": `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c}
spec:
  devices:
    requests:
    - name: a
      exactly: {deviceClassName: mig.nvidia.com}
    - name: b
      exactly: {deviceClassName: mig.nvidia.com}
    constraints:
    - distinctAttribute: gpu.nvidia.com/uuid
`,
		"unknown class": `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c}
spec:
  devices:
    requests:
    - name: a
      exactly:
        deviceClassName: a100.example.com
        selectors:
        - cel: {expression: 'device.attributes["gpu.nvidia.com"].index == 0'}
`,
		"classic DRA": `apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {name: c}
spec:
  spec:
    resourceClassName: gpu.nvidia.com
`,
	} {
		out, res := convertString(t, in, Options{})
		if out != in {
			t.Errorf("%s: changed:\n%s", name, out)
		}
		if res.Count(NotConverted) == 0 || res.Count(Converted) != 0 {
			t.Errorf("%s: report %v", name, res.Entries)
		}
	}
}

func TestInvalidInput(t *testing.T) {
	for _, in := range []string{"a: [", "- just\n- a list\n"} {
		if _, err := Convert([]byte(in), Options{Classes: goldenClasses()}); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// Converting a converted output again changes nothing.
func TestConvertingTwiceChangesNothing(t *testing.T) {
	for _, g := range goldenCases {
		_, first := g.run(t)
		opts := g.opts
		opts.Classes = goldenClasses()
		second, err := Convert(first.Output, opts)
		if err != nil {
			t.Fatalf("%s: %v", g.name(), err)
		}
		if !bytes.Equal(second.Output, first.Output) {
			t.Errorf("%s: converting again changed the output:\n%s", g.name(), second.Output)
		}
		if n := second.Count(Converted); n != 0 {
			t.Errorf("%s: converting again converted %d fields: %v", g.name(), n, second.Entries)
		}
	}
}
