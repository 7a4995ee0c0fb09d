package usage

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestParsePodCgroup(t *testing.T) {
	for _, tc := range []struct {
		cgroup    string
		pod       types.UID
		container string
	}{
		{"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice/cri-containerd-abc123.scope\n",
			"1b4e28ba-2fa1-11d2-883f-0016d3cca427", "abc123"},
		{"12:memory:/kubepods/burstable/pod6fa459ea-ee8a-3ca4-894e-db77e160355e/def456\n11:cpu:/kubepods/burstable/pod6fa459ea-ee8a-3ca4-894e-db77e160355e/def456\n",
			"6fa459ea-ee8a-3ca4-894e-db77e160355e", "def456"},
		{"0::/kubepods.slice/kubepods-pod0e9d8c7b_6a5f_4e3d_2c1b_a09f8e7d6c5b.slice/crio-987.scope\n",
			"0e9d8c7b-6a5f-4e3d-2c1b-a09f8e7d6c5b", "987"},
		{"0::/user.slice/user-1000.slice/session-2.scope\n", "", ""},
		{"garbage", "", ""},
	} {
		pod, container := parsePodCgroup([]byte(tc.cgroup))
		if pod != tc.pod || container != tc.container {
			t.Errorf("%q: pod %q container %q, want %q %q", tc.cgroup, pod, container, tc.pod, tc.container)
		}
	}
}
