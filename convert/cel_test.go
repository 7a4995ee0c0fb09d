package convert

import (
	"sort"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/driver"
	"github.com/gpudra/gpudra/driver/simulated"
)

func TestConvertCEL(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind kind
		in   string
		want string // the converted expression; "" when whyHas is set
		why  string // a substring of the reason it is not converted
	}{
		{name: "single quotes", kind: kindMIG,
			in:   `device.attributes['gpu.nvidia.com'].profile == '1g.5gb'`,
			want: `device.attributes['gpu.gpudra.dev'].migProfile == '1g.5gb'`},
		{name: "double quotes", kind: kindGPU,
			in:   `device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-40GB"`,
			want: `device.attributes["gpu.gpudra.dev"].productName == "NVIDIA A100-SXM4-40GB"`},
		{name: "raw and triple-quoted literals", kind: kindMIG,
			in:   `device.attributes[r"gpu.nvidia.com"].profile == '1g.5gb' && device.attributes['''gpu.nvidia.com'''].parentUUID != ""`,
			want: `device.attributes[r"gpu.gpudra.dev"].migProfile == '1g.5gb' && device.attributes['''gpu.gpudra.dev'''].parentUUID != ""`},
		{name: "index by name", kind: kindMIG,
			in:   `device.attributes["gpu.nvidia.com"]["profile"] == "2g.10gb"`,
			want: `device.attributes["gpu.gpudra.dev"]["migProfile"] == "2g.10gb"`},
		{name: "in and has", kind: kindMIG,
			in:   `"profile" in device.attributes["gpu.nvidia.com"] && has(device.attributes["gpu.nvidia.com"].profile)`,
			want: `"migProfile" in device.attributes["gpu.gpudra.dev"] && has(device.attributes["gpu.gpudra.dev"].migProfile)`},
		{name: "blanks and a comment before the name", kind: kindMIG,
			in:   "device.attributes['gpu.nvidia.com'] . // the profile\n  profile == '1g.5gb'",
			want: "device.attributes['gpu.gpudra.dev'] . // the profile\n  migProfile == '1g.5gb'"},
		{name: "inside a macro", kind: kindGPU,
			in:   `["H100", "A100"].exists(p, device.attributes["gpu.nvidia.com"].productName.contains(p))`,
			want: `["H100", "A100"].exists(p, device.attributes["gpu.gpudra.dev"].productName.contains(p))`},
		{name: "driver and type", kind: kindGPU,
			in:   `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'`,
			want: `device.driver == 'gpu.gpudra.dev' && device.attributes['gpu.gpudra.dev'].type == 'gpu'`},
		{name: "capacity", kind: kindGPU,
			in:   `device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("40Gi"))`,
			want: `device.capacity["gpu.gpudra.dev"].memory.isGreaterThan(quantity("40Gi"))`},
		{name: "versions", kind: kindGPU,
			in:   `device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.0.0")) && device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("550.0.0")) >= 0`,
			want: `device.attributes["gpu.gpudra.dev"].cudaComputeCapability.isGreaterThan(semver("8.0.0")) && device.attributes["gpu.gpudra.dev"].driverVersion.compareTo(semver("550.0.0")) >= 0`},
		{name: "PCI bus ID of older releases", kind: kindGPU,
			in:   `device.attributes["gpu.nvidia.com"].pcieBusID == "0000:07:00.0"`,
			want: `device.attributes["resource.kubernetes.io"].pciBusID == "0000:07:00.0"`},
		{name: "standard attributes stay", kind: kindMIG,
			in:   `device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00"`,
			want: `device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00"`},
		{name: "text after a wide character", kind: kindMIG,
			in:   `"ü" != "" && device.attributes["gpu.nvidia.com"].profile == "1g.5gb"`,
			want: `"ü" != "" && device.attributes["gpu.gpudra.dev"].migProfile == "1g.5gb"`},
		{name: "gpudra's already", kind: kindGPU,
			in:   `device.attributes["gpu.gpudra.dev"].nvlinkClique != ""`,
			want: `device.attributes["gpu.gpudra.dev"].nvlinkClique != ""`},

		{name: "unknown attribute", kind: kindGPU, in: `device.attributes["gpu.nvidia.com"].addressingMode == "HMM"`, why: "addressingMode"},
		{name: "minor", kind: kindGPU, in: `device.attributes["gpu.nvidia.com"].minor == 0`, why: "minor number"},
		{name: "MIG UUID, guarded: only static MIG devices have one", kind: kindMIG,
			in:   `device.attributes["gpu.nvidia.com"].uuid == "MIG-x" // the one in use`,
			want: "has(device.attributes[\"gpu.gpudra.dev\"].uuid) && (\n" + `device.attributes["gpu.gpudra.dev"].uuid == "MIG-x" // the one in use` + "\n)"},
		{name: "MIG index", kind: kindMIG, in: `device.attributes["gpu.nvidia.com"].index == 0`, why: "migPlacementStart"},
		{name: "MIG attribute on a GPU", kind: kindGPU, in: `device.attributes["gpu.nvidia.com"].profile == "1g.5gb"`, why: "MIG devices"},
		{name: "MIG capacity", kind: kindMIG, in: `device.capacity["gpu.nvidia.com"].copyEngines.isGreaterThan(quantity("1"))`, why: "memory, multiprocessors, compute only"},
		{name: "PCI bus ID of a MIG device", kind: kindMIG, in: `device.attributes["resource.kubernetes.io"].pciBusID != ""`, why: "pciBusID"},
		{name: "the domain map as a whole", kind: kindGPU, in: `device.attributes["gpu.nvidia.com"].size() > 3`, why: "other than by a literal name"},
		{name: "a computed domain", kind: kindGPU, in: `device.attributes["gpu." + "nvidia.com"].uuid != ""`, why: "literal domain"},
		{name: "another driver's domain", kind: kindGPU, in: `device.attributes["dra.net"].rdma`, why: "dra.net"},
		{name: "the type of a share", kind: kindShare, in: `device.attributes["gpu.nvidia.com"].type == "gpu"`, why: `type "share"`},
		{name: "another NVIDIA driver", kind: kindGPU, in: `device.driver == "compute-domain.nvidia.com"`, why: "compute-domain.nvidia.com"},
		{name: "not CEL", kind: kindGPU, in: `device.attributes[`, why: "does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := convertCEL(tc.in, tc.kind, false)
			if tc.why != "" {
				if len(res.whys) == 0 {
					t.Fatalf("converted to %q, want a reason containing %q", res.expr, tc.why)
				}
				if !strings.Contains(strings.Join(res.whys, "; "), tc.why) {
					t.Fatalf("reasons %q, want one containing %q", res.whys, tc.why)
				}
				return
			}
			if len(res.whys) > 0 {
				t.Fatalf("not converted: %v", res.whys)
			}
			if res.expr != tc.want {
				t.Fatalf("got  %s\nwant %s", res.expr, tc.want)
			}
		})
	}
}

// A derived attribute must evaluate on every device, and a dynamic MIG device has no uuid.
func TestMIGUUIDInDerivedAttributeIsRefused(t *testing.T) {
	res := convertCEL(`device.attributes["gpu.nvidia.com"].uuid`, kindMIG, true)
	if len(res.whys) == 0 || !strings.Contains(res.whys[0], "static MIG") {
		t.Fatalf("got %q, %v; want a reason naming static MIG", res.expr, res.whys)
	}
}

func TestMIGProfileOf(t *testing.T) {
	for r, want := range map[string]string{
		"nvidia.com/mig-1g.5gb":      "1g.5gb",
		"nvidia.com/mig-3g.40gb":     "3g.40gb",
		"nvidia.com/mig-1g.10gb.me":  "1g.10gb+me",
		"nvidia.com/mig-1g.23gb-me":  "1g.23gb-me",
		"nvidia.com/mig-1g.23gb.gfx": "1g.23gb+gfx",
		"nvidia.com/mig-1c.3g.20gb":  "",
		"nvidia.com/mig-1g.5gb.foo":  "",
		"nvidia.com/mig-":            "",
		"nvidia.com/gpu":             "",
	} {
		got, ok := migProfileOf(r)
		if ok != (want != "") || got != want {
			t.Errorf("%s: got %q, %v, want %q", r, got, ok, want)
		}
	}
}

// The tables of what gpudra publishes are what its kubelet plugin renders: every
// attribute and capacity of a whole GPU, a share and a MIG device on the simulated
// nodes, by domain, and nothing else.
func TestGpudraTablesMatchRenderedDevices(t *testing.T) {
	attrs := map[kind]map[string]map[string]bool{}
	caps := map[kind]map[string]bool{}
	for _, p := range []string{"dgx-a100", "dgx-h100", "dgx-v100", "hgx-a100-4gpu", "hgx-h100-4gpu", "l40s-pcie"} {
		_, slices, err := simulated.Slices(p, "node", driver.RenderOptions{MIG: driver.MIGDynamic})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slices {
			for _, d := range s.Spec.Devices {
				var k kind
				switch *d.Attributes[api.AttrType].StringValue {
				case api.TypeGPU:
					k = kindGPU
				case api.TypeShare:
					k = kindShare
				case api.TypeMIG:
					k = kindMIG
				default:
					continue
				}
				if attrs[k] == nil {
					attrs[k], caps[k] = map[string]map[string]bool{}, map[string]bool{}
				}
				for name := range d.Attributes {
					domain, n := splitName(name, s.Spec.Driver)
					if attrs[k][domain] == nil {
						attrs[k][domain] = map[string]bool{}
					}
					attrs[k][domain][n] = true
				}
				for name := range d.Capacity {
					domain, n := splitName(resourceapi.QualifiedName(name), s.Spec.Driver)
					if domain != api.DriverName {
						t.Errorf("capacity %s in domain %s", n, domain)
					}
					caps[k][n] = true
				}
			}
		}
	}
	for _, k := range []kind{kindGPU, kindShare, kindMIG} {
		for domain, names := range attrs[k] {
			if got, want := sorted(names), sortedList(gpudraAttrs[k][domain]); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("%s attributes in %s: rendered %v, table %v", k, domain, got, want)
			}
		}
		for domain := range gpudraAttrs[k] {
			if attrs[k][domain] == nil {
				t.Errorf("%s: the table lists domain %s, which no device carries", k, domain)
			}
		}
		if got, want := sorted(caps[k]), sortedList(gpudraCapacities[k]); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s capacities: rendered %v, table %v", k, got, want)
		}
	}
}

func splitName(q resourceapi.QualifiedName, driverName string) (string, string) {
	if d, n, ok := strings.Cut(string(q), "/"); ok {
		return d, n
	}
	return driverName, string(q)
}

func sorted(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedList(l []string) []string {
	out := append([]string(nil), l...)
	sort.Strings(out)
	return out
}
