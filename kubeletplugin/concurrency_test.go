package kubeletplugin_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

func TestConcurrentPrepareAndUnprepareKeepTheCheckpointConsistent(t *testing.T) {
	const claims = 1000
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	all := make([]*resourceapi.ResourceClaim, claims)
	for k := range all {
		all[k] = n.allocate(shareClaim("256Mi", "0", ""))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*claims)
	for _, c := range all {
		wg.Go(func() {
			if _, err := prepare(t, d, c); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	if got := n.specCount(); got != claims {
		t.Errorf("%d CDI specs after preparing %d claims", got, claims)
	}
	if got := checkpointClaims(t, n); got != claims {
		t.Errorf("%d checkpoint entries after preparing %d claims", got, claims)
	}
	// The journal outgrew the checkpoint file while claims were prepared concurrently:
	// compacted at least once after the two compactions of the plugin's start.
	if _, gen, err := plugin.ReadCheckpoint(n.cfg.CheckpointDir); err != nil || gen < 3 {
		t.Errorf("checkpoint generation %d (%v): the journal was never compacted", gen, err)
	}
	for _, c := range all {
		wg.Go(func() {
			if err := unprepare(t, d, c); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := n.specCount(); got != 0 {
		t.Errorf("%d CDI specs left", got)
	}
	if got := checkpointClaims(t, n); got != 0 {
		t.Errorf("%d checkpoint entries left", got)
	}
}

// checkpointClaims counts the claims in the checkpoint on disk (with its journal), all
// of them PrepareCompleted.
func checkpointClaims(t *testing.T, n *node) int {
	t.Helper()
	claims, _, err := plugin.ReadCheckpoint(n.cfg.CheckpointDir)
	if err != nil {
		t.Fatal(err)
	}
	for uid, st := range claims {
		if st != prepared.PrepareCompleted {
			t.Errorf("claim %s is %s in the checkpoint", uid, st)
		}
	}
	return len(claims)
}

// kubeletCalls talks to a plugin as the kubelet does, over its DRA gRPC socket.
type kubeletCalls struct {
	t      *testing.T
	client drapb.DRAPluginClient
}

func dialPlugin(t *testing.T, socket string) *kubeletCalls {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &kubeletCalls{t: t, client: drapb.NewDRAPluginClient(conn)}
}

// prepare calls NodePrepareResources for one claim, for at most within, and returns the
// claim's error ("" when prepared).
func (k *kubeletCalls) prepare(c *resourceapi.ResourceClaim, within time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	resp, err := k.client.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}})
	if err != nil {
		return "", err
	}
	return resp.Claims[string(c.UID)].GetError(), nil
}

// unprepare calls NodeUnprepareResources for one claim, for at most within.
func (k *kubeletCalls) unprepare(c *resourceapi.ResourceClaim, within time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	resp, err := k.client.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}})
	if err != nil {
		return "", err
	}
	return resp.Claims[string(c.UID)].GetError(), nil
}

// slowDeletion makes the daemons' Deployments go only when released: a deletion marks
// them (as a foreground deletion does while the pod terminates).
func slowDeletion(client *fake.Clientset) (release func(name string)) {
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	client.PrependReactor("delete", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteAction).GetName()
		obj, err := client.Tracker().Get(gvr, a.GetNamespace(), name)
		if err != nil {
			return true, nil, err
		}
		dep := obj.(*appsv1.Deployment).DeepCopy()
		if dep.DeletionTimestamp == nil {
			dep.DeletionTimestamp = &metav1.Time{Time: time.Now()}
			if err := client.Tracker().Update(gvr, dep, a.GetNamespace()); err != nil {
				return true, nil, err
			}
		}
		return true, dep, nil
	})
	return func(name string) {
		if err := client.Tracker().Delete(gvr, mpsNamespace, name); err != nil {
			panic(err)
		}
	}
}

// Through the kubelet's gRPC calls, while one claim waits for its MPS control daemon's
// pod (to become ready, or to go), the node's other claims are prepared and unprepared.
func TestKubeletCallsForOtherClaimsDoNotWaitForAnMPSDaemonsPod(t *testing.T) {
	const quick = 10 * time.Second
	pods, podClient := mpsPods(t, false)
	pods.Timeout = time.Minute
	release := slowDeletion(podClient)
	n := newNode(t, "dgx-h100", func(c *plugin.Config) { c.MPS = pods })
	n.daemonPods = podClient
	var socket string
	cl := startOnCluster(t, n, func(c *plugin.Config) { socket = filepath.Join(c.PluginDataDir, "dra.sock") })
	mpsClaim, whole, other := n.allocate(gpuClaim("2", mpsConfig)), n.allocate(gpuClaim("5", "")), n.allocate(gpuClaim("6", ""))
	for _, c := range []*resourceapi.ResourceClaim{mpsClaim, whole, other} {
		if _, err := cl.client.ResourceV1().ResourceClaims(c.Namespace).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubelet := dialPlugin(t, socket)
	daemon := mps.PodPrefix + string(mpsClaim.UID)

	done := make(chan string, 1)
	go func() {
		msg, err := kubelet.prepare(mpsClaim, time.Minute)
		if err != nil {
			msg = err.Error()
		}
		done <- msg
	}()
	waitFor(t, func() bool { return len(deploymentsOf(t, podClient)) == 1 })
	start := time.Now()
	if msg, err := kubelet.prepare(whole, quick); err != nil || msg != "" {
		t.Fatalf("whole-GPU prepare while an MPS claim waits for its daemon's pod: %v %s", err, msg)
	}
	t.Logf("whole-GPU prepare took %s while the MPS claim waited", time.Since(start).Round(time.Millisecond))
	select {
	case msg := <-done:
		t.Fatalf("the MPS claim's prepare returned (%q) before its daemon was ready", msg)
	default:
	}
	markReady(t, podClient, daemon)
	if msg := <-done; msg != "" {
		t.Fatalf("MPS claim's prepare: %s", msg)
	}

	// Its unprepare waits for the daemon's pod to go; meanwhile the others go on.
	go func() {
		msg, err := kubelet.unprepare(mpsClaim, time.Minute)
		if err != nil {
			msg = err.Error()
		}
		done <- msg
	}()
	waitFor(t, func() bool { dep, ok := deploymentsOf(t, podClient)[daemon]; return ok && dep.DeletionTimestamp != nil })
	start = time.Now()
	if msg, err := kubelet.prepare(other, quick); err != nil || msg != "" {
		t.Fatalf("prepare while an MPS claim's daemon pod goes: %v %s", err, msg)
	}
	if msg, err := kubelet.unprepare(whole, quick); err != nil || msg != "" {
		t.Fatalf("unprepare while an MPS claim's daemon pod goes: %v %s", err, msg)
	}
	t.Logf("a prepare and an unprepare took %s while the MPS claim's daemon pod went", time.Since(start).Round(time.Millisecond))
	select {
	case msg := <-done:
		t.Fatalf("the MPS claim's unprepare returned (%q) before its daemon's pod was gone", msg)
	default:
	}
	if n.spec(mpsClaim) != nil {
		t.Error("the MPS claim's CDI spec is still there while its unprepare waits")
	}
	release(daemon)
	if msg := <-done; msg != "" {
		t.Fatalf("MPS claim's unprepare: %s", msg)
	}
	if msg, err := kubelet.unprepare(other, quick); err != nil || msg != "" {
		t.Fatalf("unprepare: %v %s", err, msg)
	}
	assertClean(t, n, mpsClaim)
}
