//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"

	"github.com/gpudra/gpudra/lab"
)

// TestPluginRestartRepublishesIdenticalSlices restarts one node's plugin. The restarted plugin
// must adopt the slices it finds (same pool, same objects, no new generation: nothing changed)
// and keep reconciling them: a slice deleted behind its back comes back with identical content,
// and only then does the pool's generation move, by one.
func TestPluginRestartRepublishesIdenticalSlices(t *testing.T) {
	inLane(t, clusterLane)
	node := state.Nodes[0].Name
	before, err := lab.NodeSlices(t.Context(), client, node)
	if err != nil || len(before) == 0 {
		t.Fatalf("slices of %s before the restart: %v (%d)", node, err, len(before))
	}
	restarted := time.Now()
	c, err := lab.RestartComponent(state, lab.PluginComponent(node))
	if err != nil {
		t.Fatal(err)
	}
	// The restarted plugin got as far as serving the kubelet: it created its DRA socket anew
	// (dra.sock, or dra-<pod UID>.sock when it runs as the chart's pod, with rolling updates).
	sockets := filepath.Join(lab.Layout{Root: state.Dir}.NodeDir(node), "plugin", "dra*.sock")
	eventually(t, time.Minute, "the restarted plugin serves "+sockets, func(ctx context.Context) error {
		if gone, why := lab.Exited(c); gone {
			t.Fatalf("the restarted plugin exited: %v (log %s)", why, c.Log)
		}
		found, err := filepath.Glob(sockets)
		if err != nil || len(found) == 0 {
			return fmt.Errorf("no socket %s: %v", sockets, err)
		}
		for _, sock := range found {
			if st, err := os.Stat(sock); err == nil && !st.ModTime().Before(restarted.Add(-time.Second)) {
				return nil
			}
		}
		return fmt.Errorf("%v: only the old process's socket", found)
	})

	victim := before[len(before)-1]
	if err := client.ResourceV1().ResourceSlices().Delete(t.Context(), victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var after []resourcev1.ResourceSlice
	eventually(t, 2*time.Minute, "the plugin republishes the deleted slice", func(ctx context.Context) error {
		if gone, why := lab.Exited(c); gone {
			t.Fatalf("the restarted plugin exited: %v (log %s)", why, c.Log)
		}
		after, err = lab.NodeSlices(ctx, client, node)
		if err != nil {
			return err
		}
		if len(after) != len(before) {
			return fmt.Errorf("%d of %d slices", len(after), len(before))
		}
		for _, s := range after {
			if s.UID == victim.UID {
				return fmt.Errorf("slice %s not deleted yet", victim.Name)
			}
		}
		return nil
	})

	gen := before[0].Spec.Pool.Generation
	if got := after[0].Spec.Pool.Generation; got != gen+1 {
		t.Errorf("pool generation %d → %d; want exactly one bump (for the recreated slice), none for the restart", gen, got)
	}
	uids := map[string]bool{}
	for _, s := range after {
		uids[string(s.UID)] = true
	}
	for _, s := range before {
		if s.UID != victim.UID && !uids[string(s.UID)] {
			t.Errorf("slice %s was replaced after the restart; an unchanged slice should be kept", s.Name)
		}
	}
	if diff := specsDiff(before, after); diff != "" {
		t.Errorf("republished slices differ from the originals: %s", diff)
	}
}

// specsDiff compares slice specs ignoring the pool generation, matching slices by content.
func specsDiff(a, b []resourcev1.ResourceSlice) string {
	norm := func(ss []resourcev1.ResourceSlice) []resourcev1.ResourceSliceSpec {
		var out []resourcev1.ResourceSliceSpec
		for _, s := range ss {
			spec := *s.Spec.DeepCopy()
			spec.Pool.Generation = 0
			out = append(out, spec)
		}
		sort.Slice(out, func(i, j int) bool { return sliceKey(out[i]) < sliceKey(out[j]) })
		return out
	}
	na, nb := norm(a), norm(b)
	if len(na) != len(nb) {
		return fmt.Sprintf("%d slices, then %d", len(na), len(nb))
	}
	for i := range na {
		if !equality.Semantic.DeepEqual(na[i], nb[i]) {
			return fmt.Sprintf("slice with %s changed (-first +second):\n%s", sliceKey(na[i]), diff.Diff(na[i], nb[i]))
		}
	}
	return ""
}

func sliceKey(s resourcev1.ResourceSliceSpec) string {
	switch {
	case len(s.Devices) > 0:
		return "device " + s.Devices[0].Name
	case len(s.SharedCounters) > 0:
		return "counter set " + s.SharedCounters[0].Name
	}
	return ""
}
