package main

import (
	"context"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/gpudra/gpudra/topology"
)

func TestValidateAdmissionCheckWorkers(t *testing.T) {
	for _, n := range []int{1, 8, 64, 1024} {
		if err := validateAdmissionCheckWorkers(n); err != nil {
			t.Errorf("%d workers: %v", n, err)
		}
	}
	for _, n := range []int{0, -1, 1025, 1 << 40} {
		if err := validateAdmissionCheckWorkers(n); err == nil || !strings.Contains(err.Error(), "--admission-check-workers") {
			t.Errorf("%d workers: err %v, want one naming --admission-check-workers", n, err)
		}
	}
}

// TestAdmissionCheckWorkersFlag proves the flag defaults to 8 and that a bad value stops the
// command before it reaches for a cluster.
func TestAdmissionCheckWorkersFlag(t *testing.T) {
	cmd := newCommand()
	if got := cmd.Flags().Lookup("admission-check-workers"); got == nil || got.DefValue != "8" {
		t.Fatalf("--admission-check-workers flag = %+v, want default 8", got)
	}
	cmd.SetArgs([]string{"--admission-check-workers=0", "--kubeconfig=/nonexistent"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--admission-check-workers=0") {
		t.Errorf("--admission-check-workers=0: err %v, want one naming the flag", err)
	}
}

// parse is the options the flags in args give.
func parse(t *testing.T, args ...string) options {
	t.Helper()
	o := options{labels: topology.DefaultLabelKeys}
	fs := pflag.NewFlagSet("gpudra-controller", pflag.ContinueOnError)
	o.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("flags %v: %v", args, err)
	}
	return o
}

// TestDefaultsStayLocal: run outside the chart with no flags, the controller serves plain
// metrics and probes on loopback only, elects no leader and has no webhook.
func TestDefaultsStayLocal(t *testing.T) {
	o := parse(t)
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	mo := o.managerOptions(runtime.NewScheme())
	if mo.Metrics.BindAddress != "127.0.0.1:8080" || mo.Metrics.SecureServing || mo.Metrics.FilterProvider != nil {
		t.Errorf("metrics %+v, want plain HTTP on 127.0.0.1:8080", mo.Metrics)
	}
	if mo.HealthProbeBindAddress != "127.0.0.1:8081" {
		t.Errorf("probes on %q, want 127.0.0.1:8081", mo.HealthProbeBindAddress)
	}
	if mo.LeaderElection {
		t.Error("leader election is on without --leader-elect")
	}
	if len(mo.Cache.ByObject) != 0 {
		t.Errorf("cache ByObject %v without --topology-configmap", mo.Cache.ByObject)
	}
	if o.webhookPort != 0 {
		t.Errorf("webhook port %d by default", o.webhookPort)
	}
}

// TestManagerOptions proves what the flags the chart passes turn into: HTTPS metrics behind
// TokenReview/SubjectAccessReview, leader election on a named Lease that is handed over on
// stop, and a cache that lists and watches the topology ConfigMap alone.
func TestManagerOptions(t *testing.T) {
	o := parse(t, "--metrics-bind-address=:8443", "--metrics-secure", "--metrics-cert-dir=/metrics-certs",
		"--leader-elect", "--leader-election-namespace=gpudra", "--topology-configmap=gpudra/gpudra-topology")
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	mo := o.managerOptions(runtime.NewScheme())
	if !mo.Metrics.SecureServing || mo.Metrics.FilterProvider == nil || mo.Metrics.CertDir != "/metrics-certs" || mo.Metrics.BindAddress != ":8443" {
		t.Errorf("metrics %+v, want HTTPS on :8443 with authentication and authorization, certificate from /metrics-certs", mo.Metrics)
	}
	if !mo.LeaderElection || mo.LeaderElectionID != "gpudra-controller" || mo.LeaderElectionNamespace != "gpudra" || !mo.LeaderElectionReleaseOnCancel {
		t.Errorf("leader election %v id %q namespace %q release on cancel %v, want Lease gpudra/gpudra-controller released on stop",
			mo.LeaderElection, mo.LeaderElectionID, mo.LeaderElectionNamespace, mo.LeaderElectionReleaseOnCancel)
	}
	if len(mo.Cache.ByObject) != 1 {
		t.Fatalf("cache ByObject %v, want the ConfigMap only", mo.Cache.ByObject)
	}
	for obj, by := range mo.Cache.ByObject {
		if _, ok := obj.(*corev1.ConfigMap); !ok {
			t.Errorf("cache restricted for %T, want ConfigMap", obj)
		}
		cfg, ok := by.Namespaces["gpudra"]
		if len(by.Namespaces) != 1 || !ok || cfg.FieldSelector == nil || cfg.FieldSelector.String() != "metadata.name=gpudra-topology" {
			t.Errorf("ConfigMap cache %+v, want namespace gpudra with field selector metadata.name=gpudra-topology", by)
		}
	}
	if mo.Cache.DefaultTransform == nil {
		t.Error("managedFields are no longer stripped from the cache")
	}
}

// TestFlagsRefused: every flag combination the controller cannot run with is refused before
// it reaches for a cluster, naming the flag and what it accepts.
func TestFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"topology ConfigMap without namespace", []string{"--topology-configmap=gpudra-topology"}, `--topology-configmap="gpudra-topology": want namespace/name`},
		{"topology ConfigMap with an empty name", []string{"--topology-configmap=gpudra/"}, "want namespace/name"},
		{"leader election on a bad Lease name", []string{"--leader-elect", "--leader-election-id=Gpudra_Controller"}, "--leader-election-id=\"Gpudra_Controller\": want a Lease name"},
		{"metrics certificate for plain metrics", []string{"--metrics-cert-dir=/certs"}, "--metrics-cert-dir=/certs: only with --metrics-secure"},
		{"both webhook certificate sources", []string{"--webhook-port=9443", "--webhook-self-signed=localhost", "--webhook-cert-secret=gpudra/cert", "--webhook-cert-dns-names=a.gpudra.svc"}, "set at most one"},
		{"a certificate for a webhook that is off", []string{"--webhook-cert-secret=gpudra/cert", "--webhook-cert-dns-names=a.gpudra.svc"}, "need --webhook-port"},
		{"a certificate Secret without namespace", []string{"--webhook-port=9443", "--webhook-cert-secret=cert", "--webhook-cert-dns-names=a.gpudra.svc"}, `--webhook-cert-secret="cert": want namespace/name`},
		{"a certificate Secret without names", []string{"--webhook-port=9443", "--webhook-cert-secret=gpudra/cert"}, "needs --webhook-cert-dns-names"},
		{"an IP address for the kept certificate", []string{"--webhook-port=9443", "--webhook-cert-secret=gpudra/cert", "--webhook-cert-dns-names=127.0.0.1"}, "127.0.0.1 is an IP address"},
		{"a name that is no DNS name", []string{"--webhook-port=9443", "--webhook-cert-secret=gpudra/cert", "--webhook-cert-dns-names=Web_Hook"}, `"Web_Hook" is not a DNS name`},
		{"a QPS of 0, which client-go reads as 5", []string{"--kube-api-qps=0"}, "--kube-api-qps=0: want a number above 0, or a negative one"},
		{"a QPS that is not a number", []string{"--kube-api-qps=NaN"}, "--kube-api-qps=NaN: want a number above 0"},
		{"an infinite QPS", []string{"--kube-api-qps=+Inf"}, "--kube-api-qps=+Inf: want a number above 0"},
		{"a negative burst", []string{"--kube-api-qps=20", "--kube-api-burst=-1"}, "--kube-api-burst=-1: want 0"},
		{"no admission check worker", []string{"--admission-check-workers=0"}, "--admission-check-workers=0: accepted range is 1 to 1024"},
		{"more admission check workers than goroutines worth having", []string{"--admission-check-workers=2000000000"}, "accepted range is 1 to 1024"},
		{"a webhook port beyond 65535", []string{"--webhook-port=70000"}, "--webhook-port=70000: accepted range is 1 to 65535 (0: off)"},
		{"a negative webhook port", []string{"--webhook-port=-1"}, "--webhook-port=-1: accepted range is 1 to 65535"},
		{"a metrics port beyond 65535", []string{"--metrics-bind-address=:70000"}, `--metrics-bind-address=":70000": port "70000": accepted range is 0 to 65535`},
		{"a metrics address without port", []string{"--metrics-bind-address=127.0.0.1"}, `--metrics-bind-address="127.0.0.1": want host:port`},
		{"a probe port beyond 65535", []string{"--health-probe-bind-address=127.0.0.1:99999"}, `--health-probe-bind-address="127.0.0.1:99999": port "99999"`},
		{"a dashboard address without port", []string{"--dashboard-bind-address=localhost"}, `--dashboard-bind-address="localhost": want host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parse(t, tc.args...).validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("flags %v: err %v, want one saying %q", tc.args, err, tc.want)
			}
		})
	}
	for _, args := range [][]string{
		{"--webhook-port=9443", "--webhook-self-signed=127.0.0.1,localhost"},
		{"--webhook-port=9443", "--webhook-cert-secret=gpudra/gpudra-webhook-cert", "--webhook-cert-dns-names=gpudra-controller.gpudra.svc,gpudra-controller.gpudra"},
		{"--webhook-port=9443", "--webhook-cert-dir=/certs"},
		{"--webhook-port=65535", "--kube-api-qps=0.5", "--kube-api-burst=0"},
		{"--kube-api-qps=-1", "--kube-api-burst=100", "--admission-check-workers=1024"},
		{"--metrics-bind-address=0", "--health-probe-bind-address=0", "--feature-gates=WebView=true", "--dashboard-bind-address=:8444"},
		{"--metrics-bind-address=[::1]:8443", "--health-probe-bind-address=:8081"},
	} {
		if err := parse(t, args...).validate(); err != nil {
			t.Errorf("flags %v refused: %v", args, err)
		}
	}
}

// TestWebhookWaitsForItsCertificate: the webhook server is not started, and the replica not
// ready, until its certificate is in place; then it serves on every replica.
func TestWebhookWaitsForItsCertificate(t *testing.T) {
	ready := make(chan struct{})
	srv := &startRecorder{started: make(chan struct{})}
	w := webhookAfterCerts{ready: ready, server: srv}
	if w.NeedLeaderElection() {
		t.Error("the webhook waits for leadership; every replica must serve it")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	select {
	case <-srv.started:
		t.Fatal("the webhook server started before its certificate was ready")
	default:
	}
	close(ready)
	<-srv.started
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}

	stopped, stop := context.WithCancel(context.Background())
	stop()
	waiting := &startRecorder{started: make(chan struct{})}
	if err := (webhookAfterCerts{ready: make(chan struct{}), server: waiting}).Start(stopped); err != nil {
		t.Errorf("stopped before the certificate: %v", err)
	}
	select {
	case <-waiting.started:
		t.Error("the webhook server started although the certificate never came")
	default:
	}
}

// startRecorder is a webhook server that records its start and serves until stopped.
type startRecorder struct {
	webhook.Server
	started chan struct{}
}

func (s *startRecorder) Start(ctx context.Context) error {
	close(s.started)
	<-ctx.Done()
	return nil
}
