package main

import (
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpudra/gpudra/defrag"
	"github.com/gpudra/gpudra/internal/bindaddr"
	"github.com/gpudra/gpudra/internal/buildinfo"
	"github.com/gpudra/gpudra/internal/features"
	"github.com/gpudra/gpudra/internal/logoptions"
	"github.com/gpudra/gpudra/queueing/dependencies"
	"github.com/gpudra/gpudra/queueing/largefirst"
	"github.com/gpudra/gpudra/queueing/network"
	"github.com/gpudra/gpudra/queueing/prewarm"
	"github.com/gpudra/gpudra/topology"
	configwebhook "github.com/gpudra/gpudra/webhook"
)

// options are gpudra-controller's flags.
type options struct {
	kubeconfig                                string
	profiling                                 bool
	apiQPS                                    float32
	apiBurst, admissionWorkers                int
	metricsAddr, metricsCertDir, probeAddr    string
	metricsSecure                             bool
	leaderElect                               bool
	leaderElectionID, leaderElectionNamespace string
	topologyConfigMap                         string
	flavorNodeLabels                          map[string]string
	labels                                    topology.LabelKeys
	webhookPort                               int
	webhookHost, webhookCertDir               string
	webhookSelfSigned, webhookCertSecret      string
	webhookCertDNSNames                       []string
	dashboardAddr, dashboardCertDir           string
	hamiPods                                  bool
	largeJobsFirstBands                       string
	largeJobsFirstMaxWait                     time.Duration
	defragInterval                            time.Duration
	defragEvictionsPerMinute                  int
	defragMaxEvictions                        int
	prewarmMaxDataLoads                       int
	logging                                   *logsapi.LoggingConfiguration
	// gates are --feature-gates (features.New when nil).
	gates featuregate.MutableVersionedFeatureGate
}

// addFlags binds o to gpudra-controller's flags, with their defaults.
func (o *options) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config or $KUBECONFIG)")
	fs.BoolVar(&o.profiling, "profiling", false, "serve Go's profiles (net/http/pprof) under /debug/pprof/ beside the metrics")
	fs.Float32Var(&o.apiQPS, "kube-api-qps", -1, "client-side limit of API requests per second (negative: none, the API server's priority and fairness applies)")
	fs.IntVar(&o.apiBurst, "kube-api-burst", 0, "burst of API requests above --kube-api-qps")
	fs.IntVar(&o.admissionWorkers, "admission-check-workers", 8, "workloads the admission check reconciles at once (at least 1): decisions are made one at a time, their API writes overlap")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "127.0.0.1:8080", `address for Prometheus metrics ("0" turns them off)`)
	fs.BoolVar(&o.metricsSecure, "metrics-secure", false, "serve the metrics over HTTPS to callers the API server authenticates (TokenReview) and authorizes for get on the /metrics non-resource URL (SubjectAccessReview)")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "directory with the metrics server's tls.crt and tls.key, for --metrics-secure (empty: a self-signed certificate made at start)")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", "127.0.0.1:8081", "address for /healthz and /readyz")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "run the admission check and the node topology controller only while holding the Lease --leader-election-id (the webhook serves on every replica)")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "gpudra-controller", "name of the Lease the replicas elect their leader with")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "namespace of that Lease (default: the pod's own namespace; required outside a cluster)")
	fs.StringToStringVar(&o.flavorNodeLabels, "topology-flavor-node-labels", nil, "node labels (key=value,...) of a topology-aware Kueue ResourceFlavor \""+network.FlavorName+"\" to keep in sync (empty: only the Topology)")
	fs.StringVar(&o.topologyConfigMap, "topology-configmap", "", "namespace/name of a ConfigMap whose topology.yaml places nodes in blocks and racks (default: nodes are already labelled); only that ConfigMap is read")
	fs.IntVar(&o.webhookPort, "webhook-port", 0, "port of the admission webhooks: gpu.gpudra.dev config validation, and with JobDependencies the job dependencies' (0: off)")
	fs.StringVar(&o.webhookHost, "webhook-host", "", "address the webhook listens on (empty: all; tests use 127.0.0.1)")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", "/tmp/gpudra-webhook-certs", "directory with the webhook's tls.crt and tls.key")
	fs.StringVar(&o.webhookSelfSigned, "webhook-self-signed", "", "comma-separated DNS names and IPs: generate a CA and serving certificate for them in --webhook-cert-dir at start and put the CA into ValidatingWebhookConfiguration "+configwebhook.ConfigurationName+" (and, with JobDependencies, MutatingWebhookConfiguration "+dependencies.WebhookConfigurationName+"; one replica: each start makes a new CA)")
	fs.StringVar(&o.webhookCertSecret, "webhook-cert-secret", "", "namespace/name of a Secret (it must exist) in which the webhook's CA and serving certificate are kept and renewed before they expire, the CA put into ValidatingWebhookConfiguration "+configwebhook.ConfigurationName+" (and, with JobDependencies, MutatingWebhookConfiguration "+dependencies.WebhookConfigurationName+"); --webhook-cert-dir is where the Secret is mounted, and the webhook serves once its files are there")
	fs.StringSliceVar(&o.webhookCertDNSNames, "webhook-cert-dns-names", nil, "DNS names of the serving certificate kept in --webhook-cert-secret, comma-separated (the first is the one checked for renewal)")
	fs.BoolVar(&o.hamiPods, "hami-pods", false, "serve the webhook that rewrites pods written for HAMi into pods with gpudra claims at "+configwebhook.HAMiPath+" (with --webhook-port), its CA put into MutatingWebhookConfiguration "+configwebhook.HAMiConfigurationName+"; needs --feature-gates=HAMiPods=true")
	fs.StringVar(&o.largeJobsFirstBands, "large-jobs-first-bands", "", "bands of GPU demand, minGPUs:priorityClass comma-separated by ascending minGPUs (16:gpudra-large,64:gpudra-huge): a new queued Job without a priority of its own gets the WorkloadPriorityClass of the last band it reaches, at "+largefirst.WebhookPath+" (with --webhook-port), its CA put into MutatingWebhookConfiguration "+largefirst.WebhookConfigurationName+"; needs --feature-gates=LargeJobsFirst=true")
	fs.DurationVar(&o.largeJobsFirstMaxWait, "large-jobs-first-max-wait", time.Hour, "how long a queued Job that --large-jobs-first-bands looked at may wait before it is lifted to the top band, so that large jobs cannot keep it waiting for ever (at least 1m)")
	fs.DurationVar(&o.defragInterval, "defrag-interval", time.Minute, "with --feature-gates=Defragmentation=true, how often a plan is made for the Workloads waiting for room (at least 10s)")
	fs.IntVar(&o.defragEvictionsPerMinute, "defrag-evictions-per-minute", 6, "with --feature-gates=Defragmentation=true, the most pods evicted per minute (at least 1)")
	fs.IntVar(&o.defragMaxEvictions, "defrag-max-evictions", defrag.DefaultMaxEvictions, "with --feature-gates=Defragmentation=true, the most pods one plan moves (at least 1)")
	fs.IntVar(&o.prewarmMaxDataLoads, "prewarm-max-dataloads", prewarm.DefaultMaxDataLoads, "with --feature-gates=DataPrewarm=true, the most Fluid DataLoads kept for queued Workloads, over all of them (at least 1)")
	fs.StringVar(&o.dashboardAddr, "dashboard-bind-address", "", "address of the read-only web view, served over HTTPS under /dashboard/ to callers the API server authenticates (TokenReview) and authorizes for get on the /dashboard/* non-resource URL (SubjectAccessReview); empty: off")
	fs.StringVar(&o.dashboardCertDir, "dashboard-cert-dir", "", "directory with the dashboard's tls.crt and tls.key, for --dashboard-bind-address (empty: a self-signed certificate made at start)")
	fs.StringVar(&o.labels.Block, "block-label", o.labels.Block, "node label holding the node's block")
	fs.StringVar(&o.labels.Rack, "rack-label", o.labels.Rack, "node label holding the node's rack")
	fs.StringVar(&o.labels.ToR, "tor-label", o.labels.ToR, "node label holding the node's top-of-rack switch (default: the rack)")
	o.addFeatureGates(fs)
	if o.logging == nil {
		o.logging = logoptions.New()
	}
	logoptions.AddFlags(o.logging, fs)
	buildinfo.AddVersionFlag(fs)
}

// validate refuses flag values the controller cannot run with, before it reaches for a
// cluster, naming the flag and what it accepts.
func (o options) validate() error {
	if o.logging != nil {
		if err := logoptions.Validate(o.logging); err != nil {
			return err
		}
	}
	if err := o.validateNumbers(); err != nil {
		return err
	}
	if err := o.checkFeatureGates(); err != nil {
		return err
	}
	if _, err := o.topologyConfigMapKey(); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Subdomain(o.leaderElectionID); o.leaderElect && len(errs) > 0 {
		return fmt.Errorf("--leader-election-id=%q: want a Lease name (a DNS subdomain): %s", o.leaderElectionID, strings.Join(errs, "; "))
	}
	if o.metricsCertDir != "" && !o.metricsSecure {
		return fmt.Errorf("--metrics-cert-dir=%s: only with --metrics-secure (plain HTTP metrics use no certificate)", o.metricsCertDir)
	}
	if o.dashboardCertDir != "" && o.dashboardAddr == "" {
		return fmt.Errorf("--dashboard-cert-dir=%s: only with --dashboard-bind-address (the dashboard is off)", o.dashboardCertDir)
	}
	if o.webhookSelfSigned != "" && o.webhookCertSecret != "" {
		return fmt.Errorf("--webhook-self-signed and --webhook-cert-secret: set at most one (a certificate made at each start, or one kept and renewed in a Secret)")
	}
	if o.hamiPods && o.webhookPort <= 0 {
		return fmt.Errorf("--hami-pods needs --webhook-port (the webhook is off)")
	}
	if err := o.validateDefrag(); err != nil {
		return err
	}
	if err := o.validateLargeJobsFirst(); err != nil {
		return err
	}
	if o.webhookPort <= 0 && (o.webhookSelfSigned != "" || o.webhookCertSecret != "") {
		return fmt.Errorf("--webhook-self-signed and --webhook-cert-secret need --webhook-port (the webhook is off)")
	}
	if o.webhookCertSecret != "" {
		if _, err := namespacedName("--webhook-cert-secret", o.webhookCertSecret); err != nil {
			return err
		}
		if len(o.webhookCertDNSNames) == 0 {
			return fmt.Errorf("--webhook-cert-secret=%s needs --webhook-cert-dns-names: the DNS names the API server calls the webhook at (e.g. <service>.<namespace>.svc)", o.webhookCertSecret)
		}
	}
	for _, name := range o.webhookCertDNSNames {
		if net.ParseIP(name) != nil {
			return fmt.Errorf("--webhook-cert-dns-names: %s is an IP address; a certificate kept in --webhook-cert-secret names DNS names only (use --webhook-self-signed for IP addresses)", name)
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return fmt.Errorf("--webhook-cert-dns-names: %q is not a DNS name: %s", name, strings.Join(errs, "; "))
		}
	}
	return nil
}

// minLargeJobsFirstMaxWait is the shortest --large-jobs-first-max-wait: below it, every
// job would be lifted before Kueue had ordered it, and the bands would order nothing.
const minLargeJobsFirstMaxWait = time.Minute

// validateLargeJobsFirst refuses large-jobs-first flags the controller cannot run with:
// bad bands, bands without the webhook, too short a wait. (Bands without the gate are
// refused by checkFeatureGates; the gate without bands runs nothing, as with AllAlpha.)
func (o options) validateLargeJobsFirst() error {
	if o.largeJobsFirstBands == "" {
		return nil
	}
	if _, err := largefirst.ParseBands("--large-jobs-first-bands", o.largeJobsFirstBands); err != nil {
		return err
	}
	if o.webhookPort <= 0 {
		return fmt.Errorf("--large-jobs-first-bands needs --webhook-port (the webhook is off)")
	}
	if o.largeJobsFirstMaxWait < minLargeJobsFirstMaxWait {
		return fmt.Errorf("--large-jobs-first-max-wait=%s: want at least %s", o.largeJobsFirstMaxWait, minLargeJobsFirstMaxWait)
	}
	return nil
}

// largeJobsFirst is the large-jobs-first policy's bands, nil when it does not run: its
// gate off or no --large-jobs-first-bands (validate has checked them).
func (o options) largeJobsFirst() largefirst.Bands {
	if !o.enabled(features.LargeJobsFirst) || o.largeJobsFirstBands == "" {
		return nil
	}
	bands, _ := largefirst.ParseBands("--large-jobs-first-bands", o.largeJobsFirstBands)
	return bands
}

// maxAdmissionCheckWorkers bounds --admission-check-workers: each worker is a goroutine
// with API writes in flight, and decisions are made one at a time anyway.
const maxAdmissionCheckWorkers = 1024

// validateAdmissionCheckWorkers refuses an --admission-check-workers value the admission
// check cannot run with.
func validateAdmissionCheckWorkers(n int) error {
	if n < 1 || n > maxAdmissionCheckWorkers {
		return fmt.Errorf("--admission-check-workers=%d: accepted range is 1 to %d", n, maxAdmissionCheckWorkers)
	}
	return nil
}

// validateNumbers refuses the numeric, port and address flags' values the controller
// cannot run with, naming the flag and the accepted range.
func (o options) validateNumbers() error {
	// client-go takes a QPS of 0 for its default of 5 and a negative one for no limit;
	// NaN and infinity are no rates at all.
	if q := float64(o.apiQPS); q == 0 || math.IsNaN(q) || math.IsInf(q, 0) {
		return fmt.Errorf("--kube-api-qps=%v: want a number above 0, or a negative one for no client-side limit", o.apiQPS)
	}
	// A negative burst makes every rate-limited request fail; 0 is client-go's default.
	if o.apiBurst < 0 {
		return fmt.Errorf("--kube-api-burst=%d: want 0 (client-go's default) or more", o.apiBurst)
	}
	if err := validateAdmissionCheckWorkers(o.admissionWorkers); err != nil {
		return err
	}
	if o.webhookPort < 0 || o.webhookPort > bindaddr.MaxPort {
		return fmt.Errorf("--webhook-port=%d: accepted range is 1 to %d (0: off)", o.webhookPort, bindaddr.MaxPort)
	}
	// "0" turns the metrics off (controller-runtime); every other address is host:port.
	if o.metricsAddr != "0" {
		if err := bindaddr.Validate("--metrics-bind-address", o.metricsAddr); err != nil {
			return err
		}
	}
	if o.probeAddr != "0" && o.probeAddr != "" {
		if err := bindaddr.Validate("--health-probe-bind-address", o.probeAddr); err != nil {
			return err
		}
	}
	if o.dashboardAddr != "" {
		if err := bindaddr.Validate("--dashboard-bind-address", o.dashboardAddr); err != nil {
			return err
		}
	}
	return nil
}

// topologyConfigMapKey is --topology-configmap's namespace and name (empty: none).
func (o options) topologyConfigMapKey() (types.NamespacedName, error) {
	if o.topologyConfigMap == "" {
		return types.NamespacedName{}, nil
	}
	return namespacedName("--topology-configmap", o.topologyConfigMap)
}

// namespacedName parses a flag's namespace/name.
func namespacedName(flag, value string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(value, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("%s=%q: want namespace/name", flag, value)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// managerOptions are the controller-runtime manager's options for these flags: metrics
// (plain, or HTTPS for authenticated and authorized callers), probes, leader election,
// and a cache that holds ConfigMaps of the topology ConfigMap only.
func (o options) managerOptions(scheme *runtime.Scheme) ctrl.Options {
	metrics := metricsserver.Options{BindAddress: o.metricsAddr, ExtraHandlers: profilingHandlers(o.profiling)}
	if o.metricsSecure {
		metrics.SecureServing = true
		metrics.FilterProvider = secureMetrics
		metrics.CertDir = o.metricsCertDir
	}
	opts := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metrics,
		HealthProbeBindAddress: o.probeAddr,
		// Nothing here reads managedFields; dropped from the cache, every pod, claim,
		// slice and Workload costs less to keep and to list (writes of cached objects
		// send none, which keeps the server's).
		Cache:                   cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        o.leaderElectionID,
		LeaderElectionNamespace: o.leaderElectionNamespace,
		// The process ends when the manager stops, so a stopping leader hands the Lease
		// over at once instead of making the next one wait out its duration.
		LeaderElectionReleaseOnCancel: true,
	}
	if key, _ := o.topologyConfigMapKey(); key.Name != "" {
		// One ConfigMap is read: listed and watched by name in its namespace, which a
		// Role with resourceNames allows.
		opts.Cache.ByObject = map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{
				key.Namespace: {FieldSelector: fields.OneTermEqualSelector("metadata.name", key.Name)},
			}},
		}
	}
	return opts
}

// minDefragInterval is the shortest --defrag-interval: a plan reads the whole cluster.
const minDefragInterval = 10 * time.Second

// validateDefrag refuses defragmentation flags the controller cannot run with, and the gate
// without the admission check it moves Workloads through.
func (o options) validateDefrag() error {
	switch {
	case o.defragInterval < minDefragInterval:
		return fmt.Errorf("--defrag-interval=%s: want at least %s", o.defragInterval, minDefragInterval)
	case o.defragEvictionsPerMinute < 1:
		return fmt.Errorf("--defrag-evictions-per-minute=%d: want at least 1", o.defragEvictionsPerMinute)
	case o.defragMaxEvictions < 1:
		return fmt.Errorf("--defrag-max-evictions=%d: want at least 1", o.defragMaxEvictions)
	case o.prewarmMaxDataLoads < 1:
		return fmt.Errorf("--prewarm-max-dataloads=%d: want at least 1", o.prewarmMaxDataLoads)
	case o.enabled(features.Defragmentation) && !o.enabled(features.TopologyAdmissionCheck):
		return fmt.Errorf("--feature-gates=Defragmentation=true needs TopologyAdmissionCheck on: it plans for the Workloads that check keeps waiting and requeues admitted ones through it")
	}
	return nil
}
