package kubeletplugin_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

// A start that fails after it mounted (the spare MPS trees' shm tmpfs, the shm tmpfs of a
// prepared claim it restored) leaves none of them mounted; one that succeeds keeps them.
func TestFailedStartLeavesNoTmpfsMounted(t *testing.T) {
	for _, c := range []struct {
		name    string
		breakIt func(t *testing.T, cfg *plugin.Config)
		wantErr string
	}{
		{name: "start succeeds", breakIt: func(*testing.T, *plugin.Config) {}},
		{name: "reading the Node fails", wantErr: "reading Node", breakIt: func(_ *testing.T, cfg *plugin.Config) {
			cfg.Client.(*fake.Clientset).PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewInternalError(os.ErrDeadlineExceeded)
			})
		}},
		{name: "registering with the kubelet fails", wantErr: "starting the kubelet plugin", breakIt: func(t *testing.T, cfg *plugin.Config) {
			// A file where the registration socket's directory should be.
			cfg.RegistrarDir = filepath.Join(t.TempDir(), "not-a-directory")
			if err := os.WriteFile(cfg.RegistrarDir, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mounts := plugin.StubShmMounts(t)
			n := newNode(t, "dgx-h100")
			// An earlier plugin prepared a claim under MPS; its container ended, and the
			// claim's shm tmpfs with it.
			earlier := n.newDriver(nil)
			claim := n.allocate(gpuClaim("2", mpsConfig))
			mustPrepare(t, earlier, claim)
			shm := mpsShm(t, n, claim)
			earlier.Stop()
			n.mps.kill()
			mounts.Forget()

			cfg := n.cfg
			dir, err := os.MkdirTemp("", "gpudra-") // socket paths stay short
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			cfg.PluginDataDir, cfg.RegistrarDir = filepath.Join(dir, "plugin"), filepath.Join(dir, "registry")
			for _, p := range []string{cfg.PluginDataDir, cfg.RegistrarDir} {
				if err := os.MkdirAll(p, 0o750); err != nil {
					t.Fatal(err)
				}
			}
			cfg.Client = fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-a-uid"}})
			c.breakIt(t, &cfg)
			d, err := plugin.Start(context.Background(), cfg)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("starting the plugin: %v", err)
				}
				defer d.Stop()
				got := mounts.Mounted()
				if !slices.Contains(got, shm) || len(got) != plugin.SpareMPSDirs+1 {
					t.Fatalf("tmpfs mounted by a running plugin: %v, want the claim's %s and %d spares", got, shm, plugin.SpareMPSDirs)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("Start: %v, want an error saying %q", err, c.wantErr)
			}
			if got := mounts.Mounted(); len(got) != 0 {
				t.Errorf("tmpfs left mounted by the start that failed: %v", got)
			}
		})
	}
}
