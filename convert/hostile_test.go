package convert

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func podWithGPU(qty string) string {
	return `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
spec:
  containers:
  - name: a
    image: x
    resources:
      limits: {nvidia.com/gpu: ` + qty + `, nvidia.com/mig-1g.5gb: 1}
`
}

// A device-plugin quantity that is not a whole number of devices from 1 to 32 leaves the
// pod exactly as it was, with a report line naming the field and what it accepts.
func TestDeviceCountsOutsideTheRangeLeaveThePod(t *testing.T) {
	for _, tc := range []struct{ name, qty string }{
		{"1e30 is no count", `"1e30"`},
		{"2^63 is no count", `"9223372036854775808"`},
		{"2^64+1 is no count", `18446744073709551617`},
		{"a fraction", `"1.5"`},
		{"millis that are not whole", `"1500m"`},
		{"negative", `-1`},
		{"zero", `0`},
		{"more than a claim holds", `33`},
		{"not a quantity", `lots`},
		{"a list", `[1]`},
		{"null", `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := podWithGPU(tc.qty)
			for _, claims := range []bool{false, true} {
				out, res := convertString(t, in, Options{Claims: claims})
				if out != in {
					t.Errorf("claims=%v: the pod changed:\n%s", claims, out)
				}
				found := false
				for _, e := range res.Entries {
					if e.Level == NotConverted && e.Path == "spec.containers[0].resources.limits[nvidia.com/gpu]" &&
						strings.Contains(e.Message, "from 1 to 32") {
						found = true
					}
					if e.Level == Converted {
						t.Errorf("claims=%v: converted: %v", claims, e)
					}
				}
				if !found {
					t.Errorf("claims=%v: no report line names the field and 1 to 32: %v", claims, res.Entries)
				}
			}
		})
	}
}

func TestDeviceCountsThatConvert(t *testing.T) {
	for qty, want := range map[string]string{`1`: "", `"2"`: "count: 2", `"3000m"`: "count: 3", `31`: "count: 31"} {
		out, res := convertString(t, podWithGPU(qty), Options{Claims: true})
		if res.Count(NotConverted) != 0 || !strings.Contains(out, "deviceClassName: gpu.gpudra.dev") || !strings.Contains(out, want) {
			t.Errorf("%s: report %v\n%s", qty, res.Entries, out)
		}
	}
}

// Devices of one pod go into one claim, which holds at most 32.
func TestPodAskingMoreThanAClaimHolds(t *testing.T) {
	in := `apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - {name: a, resources: {limits: {nvidia.com/gpu: 20}}}
  - {name: b, resources: {limits: {nvidia.com/gpu: 20}}}
`
	out, res := convertString(t, in, Options{Claims: true})
	if out != in || res.Count(NotConverted) != 2 || !strings.Contains(res.Entries[0].Message, "40 devices") {
		t.Errorf("report %v\n%s", res.Entries, out)
	}
}

// Aliases and merge keys are written out before converting, so each place converts on
// its own and nothing is missed.
func TestAliasesAndMergeKeys(t *testing.T) {
	for _, tc := range []struct {
		name, in    string
		claims      bool
		want, avoid []string
		// where nvidia.com resources outside a pod's containers are reported as not converted
		outside []string
	}{
		{
			name: "a merged share does not turn its anchor's whole GPU into a share",
			in: `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c}
spec:
  devices:
    requests:
    - name: whole
      exactly: &gpu {deviceClassName: gpu.nvidia.com}
    - name: part
      exactly:
        <<: *gpu
        capacity: {requests: {memory: 4Gi}}
`,
			want:  []string{"deviceClassName: gpu.gpudra.dev", "deviceClassName: gpu-share.gpudra.dev"},
			avoid: []string{"*gpu", "&gpu", "<<"},
		},
		{
			name: "limits behind an alias convert in every container",
			in: `apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: a
    resources: &r {limits: {nvidia.com/gpu: 1}}
  - name: b
    resources: *r
`,
			claims: true,
			want:   []string{"request: a-gpu", "request: b-gpu"},
			avoid:  []string{"nvidia.com/gpu", "*r"},
		},
		{
			name: "limits merged into a container convert",
			in: `apiVersion: v1
kind: Pod
metadata: {name: p}
x-defaults: &lim {limits: {nvidia.com/gpu: 2}}
spec:
  containers:
  - name: a
    resources: {<<: *lim}
`,
			claims:  true,
			want:    []string{"count: 2", "request: a-gpu", "resources: {claims:"},
			avoid:   []string{"*lim", "<<"},
			outside: []string{"x-defaults.limits"},
		},
		{
			name: "own keys win over merged ones",
			in: `apiVersion: v1
kind: Pod
metadata: {name: p}
x: &lim {nvidia.com/gpu: 2}
spec:
  containers:
  - name: a
    resources: {limits: {<<: *lim, nvidia.com/gpu: 1}}
`,
			claims: true,
			want:   []string{"request: a-gpu"},
			avoid:  []string{"count: 2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, res := convertString(t, tc.in, Options{Claims: tc.claims})
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, a := range tc.avoid {
				if strings.Contains(out, a) {
					t.Errorf("output has %q:\n%s", a, out)
				}
			}
			said := false
			var outside []string
			for _, e := range res.Entries {
				said = said || strings.Contains(e.Message, "aliases and merge keys")
				if e.Level == NotConverted {
					outside = append(outside, e.Path)
				}
			}
			if !said || !slices.Equal(outside, tc.outside) {
				t.Errorf("report: %v (not converted: %v, want %v)", res.Entries, outside, tc.outside)
			}
		})
	}
}

// YAML that Kubernetes would read otherwise, or that would take unbounded memory or
// time, is refused with an error that says why.
func TestHostileYAMLIsRefused(t *testing.T) {
	laughs := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 'b'; i <= 'k'; i++ {
		laughs += fmt.Sprintf("%c: &%c [*%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	for _, tc := range []struct{ name, in, why string }{
		{"aliases that expand a billion times", "apiVersion: v1\nkind: ConfigMap\n" + laughs, "YAML nodes"},
		{"an alias inside its own anchor", "apiVersion: v1\nkind: ConfigMap\ndata: &a [*a]\n", "contains it"},
		{"a key twice", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: a\n    resources:\n      limits: {nvidia.com/gpu: 1}\n      limits: {nvidia.com/gpu: 0}\n", `"limits" appears twice`},
		{"a key twice after merging", "x: &x {a: 1}\nkind: Pod\n<<: *x\nkind: Job\n", `"kind" appears twice`},
		{"merging a list of scalars", "kind: Pod\n<<: [1]\n", "merges a mapping"},
		{"a non-string key", "kind: Pod\n[1]: x\n", "not a string"},
		{"nesting too deep", "kind: Pod\nx: " + strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2) + "\n", "nested more than"},
		{"too large", strings.Repeat("#", MaxInputBytes+1), "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Convert([]byte(tc.in), Options{Classes: goldenClasses()})
			if err == nil || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("error %v, want one containing %q", err, tc.why)
			}
		})
	}
}

// zeros reads as /dev/zero does.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestReadInputStopsAtTheBound(t *testing.T) {
	if _, err := ReadInput(zeros{}); err == nil || !strings.Contains(err.Error(), "larger than 16 MiB") {
		t.Fatalf("error %v, want larger than 16 MiB", err)
	}
	in, err := ReadInput(strings.NewReader("kind: Pod\n"))
	if err != nil || string(in) != "kind: Pod\n" {
		t.Fatalf("%q, %v", in, err)
	}
}

// Names written are within Kubernetes' limits, the same for the same input, and
// different for inputs that differ only past the cut.
func TestLongNamesAreCutWithAHash(t *testing.T) {
	pod := func(name, ctr string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + "}\nspec:\n  containers:\n  - name: " + ctr + "\n    resources: {limits: {nvidia.com/gpu: 1}}\n"
	}
	long := strings.Repeat("a", 250)
	ctr := strings.Repeat("c", 63)
	in := pod(long+"x", ctr) + "---\n" + pod(long+"y", ctr)
	out, res := convertString(t, in, Options{Claims: true})
	again, _ := convertString(t, in, Options{Claims: true})
	if out != again {
		t.Errorf("two runs differ")
	}
	var templates []string
	for _, d := range splitDocs(t, []byte(out)) {
		if d.kind() != "ResourceClaimTemplate" {
			continue
		}
		m := d.obj["metadata"].(map[string]any)
		name := m["name"].(string)
		templates = append(templates, name)
		if len(name) > maxObjectName {
			t.Errorf("template name %d long", len(name))
		}
		spec, _ := claimSpec(t, d)
		for _, r := range spec.Devices.Requests {
			if len(r.Name) > maxLabel {
				t.Errorf("request name %q is %d long", r.Name, len(r.Name))
			}
		}
	}
	if len(templates) != 2 || templates[0] == templates[1] {
		t.Errorf("templates %v, want two different ones; report %v", templates, res.Entries)
	}
}

func TestDNSLabel(t *testing.T) {
	for _, tc := range []struct {
		in  string
		max int
	}{{"A.B_c", 63}, {strings.Repeat("x", 300), 253}, {"...", 63}, {"-" + strings.Repeat("y", 100) + "-", 63}, {"", 63}} {
		got := dnsLabel(tc.in, tc.max)
		if len(got) == 0 || len(got) > tc.max || strings.Trim(got, "-") != got || strings.Trim(got, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			t.Errorf("dnsLabel(%q, %d) = %q", tc.in, tc.max, got)
		}
	}
}

// Handing out n names that all want the same one looks up O(n) names, not O(n²).
func TestNamerLooksUpLinearly(t *testing.T) {
	const n = 5000
	nm := newNamer()
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		name := nm.unique("ns/", "job-gpus", maxObjectName)
		if seen[name] {
			t.Fatalf("%s handed out twice", name)
		}
		seen[name] = true
	}
	if nm.probes > 3*n {
		t.Errorf("%d look-ups for %d names", nm.probes, n)
	}
}

// Many workloads of one name: each gets a claim template of its own.
func BenchmarkConvertManySameNamedPods(b *testing.B) {
	var in strings.Builder
	for i := 0; i < 2000; i++ {
		in.WriteString("---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: a, resources: {limits: {nvidia.com/gpu: 1}}}\n")
	}
	for b.Loop() {
		if _, err := Convert([]byte(in.String()), Options{Claims: true, Classes: goldenClasses()}); err != nil {
			b.Fatal(err)
		}
	}
}

// Labels, annotations and node selectors for NVIDIA's software stay as they are and are
// reported, each by its field.
func TestNVIDIAMetadataIsReported(t *testing.T) {
	in := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: d
  annotations: {nvidia.com/use-gputype: A100, team: ml}
spec:
  template:
    metadata:
      labels: {app: x, gpu.nvidia.com/owner: y}
    spec:
      nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB}
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: nvidia.com/gpu.memory, operator: Gt, values: ["40000"]}
      runtimeClassName: nvidia
      containers:
      - name: a
        image: x
        env:
        - {name: HOME, value: /root}
        - {name: NVIDIA_VISIBLE_DEVICES, value: all}
`
	out, res := convertString(t, in, Options{})
	if out != in {
		t.Errorf("changed:\n%s", out)
	}
	want := map[string]bool{
		"metadata.annotations[nvidia.com/use-gputype]":            false,
		"spec.template.metadata.labels[gpu.nvidia.com/owner]":     false,
		"spec.template.spec.nodeSelector[nvidia.com/gpu.product]": false,
		"spec.template.spec.runtimeClassName":                     false,
		"spec.template.spec.containers[0].env[1]":                 false,
		"spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key": false,
	}
	for _, e := range res.Entries {
		if _, ok := want[e.Path]; ok && e.Level == NotConverted {
			want[e.Path] = true
		}
	}
	for p, seen := range want {
		if !seen {
			t.Errorf("%s not reported: %v", p, res.Entries)
		}
	}
	if len(res.Entries) != len(want) {
		t.Errorf("report %v", res.Entries)
	}
}

// A pod spec whose containers are not all named is reported, not skipped.
func TestUnnamedContainersAreReported(t *testing.T) {
	in := "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - image: x\n    resources: {limits: {nvidia.com/gpu: 1}}\n"
	_, res := convertString(t, in, Options{Claims: true})
	if res.Count(NotConverted) != 1 || res.Entries[0].Path != "spec.containers" {
		t.Errorf("report %v", res.Entries)
	}
}

// nvidia.com resources outside the containers' and init containers' resources (pod-level
// resources, ephemeral containers, a container's misplaced limits) become no claim: each is named, and the containers' own
// are converted as usual.
func TestGPUsOutsideTheContainersAreNamed(t *testing.T) {
	in := `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
spec:
  resources:
    limits: {nvidia.com/gpu: 1, cpu: "2"}
  containers:
  - name: a
    image: x
    resources:
      limits: {nvidia.com/gpu: 1}
  initContainers:
  - name: init
    image: x
    limits: {nvidia.com/gpu: 1}
  ephemeralContainers:
  - name: debug
    image: x
    resources:
      requests: {nvidia.com/mig-1g.10gb: 1}
`
	_, res := convertString(t, in, Options{Claims: true})
	want := map[string]string{
		"spec.resources.limits[nvidia.com/gpu]":          "pod-level resources take cpu, memory and hugepages only",
		"spec.ephemeralContainers[0].resources.requests": "nvidia.com/mig-1g.10gb is not in a pod's containers",
		"spec.initContainers[0].limits":                  "nvidia.com/gpu is not in a container's resources",
	}
	converted := false
	for _, e := range res.Entries {
		if e.Level == Converted && strings.HasPrefix(e.Path, "spec.containers[0]") {
			converted = true
		}
		if msg, ok := want[e.Path]; ok && e.Level == NotConverted && strings.Contains(e.Message, msg) {
			delete(want, e.Path)
		}
	}
	if !converted {
		t.Errorf("the container's GPU was not converted: %v", res.Entries)
	}
	for p, msg := range want {
		t.Errorf("no NotConverted entry at %s saying %q: %v", p, msg, res.Entries)
	}
}
