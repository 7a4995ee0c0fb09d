//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/lab"
)

// pauseAtEnv is gpudra-kubelet-plugin's crash-test switch: the step of a prepare or an
// unprepare at which it stops until it is killed, once.
const pauseAtEnv = "GPUDRA_TEST_PAUSE_AT"

// TestRealNodePluginKilledMidPrepareAndUnprepare kills the real node's plugin with SIGKILL at
// chosen steps of a prepare and of an unprepare, as an OOM kill or a node problem would. The
// kubelet restarts the plugin's container and retries: a claim killed mid-prepare ends
// prepared (its container gets its GPU), one killed mid-unprepare ends unprepared, and in
// both cases nothing of the claim is left on the node once its pod is gone.
func TestRealNodePluginKilledMidPrepareAndUnprepare(t *testing.T) {
	inLane(t, realNodeLane)
	node := realNode(t)
	dsNS, dsName, ok := state.RealNodePluginDaemonSet(node)
	if !ok {
		t.Fatal("the crash test kills the chart's plugin pod on the real node; this lab runs the plugin as a process (use deployments/lab/e2e.yaml)")
	}
	ns := namespace(t, "real-node-crash")
	reset := false
	t.Cleanup(func() {
		if !reset { // the test failed before it set the DaemonSet back: do it, without waiting
			_ = retry.RetryOnConflict(retry.DefaultRetry, func() error { return updatePluginEnv(context.Background(), dsNS, dsName, "") })
		}
	})
	cases := []struct {
		point     string
		unprepare bool
	}{
		{point: kubeletplugin.PointPrepareStarted},
		{point: kubeletplugin.PointCDIWritten},
		{point: kubeletplugin.PointPrepareCompletedTorn},
		{point: kubeletplugin.PointCDIRemoved, unprepare: true},
	}
	for i, tc := range cases {
		name := fmt.Sprintf("killed-%d", i)
		marker := filepath.Join(lab.Layout{Root: state.Dir}.NodeDir(node), "plugin", "paused-at-"+tc.point)
		_ = os.Remove(marker)
		setPluginEnv(t, dsNS, dsName, tc.point)
		claim := claimedRealNodePod(t, ns, name, node)
		if tc.unprepare {
			if r := probeOutput(t, ns, name); len(r.gpuNodes()) != 1 {
				t.Fatalf("%s: before the kill the container got GPU device nodes %v", tc.point, r.gpuNodes())
			}
			if err := client.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
		}
		killPausedPlugin(t, marker, tc.point)
		if !tc.unprepare {
			// The kubelet's retry reaches the restarted plugin, which recovers the claim.
			if r := probeOutput(t, ns, name); len(r.gpuNodes()) != 1 || r.env["GPUDRA_DEVICES"] == "" {
				t.Errorf("%s: after the kill, want one GPU prepared; the container reports:\n%s", tc.point, r.raw)
			}
			if err := client.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, 3*time.Minute, tc.point+": the claim is unprepared and nothing of it is left", func(ctx context.Context) error {
			if _, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("pod %s still there (%v)", name, err)
			}
			if specs := cdiSpecsMentioning(t, node, string(claim.UID)); len(specs) > 0 {
				return fmt.Errorf("CDI specs still name the claim: %v", specs)
			}
			got, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(got.Status.ReservedFor) > 0 {
				return fmt.Errorf("claim still reserved for %v", got.Status.ReservedFor)
			}
			return nil
		})
		if err := client.ResourceV1().ResourceClaims(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setPluginEnv(t, dsNS, dsName, "")
	reset = true
}

// setPluginEnv sets (or, with "", removes) the pause switch in the plugin DaemonSet's pod
// template and waits until the node's one plugin pod runs with it.
func setPluginEnv(t *testing.T, dsNS, dsName, point string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return updatePluginEnv(t.Context(), dsNS, dsName, point) })
	if err != nil {
		t.Fatalf("set %s=%q on DaemonSet %s/%s: %v", pauseAtEnv, point, dsNS, dsName, err)
	}
	node := realNode(t)
	eventually(t, 3*time.Minute, fmt.Sprintf("the plugin pod runs with %s=%q", pauseAtEnv, point), func(ctx context.Context) error {
		p := realNodePluginPodNow(ctx, node)
		if p == nil {
			return fmt.Errorf("plugin pods: %s", describeRealNodePluginPods(t, node))
		}
		if got := envOf(p.Spec.Containers, pauseAtEnv); got != point {
			return fmt.Errorf("the plugin pod %s has %s=%q", p.Name, pauseAtEnv, got)
		}
		return nil
	})
}

// updatePluginEnv writes the pause switch (point, or none for "") into the plugin
// DaemonSet's pod template, if it is not there yet.
func updatePluginEnv(ctx context.Context, dsNS, dsName, point string) error {
	ds, err := client.AppsV1().DaemonSets(dsNS).Get(ctx, dsName, metav1.GetOptions{})
	if err != nil || !setEnv(ds, point) {
		return err
	}
	_, err = client.AppsV1().DaemonSets(dsNS).Update(ctx, ds, metav1.UpdateOptions{})
	return err
}

// setEnv sets name=point in the plugin container (the one with the plugin's image command)
// of ds's template, removing it for ""; it reports whether anything changed.
func setEnv(ds *appsv1.DaemonSet, point string) bool {
	cs := ds.Spec.Template.Spec.Containers
	if envOf(cs, pauseAtEnv) == point {
		return false
	}
	c := &cs[0]
	env := c.Env[:0]
	for _, e := range c.Env {
		if e.Name != pauseAtEnv {
			env = append(env, e)
		}
	}
	if point != "" {
		env = append(env, corev1.EnvVar{Name: pauseAtEnv, Value: point})
	}
	c.Env = env
	return true
}

func envOf(cs []corev1.Container, name string) string {
	if len(cs) == 0 {
		return ""
	}
	for _, e := range cs[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// killPausedPlugin waits until the plugin stopped at point (its marker file) and kills it
// with SIGKILL, found on this machine as the gpudra-kubelet-plugin process whose environment
// holds the switch (it runs in a container, in a PID namespace of its own).
func killPausedPlugin(t *testing.T, marker, point string) {
	t.Helper()
	eventually(t, 3*time.Minute, "the plugin stops at "+point, func(context.Context) error {
		_, err := os.Stat(marker)
		return err
	})
	var pids []int
	eventually(t, 30*time.Second, "the paused plugin's process", func(context.Context) error {
		pids = pausedPlugins(point)
		if len(pids) == 0 {
			return errors.New("no gpudra-kubelet-plugin process with " + pauseAtEnv + "=" + point)
		}
		return nil
	})
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("kill %d: %v", pid, err)
		}
	}
	t.Logf("killed the plugin (pid %v) stopped at %s", pids, point)
}

func pausedPlugins(point string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !strings.Contains(string(cmdline), "gpudra-kubelet-plugin") {
			continue
		}
		environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		for _, kv := range strings.Split(string(environ), "\x00") {
			if kv == pauseAtEnv+"="+point {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
