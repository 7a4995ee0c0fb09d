package kubeletplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// loops are the plugin's background loops (NVML events, the GPU health file, the
// injection file) and when each last went round.
type loops struct {
	mu    sync.Mutex
	beats map[string]time.Time
	// stuckAfter is how long a round may take; 0 means loopStuckAfter.
	stuckAfter time.Duration
}

// beat says that loop name went round.
func (l *loops) beat(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.beats == nil {
		l.beats = map[string]time.Time{}
	}
	l.beats[name] = time.Now()
}

// done says that loop name ended.
func (l *loops) done(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.beats, name)
}

// stuck are the loops that have not gone round for too long.
func (l *loops) stuck(now time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	max := cmp.Or(l.stuckAfter, loopStuckAfter)
	var out []string
	for _, name := range slices.Sorted(maps.Keys(l.beats)) {
		if now.Sub(l.beats[name]) > max {
			out = append(out, fmt.Sprintf("%s (last round %s ago)", name, now.Sub(l.beats[name]).Round(time.Second)))
		}
	}
	return out
}

// loopStuckAfter is how long a loop may take for one round before the plugin is not
// live: each goes round at least every second when it works.
const loopStuckAfter = 30 * time.Second

// Live reports why the plugin is not live (nil when it is): it has stopped, or one of
// its background loops is stuck. A prepare that takes long (a MIG mode switch) is not.
func (d *Driver) Live() error {
	if d.probes.stopped.Load() {
		return errors.New("the plugin has stopped")
	}
	if stuck := d.health.loops.stuck(time.Now()); len(stuck) > 0 {
		return fmt.Errorf("background loops are stuck: %s", strings.Join(stuck, ", "))
	}
	return nil
}

// Ready reports why the kubelet cannot use the plugin yet (nil when it can): it is
// registered with the kubelet, and the API server holds the node's ResourceSlices with
// every device the plugin publishes. Once ready, it stays ready until it stops, so that
// republishing (a GPU's taint) does not take it out of service.
func (d *Driver) Ready(ctx context.Context) error {
	if d.probes.stopped.Load() {
		return errors.New("the plugin has stopped")
	}
	if !d.probes.registered.Load() {
		return errors.New("not registered with the kubelet yet")
	}
	if d.probes.published.Load() {
		return nil
	}
	if err := d.slicesPublished(ctx); err != nil {
		return err
	}
	d.probes.published.Store(true)
	return nil
}

// slicesPublished checks that the API server has the devices the plugin publishes, in
// the node's pool of its newest generation.
func (d *Driver) slicesPublished(ctx context.Context) error {
	if d.cfg.BackgroundClient == nil {
		return errors.New("no API server to publish ResourceSlices to")
	}
	want := map[string]bool{}
	for _, s := range d.Pool().Slices {
		for _, dev := range s.Devices {
			want[dev.Name] = true
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := d.cfg.BackgroundClient.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorNodeName, d.cfg.NodeName),
			fields.OneTermEqualSelector(resourceapi.ResourceSliceSelectorDriver, api.DriverName),
		).String(),
	})
	if err != nil {
		return fmt.Errorf("listing the node's ResourceSlices: %w", err)
	}
	var generation int64
	for _, s := range list.Items {
		if s.Spec.Pool.Name == d.cfg.NodeName {
			generation = max(generation, s.Spec.Pool.Generation)
		}
	}
	have := map[string]bool{}
	for _, s := range list.Items {
		if s.Spec.Pool.Name == d.cfg.NodeName && s.Spec.Pool.Generation == generation {
			for _, dev := range s.Spec.Devices {
				have[dev.Name] = true
			}
		}
	}
	if !maps.Equal(want, have) {
		return fmt.Errorf("ResourceSlices not published yet: the API server has %d of the node's %d devices", countIn(have, want), len(want))
	}
	return nil
}

func countIn(have, want map[string]bool) int {
	n := 0
	for name := range want {
		if have[name] {
			n++
		}
	}
	return n
}

// probeState is what the probes know beyond the loops.
type probeState struct {
	// registered is set once the kubelet said that it registered the plugin.
	registered atomic.Bool
	// published is set once the API server had the node's ResourceSlices.
	published atomic.Bool
	// stopped is set once the plugin's context ended (Stop, or a fatal error).
	stopped atomic.Bool
}

// notifyRegistrationMethod is the kubelet's call telling a plugin whether it registered it.
const notifyRegistrationMethod = "/pluginregistration.Registration/NotifyRegistrationStatus"

// observeRegistration sees the kubelet's NotifyRegistrationStatus calls on the plugin's
// registration socket (k8s.io/kubelet's RegistrationStatus, read through its getter).
func (p *probeState) observeRegistration(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if info.FullMethod == notifyRegistrationMethod && err == nil {
		if status, ok := req.(interface{ GetPluginRegistered() bool }); ok && status.GetPluginRegistered() {
			p.registered.Store(true)
		}
	}
	return resp, err
}

// ProbeHandler answers a Kubernetes probe with check: 200 "ok", or 503 with why not.
func ProbeHandler(check func(ctx context.Context) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := check(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
}
