package main

import (
	"reflect"
	"testing"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

func TestSharingToolsAreSimulatedOnlyOnSimulatedNodesWithoutPaths(t *testing.T) {
	tests := []struct {
		name      string
		f         flags
		simulated bool
		wantMPS   plugin.MPSControl
		wantTS    plugin.TimeSlicer
	}{
		{"real node: the driver root's tools", flags{driverRoot: "/run/nvidia/driver"}, false,
			plugin.MPSProcess{Binary: "/run/nvidia/driver/usr/bin/nvidia-cuda-mps-control"}, plugin.NvidiaSMI{Binary: "/run/nvidia/driver/usr/bin/nvidia-smi"}},
		{"real node: paths given", flags{driverRoot: "/", mpsControl: "/driver-root/usr/bin/nvidia-cuda-mps-control", nvidiaSMI: "/driver-root/usr/bin/nvidia-smi"}, false,
			plugin.MPSProcess{Binary: "/driver-root/usr/bin/nvidia-cuda-mps-control"}, plugin.NvidiaSMI{Binary: "/driver-root/usr/bin/nvidia-smi"}},
		{"real node, plugin in a container: the mounted driver root's tools", flags{driverRoot: "/run/nvidia/driver", containerDriverRoot: "/driver-root"}, false,
			plugin.MPSProcess{Binary: "/driver-root/usr/bin/nvidia-cuda-mps-control"}, plugin.NvidiaSMI{Binary: "/driver-root/usr/bin/nvidia-smi"}},
		{"simulated node: simulated tools", flags{driverRoot: "/tmp/root"}, true,
			plugin.SimulatedMPS{}, &plugin.SimulatedTimeSlicer{}},
		{"simulated node: a path given is used", flags{driverRoot: "/tmp/root", mpsControl: "/opt/fake-mps"}, true,
			plugin.MPSProcess{Binary: "/opt/fake-mps"}, &plugin.SimulatedTimeSlicer{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mps, ts := sharingTools(tc.f, tc.simulated)
			if !reflect.DeepEqual(mps, tc.wantMPS) {
				t.Errorf("MPS control %#v, want %#v", mps, tc.wantMPS)
			}
			if !reflect.DeepEqual(ts, tc.wantTS) {
				t.Errorf("time-slicer %#v, want %#v", ts, tc.wantTS)
			}
		})
	}
}

func TestCDIHookPathIsOffOnSimulatedNodesUnlessGiven(t *testing.T) {
	tests := []struct {
		name      string
		flag      string
		simulated bool
		want      string
	}{
		{"real node: the toolkit's default path", "", false, "/usr/bin/nvidia-cdi-hook"},
		{"real node: a path given", "/home/kubernetes/bin/nvidia/nvidia-cdi-hook", false, "/home/kubernetes/bin/nvidia/nvidia-cdi-hook"},
		{"real node: none", "none", false, ""},
		{"simulated node: no hooks", "", true, ""},
		{"simulated node: a path given is used", "/opt/lab/nvidia-cdi-hook", true, "/opt/lab/nvidia-cdi-hook"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := cdiHookPath(tc.flag, tc.simulated); got != tc.want {
				t.Errorf("cdiHookPath(%q, %v) = %q, want %q", tc.flag, tc.simulated, got, tc.want)
			}
		})
	}
}
