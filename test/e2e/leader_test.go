//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gpudra/gpudra/lab"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The controller's Lease and the AdmissionCheck its leader answers.
const (
	controllerLease = lab.ControllerLease
	topologyCheck   = "gpudra-topology"
)

// TestControllerLeaderHandover: the lab runs gpudra-controller as the chart installs it, two
// replicas electing a leader on Lease gpudra/gpudra-controller, both serving the config
// webhook with the certificate kept in Secret gpudra/gpudra-webhook-cert. The leader is
// killed (SIGKILL: it cannot hand the Lease over) while Workloads wait for its
// gpudra.dev/topology check and more come. The other replica takes the Lease, every
// Workload is decided once (one Ready, one placement), every pod is pinned once and runs,
// none is lost, and the webhook validates gpudra configs all along. It names no lane: it runs
// alone, before the lanes start, since every test that queues a Workload waits on the leader.
func TestControllerLeaderHandover(t *testing.T) {
	if !state.Kueue || state.ControllerReplicas < 2 {
		labLacks(t, "two gpudra-controller replicas (lab file controller.replicas: 2, with Kueue)")
	}
	var leader *lab.Component
	eventually(t, time.Minute, "one replica leads", func(ctx context.Context) error {
		var err error
		if leader, err = controllerLeader(); err != nil {
			return err
		}
		_, err = leaseHolder(ctx)
		return err
	})
	holder, err := leaseHolder(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var standby []*lab.Component
	for _, name := range state.ControllerComponents() {
		c := state.Component(name)
		if c == nil {
			t.Fatalf("the lab has no component %s", name)
		}
		eventually(t, time.Minute, name+" is ready", func(ctx context.Context) error { return readyz(ctx, c.Ports["health"]) })
		if c.Name != leader.Name {
			standby = append(standby, c)
		}
	}
	t.Logf("leader %s (Lease holder %s), standing by: %s", leader.Name, holder, join(standby, func(c *lab.Component) string { return c.Name }))
	checkWebhookCertificates(t)

	const queue = "e2e-handover"
	applyForTest(t, decode(t, clusterQueue(queue, true, 64, 64))...)
	ns := namespace(t, "e2e-handover")
	apply(t, `
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: train, namespace: `+ns+`}
spec: {clusterQueue: `+queue+`}
`+oneGPUTemplate(ns))
	seen := watchCheckDecisions(t, ns)
	pins := watchPins(t, ns)
	job := func(name string) string {
		return `
apiVersion: batch/v1
kind: Job
metadata: {name: ` + name + `, namespace: ` + ns + `, labels: {kueue.x-k8s.io/queue-name: train}}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: Never
      schedulingGates: [{name: gpudra.dev/placement}]
      resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
      containers:
      - name: worker
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: 100m}
          claims: [{name: gpu}]
`
	}
	var jobs []string
	for k := range 6 {
		jobs = append(jobs, "before-"+strconv.Itoa(k))
		apply(t, job(jobs[len(jobs)-1]))
	}
	eventually(t, 2*time.Minute, "the leader decides a first Workload", func(context.Context) error {
		if n := len(seen.decided()); n == 0 {
			return fmt.Errorf("no Workload decided yet")
		}
		return nil
	})
	probe := probeWebhook(t, ns)

	// The leader goes while Workloads wait for it, and more come while no replica leads.
	t.Logf("%d of %d Workloads decided when %s is killed", len(seen.decided()), len(jobs), leader.Name)
	killed := *leader
	if gone, why := lab.Exited(killed); gone {
		t.Fatalf("the leader %s is not running: %v", killed.Name, why)
	}
	probe.kill(time.Now())
	if err := syscall.Kill(killed.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s (pid %d): %v", killed.Name, killed.PID, err)
	}
	t.Cleanup(func() { restartReplica(t, killed.Name) })
	for k := range 6 {
		jobs = append(jobs, "during-"+strconv.Itoa(k))
		apply(t, job(jobs[len(jobs)-1]))
	}
	eventually(t, time.Minute, "another replica takes the Lease", func(ctx context.Context) error {
		h, err := leaseHolder(ctx)
		if err != nil {
			return err
		}
		if h == holder {
			return fmt.Errorf("Lease still held by %s", holder)
		}
		next, err := controllerLeader()
		if err != nil {
			return err
		}
		if next.Name == killed.Name {
			return fmt.Errorf("%s, killed, still counts as the leader", killed.Name)
		}
		return nil
	})
	for _, j := range jobs {
		eventually(t, 3*time.Minute, "job "+j+" is admitted and both workers run", jobRuns(ns, j, 2))
	}
	probe.stop()

	decided := seen.decided()
	if len(decided) != len(jobs) {
		t.Errorf("%d Workloads decided, want %d (one per Job): %v", len(decided), len(jobs), decided)
	}
	for wl, decisions := range decided {
		if len(decisions) != 1 || decisions[0] != "Ready" {
			t.Errorf("Workload %s: check %s decided %v, want once, Ready", wl, topologyCheck, decisions)
		}
	}
	for wl, placements := range seen.placements() {
		if len(placements) != 1 {
			t.Errorf("Workload %s: %d placements written (%v), want one", wl, len(placements), placements)
		}
	}
	pods, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2*len(jobs) {
		t.Errorf("%d pods, want %d (two per Job)", len(pods.Items), 2*len(jobs))
	}
	for _, p := range pods.Items {
		nodes := pins.pinned(p.Name)
		if len(nodes) != 1 || p.Spec.NodeName != nodes[0] {
			t.Errorf("pod %s: pinned to %v, runs on %q; want pinned once, to the node it runs on", p.Name, nodes, p.Spec.NodeName)
		}
	}
	refused, admitted, cut, failures := probe.results()
	t.Logf("webhook during the handover: %d invalid configs refused, %d valid ones admitted, %d requests cut by the kill", refused, admitted, len(cut))
	for _, c := range cut {
		t.Logf("cut by the kill: %s", c)
	}
	if refused == 0 || admitted == 0 {
		t.Errorf("the webhook was not probed during the handover (%d refused, %d admitted)", refused, admitted)
	}
	for _, f := range failures {
		t.Errorf("webhook during the handover: %s", f)
	}
}

// leaseHolder is the holder of the controller's Lease.
func leaseHolder(ctx context.Context) (string, error) {
	l, err := client.CoordinationV1().Leases("gpudra").Get(ctx, controllerLease, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "", fmt.Errorf("Lease %s has no holder", controllerLease)
	}
	return *l.Spec.HolderIdentity, nil
}

// controllerLeader is the replica that leads: the running one whose log says, since it last
// started, that it acquired the Lease (a replica that loses the Lease exits). The replicas
// run on one machine, so the Lease's holder, <hostname>_<uuid>, does not tell them apart.
func controllerLeader() (*lab.Component, error) {
	var leaders []*lab.Component
	for _, name := range state.ControllerComponents() {
		c := state.Component(name)
		if c == nil {
			return nil, fmt.Errorf("the lab has no component %s", name)
		}
		if gone, _ := lab.Exited(*c); gone {
			continue
		}
		data, err := os.ReadFile(c.Log)
		if err != nil {
			return nil, err
		}
		log := string(data)
		if k := strings.LastIndex(log, ": gpudra lab starts "); k >= 0 {
			log = log[k:]
		}
		if strings.Contains(strings.ToLower(log), "successfully acquired lease") {
			leaders = append(leaders, c)
		}
	}
	if len(leaders) != 1 {
		return nil, fmt.Errorf("%d running replicas say they acquired Lease %s", len(leaders), controllerLease)
	}
	return leaders[0], nil
}

// restartReplica starts a replica the test killed again and waits until it is ready, so
// that the lab has all its replicas for the next test.
func restartReplica(t *testing.T, name string) {
	c, err := lab.StartComponent(state, name)
	if err != nil {
		t.Errorf("restart %s: %v", name, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return readyz(ctx, c.Ports["health"]) == nil, nil
	})
	if err != nil {
		t.Errorf("%s is not ready a minute after its restart (log %s)", name, c.Log)
	}
}

// checkWebhookCertificates: the replicas keep the webhook's CA and certificate in their
// Secret, the CA is injected into the webhook configuration, each replica's certificate
// folder holds the Secret's files, and each replica serves the webhook with that
// certificate for the name the API server calls it at.
func checkWebhookCertificates(t *testing.T) {
	t.Helper()
	sec, err := client.CoreV1().Secrets("gpudra").Get(t.Context(), lab.WebhookCertSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca, crt := sec.Data["ca.crt"], sec.Data["tls.crt"]
	if len(ca) == 0 || len(crt) == 0 || len(sec.Data["tls.key"]) == 0 {
		t.Fatalf("Secret %s has keys %v, want ca.crt, tls.crt and tls.key", lab.WebhookCertSecret, slices.Sorted(maps.Keys(sec.Data)))
	}
	vwc, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), "gpudra-config-validation", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range vwc.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, ca) {
			t.Errorf("webhook %s: caBundle is not the Secret's CA", w.Name)
		}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("the Secret's ca.crt holds no certificate")
	}
	for _, name := range state.ControllerComponents() {
		c := state.Component(name)
		dir := ""
		for _, a := range c.Argv {
			if v, ok := strings.CutPrefix(a, "--webhook-cert-dir="); ok {
				dir = v
			}
		}
		if got, err := os.ReadFile(filepath.Join(dir, "tls.crt")); err != nil || !bytes.Equal(got, crt) {
			t.Errorf("%s: %s/tls.crt is not the Secret's (%v)", name, dir, err)
		}
		conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(c.Ports["webhook"]), &tls.Config{RootCAs: pool, ServerName: lab.WebhookHost, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Errorf("%s: its webhook does not serve a certificate of the Secret's CA for %s: %v", name, lab.WebhookHost, err)
			continue
		}
		served := conn.ConnectionState().PeerCertificates[0].Raw
		conn.Close()
		if block, _ := pem.Decode(crt); block == nil || !bytes.Equal(block.Bytes, served) {
			t.Errorf("%s: its webhook serves another certificate than the Secret's", name)
		}
	}
}

// webhookProbe writes claims with gpudra configs (dry run) every 200 ms until stopped: an
// invalid one must be refused by the webhook, a valid one admitted. Never may an invalid
// one be admitted. A request that the killed replica was answering, or that the API server
// sent on a kept-alive connection to it before it saw the connection close, fails to call
// the webhook (and is refused: failurePolicy Fail), as it would through a Service; that is
// allowed only within cutWindow of the kill. Every other request must reach a webhook.
type webhookProbe struct {
	mu                sync.Mutex
	refused, admitted int
	cut               []string // requests cut by the kill
	failures          []string
	killed            time.Time
	stop              func()
}

// cutWindow is how long after the kill a request may still fail to reach the webhook.
const cutWindow = 2 * time.Second

// kill records when the leader was killed.
func (p *webhookProbe) kill(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killed = at
}

// judge records the outcome of a request sent at start; ok says it got the answer wanted.
// Called with p.mu held.
func (p *webhookProbe) judge(start time.Time, what string, ok bool, err error) {
	at := start.Format("15:04:05.000")
	switch {
	case ok:
	case err != nil && strings.Contains(err.Error(), "failed calling webhook") && !p.killed.IsZero() &&
		start.After(p.killed.Add(-time.Second)) && start.Before(p.killed.Add(cutWindow)):
		p.cut = append(p.cut, fmt.Sprintf("%s: %s: %v", at, what, err))
	default:
		p.failures = append(p.failures, fmt.Sprintf("%s: %s: %v", at, what, err))
	}
}

func probeWebhook(t *testing.T, ns string) *webhookProbe {
	bad := `{"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Forever"}}}`
	good := strings.Replace(bad, "Forever", "Long", 1)
	claim := func(params string) *resourcev1.ResourceClaim {
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns}}
		c.Spec.Devices.Requests = []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: api.DeviceClassGPU}}}
		c.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{
			Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: api.DriverName, Parameters: runtimeRaw(params)}}}}
		return c
	}
	p := &webhookProbe{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var once sync.Once
	p.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(p.stop)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			start := time.Now()
			_, err := client.ResourceV1().ResourceClaims(ns).Create(ctx, claim(bad), dryRun)
			refused := err != nil && strings.Contains(err.Error(), "timeSlicing.interval")
			p.mu.Lock()
			if ctx.Err() == nil {
				if refused {
					p.refused++
				}
				if err == nil {
					p.failures = append(p.failures, start.Format("15:04:05.000")+": an invalid config was admitted")
				} else {
					p.judge(start, "an invalid config, not refused by the webhook", refused, err)
				}
			}
			p.mu.Unlock()
			start = time.Now()
			_, err = client.ResourceV1().ResourceClaims(ns).Create(ctx, claim(good), dryRun)
			p.mu.Lock()
			if ctx.Err() == nil {
				if err == nil {
					p.admitted++
				}
				p.judge(start, "a valid config", err == nil, err)
			}
			p.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return p
}

func (p *webhookProbe) results() (refused, admitted int, cut, failures []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused, p.admitted, slices.Clone(p.cut), slices.Clone(p.failures)
}

// checkDecisions records, per Workload, every decision written to its gpudra-topology check
// (a state other than Pending, with the time it was written).
type checkDecisions struct {
	mu   sync.Mutex
	seen map[string]map[string]string // workload → lastTransitionTime → state
	// placement: workload → every gpudra.dev/placement the check wrote (pod set=nodes; ...)
	placement map[string]map[string]bool
}

// placements is each Workload's distinct placements written by the check.
func (d *checkDecisions) placements() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]string{}
	for wl, ps := range d.placement {
		out[wl] = slices.Sorted(maps.Keys(ps))
	}
	return out
}

// decided is each Workload's decisions, in no particular order.
func (d *checkDecisions) decided() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]string{}
	for wl, by := range d.seen {
		for _, s := range by {
			out[wl] = append(out[wl], s)
		}
	}
	return out
}

func (d *checkDecisions) record(wl *unstructured.Unstructured) {
	checks, _, _ := unstructured.NestedSlice(wl.Object, "status", "admissionChecks")
	for _, c := range checks {
		m, _ := c.(map[string]any)
		name, _ := m["name"].(string)
		st, _ := m["state"].(string)
		at, _ := m["lastTransitionTime"].(string)
		if name != topologyCheck || st == "" || st == "Pending" {
			continue
		}
		var placement []string
		updates, _, _ := unstructured.NestedSlice(m, "podSetUpdates")
		for _, u := range updates {
			um, _ := u.(map[string]any)
			nodes, _, _ := unstructured.NestedString(um, "annotations", api.AnnotationPlacement)
			placement = append(placement, fmt.Sprintf("%v=%s", um["name"], nodes))
		}
		d.mu.Lock()
		if d.seen[wl.GetName()] == nil {
			d.seen[wl.GetName()] = map[string]string{}
		}
		d.seen[wl.GetName()][at] = st
		if len(placement) > 0 {
			if d.placement == nil {
				d.placement = map[string]map[string]bool{}
			}
			if d.placement[wl.GetName()] == nil {
				d.placement[wl.GetName()] = map[string]bool{}
			}
			d.placement[wl.GetName()][strings.Join(placement, "; ")] = true
		}
		d.mu.Unlock()
	}
}

// watchCheckDecisions watches the namespace's Workloads until the test ends, from before its
// first Workload, and records every decision of the gpudra-topology check.
func watchCheckDecisions(t *testing.T, ns string) *checkDecisions {
	t.Helper()
	d := &checkDecisions{seen: map[string]map[string]string{}}
	list, err := dyn().Resource(workloadsGVR).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := list.GetResourceVersion()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := dyn().Resource(workloadsGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					t.Errorf("watching Workloads: %v (decisions may have been missed)", err)
					return
				}
				time.Sleep(time.Second)
				continue
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					if ctx.Err() != nil {
						return // the test is over: its clean-up stopped the watch
					}
					t.Errorf("watching Workloads: %v (decisions may have been missed)", apierrors.FromObject(ev.Object))
					w.Stop()
					return
				}
				wl, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				rv = wl.GetResourceVersion()
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					d.record(wl)
				}
			}
			w.Stop()
		}
	}()
	return d
}

// readyz: the component's /readyz on 127.0.0.1:port answers ok.
func readyz(ctx context.Context, port int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// podPins records, per pod, every node its kubernetes.io/hostname node selector named.
type podPins struct {
	mu   sync.Mutex
	seen map[string]map[string]bool
}

func (p *podPins) pinned(pod string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.seen[pod]))
}

// watchPins watches the namespace's pods until the test ends, from before its first pod,
// and records the nodes they are pinned to.
func watchPins(t *testing.T, ns string) *podPins {
	t.Helper()
	p := &podPins{seen: map[string]map[string]bool{}}
	list, err := client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := list.ResourceVersion
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					t.Errorf("watching pods: %v (pins may have been missed)", err)
					return
				}
				time.Sleep(time.Second)
				continue
			}
			for ev := range w.ResultChan() {
				pod, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				rv = pod.ResourceVersion
				if node := pod.Spec.NodeSelector[lab.LabelHostname]; node != "" && (ev.Type == watch.Added || ev.Type == watch.Modified) {
					p.mu.Lock()
					if p.seen[pod.Name] == nil {
						p.seen[pod.Name] = map[string]bool{}
					}
					p.seen[pod.Name][node] = true
					p.mu.Unlock()
				}
			}
			w.Stop()
		}
	}()
	return p
}
