package miglayout_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/gpudra/gpudra/driver/miglayout"
)

var (
	h100 = miglayout.GPU{Index: 0, PCIDeviceID: 0x233010DE, ProductName: "NVIDIA H100 80GB HBM3"}
	a100 = miglayout.GPU{Index: 1, PCIDeviceID: 0x20B010DE, ProductName: "NVIDIA A100-SXM4-40GB"}
	l40s = miglayout.GPU{Index: 2, PCIDeviceID: 0x26B910DE, ProductName: "NVIDIA L40S"}
)

func readShapes(t *testing.T) *miglayout.File {
	t.Helper()
	data, err := os.ReadFile("testdata/mig-parted-shapes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := miglayout.Parse(data)
	if err != nil {
		t.Fatalf("parsing mig-parted's shapes: %v", err)
	}
	return f
}

func TestParseMigPartedShapes(t *testing.T) {
	f := readShapes(t)
	want := []string{"all-1g.10gb", "all-1g.24gb-me", "all-1g.24gb.me.all", "all-1g.5gb.me", "all-balanced", "all-disabled", "all-enabled", "custom-config"}
	if got := f.Names(); !reflect.DeepEqual(got, want) {
		t.Fatalf("layouts %v, want %v", got, want)
	}
	enabled, _ := f.Layout("all-enabled")
	if e := enabled[0]; !e.AllDevices || !e.MIGEnabled || len(e.MIGDevices) != 0 {
		t.Errorf("all-enabled: %+v, want every GPU in MIG mode without instances", e)
	}
	disabled, _ := f.Layout("all-disabled")
	if e := disabled[0]; !e.AllDevices || e.MIGEnabled {
		t.Errorf("all-disabled: %+v", e)
	}
	balanced, _ := f.Layout("all-balanced")
	if len(balanced) != 4 {
		t.Fatalf("all-balanced has %d entries, want 4", len(balanced))
	}
	if got := balanced[3].DeviceFilter; len(got) != 1 || got[0].DeviceID != 0x20B710DE {
		t.Errorf("a single-string device-filter: %+v", got)
	}
	attrs, _ := f.Layout("all-1g.24gb-me")
	if !reflect.DeepEqual(attrs[0].MIGDevices, map[string]int{"1g.24gb-me": 4}) {
		t.Errorf("a profile without an engine: %v", attrs[0].MIGDevices)
	}
}

func TestSelectByDeviceIDIndexAndOrder(t *testing.T) {
	f := readShapes(t)
	tests := []struct {
		layout string
		gpu    miglayout.GPU
		ok     bool
		want   []string
	}{
		{"all-1g.10gb", h100, true, []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}},
		{"all-1g.10gb", a100, true, []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}},
		{"all-1g.10gb", l40s, false, nil},
		{"all-balanced", h100, true, []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}},
		{"all-balanced", a100, true, []string{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}},
		{"custom-config", miglayout.GPU{Index: 5}, true, []string{"2g.10gb", "2g.10gb", "2g.10gb"}},
		{"custom-config", miglayout.GPU{Index: 2}, true, nil},
		{"custom-config", miglayout.GPU{Index: 8}, false, nil},
	}
	for _, tc := range tests {
		layout, err := f.Layout(tc.layout)
		if err != nil {
			t.Fatal(err)
		}
		e, ok := miglayout.Select(layout, tc.gpu)
		if ok != tc.ok {
			t.Errorf("%s on GPU %d: selected %v, want %v", tc.layout, tc.gpu.Index, ok, tc.ok)
			continue
		}
		if got := e.Profiles(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s on GPU %d: profiles %v, want %v", tc.layout, tc.gpu.Index, got, tc.want)
		}
	}
}

func TestLastMatchingEntryDecides(t *testing.T) {
	f, err := miglayout.Parse([]byte(`
version: v1
mig-configs:
  mixed:
  - devices: all
    mig-enabled: false
  - devices: [1]
    mig-enabled: true
    mig-devices: {"7g.80gb": 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	layout, _ := f.Layout("mixed")
	if e, _ := miglayout.Select(layout, miglayout.GPU{Index: 1}); !e.MIGEnabled {
		t.Error("GPU 1 is decided by the first entry, want the last that selects it")
	}
	if e, _ := miglayout.Select(layout, miglayout.GPU{Index: 0}); e.MIGEnabled {
		t.Error("GPU 0 is in MIG mode, want the first entry's")
	}
}

func TestProductNameAndSubsystemFilters(t *testing.T) {
	f, err := miglayout.Parse([]byte(`
version: v1
mig-configs:
  by-name:
  - device-filter: ["nvidia h100 80gb hbm3", "0x20B010DE:0x134F10DE"]
    devices: all
    mig-enabled: true
    mig-devices: {"1g.10gb": 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	layout, _ := f.Layout("by-name")
	if _, ok := miglayout.Select(layout, h100); !ok {
		t.Error("the product name does not select the H100")
	}
	if _, ok := miglayout.Select(layout, a100); ok {
		t.Error("an A100 without the subsystem ID is selected")
	}
	sub := a100
	sub.PCISubsystemID = 0x134F10DE
	if _, ok := miglayout.Select(layout, sub); !ok {
		t.Error("the A100 with the subsystem ID is not selected")
	}
}

func TestLayoutNotFoundListsTheLayouts(t *testing.T) {
	_, err := readShapes(t).Layout("all-3g.40gb")
	if err == nil || !strings.Contains(err.Error(), `no MIG layout "all-3g.40gb"`) || !strings.Contains(err.Error(), "all-balanced, all-disabled") {
		t.Errorf("error %v, want one naming the layout and listing those there are", err)
	}
}

func TestParseErrorsNameTheFieldAndAcceptedValues(t *testing.T) {
	const head = "version: v1\nmig-configs:\n  x:\n"
	tests := []struct{ name, yaml, want string }{
		{"no version", "mig-configs: {x: [{devices: all, mig-enabled: false}]}", "version: missing; the accepted version is v1"},
		{"wrong version", "version: v2\nmig-configs: {}", "version: \"v2\" is not accepted; the accepted version is v1"},
		{"unknown top-level field", "version: v1\nmigConfigs: {}", "migConfigs: unknown field; accepted fields are version, mig-configs"},
		{"no layouts", "version: v1\nmig-configs: {}", "mig-configs: at least one layout is required"},
		{"layout not a list", "version: v1\nmig-configs: {x: {devices: all}}", "mig-configs.x: must be a list of entries, got a mapping"},
		{"empty layout", "version: v1\nmig-configs: {x: []}", "mig-configs.x: at least one entry is required"},
		{"unknown entry field", head + "  - devices: all\n    mig-enabled: false\n    mig-strategy: single\n", "mig-configs.x[0].mig-strategy: unknown field; accepted fields are device-filter, devices, mig-enabled, mig-devices"},
		{"no devices", head + "  - mig-enabled: false\n", "mig-configs.x[0].devices: missing (required)"},
		{"no mig-enabled", head + "  - devices: all\n", "mig-configs.x[0].mig-enabled: missing (required)"},
		{"devices some", head + "  - devices: some\n    mig-enabled: false\n", `mig-configs.x[0].devices: "some" is not accepted; accepted are "all" and a list of GPU indices such as [0, 1]`},
		{"devices negative", head + "  - devices: [0, -1]\n    mig-enabled: false\n", "mig-configs.x[0].devices[1]: -1 is not a GPU index"},
		{"devices twice", head + "  - devices: [1, 1]\n    mig-enabled: false\n", "mig-configs.x[0].devices[1]: GPU 1 is listed twice"},
		{"devices empty", head + "  - devices: []\n    mig-enabled: false\n", "mig-configs.x[0].devices: the list of GPU indices is empty"},
		{"mig-enabled not a boolean", head + "  - devices: all\n    mig-enabled: \"yes\"\n", "mig-configs.x[0].mig-enabled: must be true or false"},
		{"enabled without devices", head + "  - devices: all\n    mig-enabled: true\n", "mig-configs.x[0].mig-devices: missing; required with mig-enabled: true"},
		{"disabled with devices", head + "  - devices: all\n    mig-enabled: false\n    mig-devices: {1g.10gb: 7}\n", "mig-configs.x[0].mig-devices: must be empty with mig-enabled: false"},
		{"bad profile", head + "  - devices: all\n    mig-enabled: true\n    mig-devices: {1g10gb: 7}\n", `mig-configs.x[0].mig-devices: "1g10gb" is not a MIG profile name`},
		{"bad count", head + "  - devices: all\n    mig-enabled: true\n    mig-devices: {1g.10gb: seven}\n", "mig-configs.x[0].mig-devices.1g.10gb: the count must be an integer from 0"},
		{"negative count", head + "  - devices: all\n    mig-enabled: true\n    mig-devices: {1g.10gb: -1}\n", "mig-configs.x[0].mig-devices.1g.10gb: the count must be an integer from 0"},
		{"all counts 0", head + "  - devices: all\n    mig-enabled: true\n    mig-devices: {1g.10gb: 0}\n", "mig-configs.x[0].mig-devices: every count is 0"},
		{"unquoted device id", head + "  - device-filter: [0x233010DE]\n    devices: all\n    mig-enabled: false\n", "mig-configs.x[0].device-filter[0]: must be a string (quote PCI device IDs"},
		{"bad device id", head + "  - device-filter: [\"0x2330\"]\n    devices: all\n    mig-enabled: false\n", "mig-configs.x[0].device-filter[0]: \"0x2330\": a PCI ID is 0x and 8 hex digits"},
		{"bad subsystem id", head + "  - device-filter: \"0x233010DE:0xZZ\"\n    devices: all\n    mig-enabled: false\n", "mig-configs.x[0].device-filter: \"0x233010DE:0xZZ\": subsystem ID: a PCI ID is"},
		{"empty filter", head + "  - device-filter: [\"\"]\n    devices: all\n    mig-enabled: false\n", "mig-configs.x[0].device-filter[0]: empty; accepted are PCI device IDs"},
		{"filter not a string", head + "  - device-filter: {a: b}\n    devices: all\n    mig-enabled: false\n", "mig-configs.x[0].device-filter: must be a PCI device ID or product name, or a list of them, got a mapping"},
		{"not YAML", "version: [", "not YAML"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := miglayout.Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestASecondDocumentIsRefused(t *testing.T) {
	_, err := miglayout.Parse([]byte("version: v1\nmig-configs:\n  all-disabled:\n  - {devices: all, mig-enabled: false}\n---\nversion: v1\nmig-configs: {}\n"))
	if err == nil || !strings.Contains(err.Error(), "2 YAML documents") {
		t.Fatalf("Parse of two documents = %v, want an error counting them", err)
	}
}
