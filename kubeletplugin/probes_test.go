package kubeletplugin_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/gpudra/gpudra/driver/nvmlsim"
	plugin "github.com/gpudra/gpudra/kubeletplugin"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// probe GETs a probe path of the plugin's metrics server: its status code and body.
func probe(t *testing.T, base, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// waitForProbe waits until a probe answers code with a body containing want.
func waitForProbe(t *testing.T, base, path string, code int, want string) {
	t.Helper()
	var got int
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got, body = probe(t, base, path); got == code && strings.Contains(body, want) {
			return
		}
	}
	t.Fatalf("%s answered %d %q, want %d and %q", path, got, body, code, want)
}

// registerAsKubelet does what the kubelet does with a plugin it finds in its registry:
// GetInfo on the registration socket, then NotifyRegistrationStatus.
func registerAsKubelet(t *testing.T, registrarDir string) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(registrarDir, api.DriverName+"-reg.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := registerapi.NewRegistrationClient(conn)
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil || info.Name != api.DriverName {
		t.Fatalf("GetInfo: %+v, %v", info, err)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
}

func TestReadyOnceRegisteredAndPublished(t *testing.T) {
	var registrarDir string
	var refuse atomic.Bool
	refuse.Store(true)
	c := startPlugin(t, newNode(t, "dgx-h100"), func(cfg *plugin.Config) {
		registrarDir = cfg.RegistrarDir
		// The API server does not take the plugin's slices at first.
		cfg.Client.(*fake.Clientset).PrependReactor("create", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
			if refuse.Load() {
				return true, nil, apierrors.NewServiceUnavailable("the API server is starting")
			}
			return false, nil, nil
		})
	})
	base := strings.TrimSuffix(serveMetrics(t, c.d), "/metrics")
	if code, body := probe(t, base, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not registered") {
		t.Errorf("/readyz before the kubelet registered the plugin: %d %q, want 503 saying it is not registered", code, body)
	}
	registerAsKubelet(t, registrarDir)
	if code, body := probe(t, base, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "ResourceSlices not published") {
		t.Errorf("/readyz before the slices are published: %d %q, want 503 saying they are not published", code, body)
	}
	refuse.Store(false)
	waitForProbe(t, base, "/readyz", http.StatusOK, "ok")
	if code, body := probe(t, base, "/livez"); code != http.StatusOK {
		t.Errorf("/livez of a running plugin: %d %q, want 200", code, body)
	}
	c.d.Stop()
	for _, path := range []string{"/readyz", "/livez"} {
		if code, body := probe(t, base, path); code != http.StatusServiceUnavailable || !strings.Contains(body, "stopped") {
			t.Errorf("%s of a stopped plugin: %d %q, want 503 saying it stopped", path, code, body)
		}
	}
}

func TestNotLiveWhileALoopIsStuck(t *testing.T) {
	n := newNode(t, "dgx-h100")
	c := startOnCluster(t, n)
	plugin.LoopsStuckAfter(c.d, time.Second)
	base := strings.TrimSuffix(serveMetrics(t, c.d), "/metrics")
	waitForProbe(t, base, "/livez", http.StatusOK, "ok")

	// Something else holds the GPU health file's lock: recording a fault waits for it.
	f, err := os.OpenFile(filepath.Join(n.cfg.CheckpointDir, "health.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		}
	}
	t.Cleanup(release)
	inject(t, n, 2, nvmlsim.XID(79))
	waitForProbe(t, base, "/livez", http.StatusServiceUnavailable, "nvml-events")
	release()
	waitForProbe(t, base, "/livez", http.StatusOK, "ok")
	c.waitForSlices(allTainted(2, 1))
}
