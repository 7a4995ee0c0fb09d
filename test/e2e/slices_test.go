//go:build e2e

package e2e

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpudra/gpudra/lab"
)

// TestEveryNodePublishesWhatInspectRenders compares each node's published ResourceSlices with
// what `gpudra inspect` renders offline for the same simulated profile and node name.
func TestEveryNodePublishesWhatInspectRenders(t *testing.T) {
	inLane(t, realNodeLane)
	for _, n := range state.Nodes {
		t.Run(n.Name, func(t *testing.T) {
			args := []string{"inspect", "--node-name=" + n.Name, "-o", "yaml"}
			if n.Profile != "" {
				args = append(args, "--nvml=sim:"+n.Profile)
			}
			if n.KFD != "" {
				args = append(args, "--kfd=sim:"+n.KFD)
			}
			if n.MIG != "" {
				args = append(args, "--mig="+n.MIG)
			}
			cmd := exec.CommandContext(t.Context(), gpudraCLI, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
			}
			want := decodeSlices(t, stdout.Bytes())
			got, err := lab.NodeSlices(t.Context(), client, n.Name)
			if err != nil {
				t.Fatal(err)
			}
			if len(want) == 0 {
				t.Fatalf("gpudra inspect rendered no ResourceSlice for %s", n.Name)
			}
			if diff := specsDiff(want, got); diff != "" {
				t.Errorf("node %s (%s) publishes something else than gpudra inspect renders: %s", n.Name, n.Profile, diff)
			}
		})
	}
}

func decodeSlices(t *testing.T, data []byte) []resourcev1.ResourceSlice {
	t.Helper()
	objs, err := lab.DecodeManifests(data)
	if err != nil {
		t.Fatalf("decode gpudra inspect output: %v", err)
	}
	var out []resourcev1.ResourceSlice
	for _, o := range objs {
		if o.GetKind() != "ResourceSlice" {
			continue
		}
		var s resourcev1.ResourceSlice
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &s); err != nil {
			t.Fatalf("gpudra inspect output: %v", err)
		}
		out = append(out, s)
	}
	return out
}
