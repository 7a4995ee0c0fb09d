package miglayout_test

import (
	"os"
	"testing"

	"github.com/gpudra/gpudra/driver/miglayout"
)

// FuzzParse feeds Parse arbitrary files: it must end in a layout file or an error, never a
// panic, and what it accepts must be within the limits that bound applying a layout.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("testdata/mig-parted-shapes.yaml"); err == nil {
		f.Add(data)
	}
	for _, tc := range hostileLayouts {
		if len(tc.yaml) <= 1<<16 {
			f.Add([]byte(tc.yaml))
		}
	}
	f.Add([]byte(`{"version": "v1", "mig-configs": {"x": [{"devices": [0, 1], "mig-enabled": true, "mig-devices": {"1g.10gb+me": 1, "3g.40gb": 2}}]}}`))
	f.Add([]byte("version: v1\nmig-configs:\n  x:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: {\"1g.10gb\": 1e9}\n"))
	f.Add([]byte("version: v1\nmig-configs:\n  x:\n  - devices: all\n    mig-enabled: !!binary dHJ1ZQ==\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := miglayout.Parse(data)
		if err != nil {
			return
		}
		if n := len(file.Layouts); n == 0 || n > miglayout.MaxLayouts {
			t.Fatalf("accepted %d layouts", n)
		}
		for name, entries := range file.Layouts {
			if len(entries) == 0 || len(entries) > miglayout.MaxEntries {
				t.Fatalf("layout %q: accepted %d entries", name, len(entries))
			}
			for _, e := range entries {
				if len(e.Devices) > miglayout.MaxListed || len(e.DeviceFilter) > miglayout.MaxListed {
					t.Fatalf("layout %q: accepted %d indices and %d filters", name, len(e.Devices), len(e.DeviceFilter))
				}
				total := 0
				for _, n := range e.MIGDevices {
					if n <= 0 {
						t.Fatalf("layout %q: accepted a count of %d", name, n)
					}
					total += n
				}
				if total > miglayout.MaxInstancesPerGPU || len(e.Profiles()) != total {
					t.Fatalf("layout %q: accepted %d instances, listed %d", name, total, len(e.Profiles()))
				}
				if !e.MIGEnabled && total > 0 {
					t.Fatalf("layout %q: instances with MIG disabled", name)
				}
			}
		}
	})
}
