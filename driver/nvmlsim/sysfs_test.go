package nvmlsim

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

func TestSysFSGivesDeviceAttributeThePCIeRootAndNUMANode(t *testing.T) {
	tests := []struct {
		profile string
		roots   []string // per GPU
		numa    []int64
	}{
		{"dgx-v100", []string{"pci0000:00", "pci0000:00", "pci0000:00", "pci0000:00", "pci0000:80", "pci0000:80", "pci0000:80", "pci0000:80"}, []int64{0, 0, 0, 0, 1, 1, 1, 1}},
		{"l40s-pcie", []string{"pci0000:16", "pci0000:16", "pci0000:16", "pci0000:16", "pci0000:97", "pci0000:97", "pci0000:97", "pci0000:97"}, []int64{0, 0, 0, 0, 1, 1, 1, 1}},
		{"dgx-a100", []string{"pci0000:00", "pci0000:00", "pci0000:40", "pci0000:40", "pci0000:80", "pci0000:80", "pci0000:b0", "pci0000:b0"}, []int64{0, 0, 0, 0, 1, 1, 1, 1}},
		{"dgx-h100", []string{"pci0000:17", "pci0000:28", "pci0000:38", "pci0000:5a", "pci0000:97", "pci0000:a8", "pci0000:b8", "pci0000:d9"}, []int64{0, 0, 0, 0, 1, 1, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.profile, func(t *testing.T) {
			srv, sysfs, err := Open(tc.profile, "n")
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.roots {
				d, _ := srv.DeviceGetHandleByIndex(i)
				pci, _ := d.GetPciInfo()
				busID := strings.ToLower(cString(pci.BusIdLegacy[:])) // as discovery turns NVML's form into sysfs's
				root, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, deviceattribute.WithFS(sysfs))
				if err != nil {
					t.Fatalf("GPU %d pcieRoot: %v", i, err)
				}
				if got := *root.Value.StringValue; got != tc.roots[i] {
					t.Errorf("GPU %d (%s) pcieRoot = %s, want %s", i, busID, got, tc.roots[i])
				}
				numa, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(busID, deviceattribute.ScalarAttribute, deviceattribute.WithFS(sysfs))
				if err != nil {
					t.Fatalf("GPU %d numaNode: %v", i, err)
				}
				if got := *numa.Value.IntValue; got != tc.numa[i] {
					t.Errorf("GPU %d numaNode = %d, want %d", i, got, tc.numa[i])
				}
				if nvmlNUMA, _ := d.GetNumaNodeId(); int64(nvmlNUMA) != tc.numa[i] {
					t.Errorf("GPU %d: NVML NUMA node %d disagrees with sysfs %d", i, nvmlNUMA, tc.numa[i])
				}
				list, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(busID, deviceattribute.ListAttribute, deviceattribute.WithFS(sysfs))
				if err != nil || !slices.Equal(list.Value.IntValues, []int64{tc.numa[i]}) {
					t.Errorf("GPU %d numaNode list = %v, %v; want [%d] (one socket per node)", i, list.Value.IntValues, err, tc.numa[i])
				}
			}
		})
	}
}

func TestSysFSPlacesGPUsBehindTheirSwitch(t *testing.T) {
	_, sysfs, err := Open("dgx-v100", "n")
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, bus := range []string{"0000:03:00.0", "0000:04:00.0"} { // GPUs 0 and 1 share a switch
		target, err := sysfs.ReadLink("bus/pci/devices/" + bus)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, target)
	}
	parent := func(s string) string { return s[:strings.LastIndex(s, "/")] }
	upstream := func(s string) string { return parent(parent(s)) }
	if upstream(targets[0]) != upstream(targets[1]) || parent(targets[0]) == parent(targets[1]) {
		t.Errorf("GPUs 0 and 1 should share a switch upstream port with distinct downstream ports: %v", targets)
	}
	if got, want := targets[0], "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"; got != want {
		t.Errorf("GPU 0 link = %s, want %s", got, want)
	}
}
