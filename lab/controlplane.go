package lab

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/deployments"
)

// featureGates are set on every Kubernetes component: gang scheduling (PodGroup) needs
// GenericWorkload and the scheduling.k8s.io/v1beta1 API; TopologyAwareWorkloadScheduling
// (alpha) lets a PodGroup ask for one topology domain (spec.schedulingConstraints) and
// kube-scheduler score each candidate domain with PlacementScore plugins, gpudra's included.
const featureGates = "GenericWorkload=true,WorkloadWithJob=true,TopologyAwareWorkloadScheduling=true"

// Identities of the lab's clients (client certificate subjects).
const (
	adminUser          = "gpudra-lab-admin"
	controllerMgrUser  = "system:kube-controller-manager"
	schedulerUser      = "system:kube-scheduler"
	kwokUser           = "gpudra-lab-kwok"
	kueueUser          = "system:serviceaccount:kueue-system:kueue-controller-manager"
	pluginClusterRole  = "gpudra-lab:kubelet-plugin"
	nodeGroup          = "system:nodes"
	nodeUserPrefix     = "system:node:"
	mastersGroup       = "system:masters"
	componentTimeout   = 2 * time.Minute
	serviceClusterCIDR = "10.96.0.0/16"
)

func url(port int) string { return "https://127.0.0.1:" + strconv.Itoa(port) }

// componentKubeconfig issues a client certificate and writes a kubeconfig for a component.
func (u *upper) componentKubeconfig(component, user string, groups ...string) (string, error) {
	kp, err := u.pki.CA.Issue(CertSpec{CommonName: user, Organization: groups})
	if err != nil {
		return "", fmt.Errorf("client certificate for %s: %w", component, err)
	}
	path := u.layout.ComponentKubeconfig(component)
	return path, writeKubeconfig(path, u.state.Server, u.pki.CA.CertPEM(), kp, user)
}

func (u *upper) startEtcd(ctx context.Context) error {
	client, peer := u.port("etcd-client"), u.port("etcd-peer")
	dir := u.layout.ComponentDir("etcd")
	p := u.pki
	argv := []string{u.tc.Etcd,
		"--name=lab", "--data-dir=" + filepath.Join(dir, "data"),
		"--listen-client-urls=" + url(client), "--advertise-client-urls=" + url(client),
		"--listen-peer-urls=http://127.0.0.1:" + strconv.Itoa(peer),
		"--initial-advertise-peer-urls=http://127.0.0.1:" + strconv.Itoa(peer),
		"--initial-cluster=lab=http://127.0.0.1:" + strconv.Itoa(peer),
		"--cert-file=" + p.EtcdServerCert, "--key-file=" + p.EtcdServerKey,
		"--client-cert-auth", "--trusted-ca-file=" + p.CACert,
		"--unsafe-no-fsync", // a lab's data is thrown away; fsync only slows a shared disk
		"--log-level=warn",
	}
	c, err := u.start("etcd", argv, nil, map[string]int{"client": client, "peer": peer})
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(p.EtcdClientCert, p.EtcdClientKey)
	if err != nil {
		return err
	}
	return waitReady(ctx, c, "healthy", componentTimeout, httpsGetter(url(client)+"/health", u.caPool, &cert, `"health":"true"`))
}

func (u *upper) startAPIServer(ctx context.Context) error {
	port := u.port("apiserver")
	p := u.pki
	argv := []string{u.tc.APIServer,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--etcd-servers=" + url(u.port("etcd-client")),
		"--etcd-cafile=" + p.CACert, "--etcd-certfile=" + p.EtcdClientCert, "--etcd-keyfile=" + p.EtcdClientKey,
		"--client-ca-file=" + p.CACert,
		"--kubelet-client-certificate=" + p.APIServerKubeletClient.Cert, "--kubelet-client-key=" + p.APIServerKubeletClient.Key,
		"--kubelet-preferred-address-types=InternalIP",
		"--tls-cert-file=" + p.APIServerCert, "--tls-private-key-file=" + p.APIServerKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.ServiceAccountKey, "--service-account-signing-key-file=" + p.ServiceAccountKey,
		"--service-cluster-ip-range=" + serviceClusterCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// No kubelet reports node conditions here; this plugin would taint every node NotReady.
		"--disable-admission-plugins=TaintNodesByCondition",
		// The API server's own address is loopback, which Endpoints may not hold.
		"--endpoint-reconciler-type=none",
		"--feature-gates=" + featureGates,
		"--runtime-config=scheduling.k8s.io/v1beta1=true",
		"--allow-privileged=true",
		"--profiling=false",
		"--cert-dir=" + u.layout.ComponentDir("kube-apiserver"),
	}
	c, err := u.start("kube-apiserver", argv, nil, map[string]int{"secure": port})
	if err != nil {
		return err
	}
	return waitReady(ctx, c, "ready", componentTimeout, func(ctx context.Context) error {
		body, err := u.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("/readyz: %w: %s", err, body)
		}
		return nil
	})
}

// grantPlugins lets the lab's plugin processes (kwok nodes, identified as their nodes) read
// claims, write ResourceSlices and post Events.
func (u *upper) grantPlugins(ctx context.Context, cs kubernetes.Interface) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: pluginClusterRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}},
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims", "deviceclasses"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/status"}, Verbs: []string{"get", "update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: pluginClusterRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: pluginClusterRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: nodeGroup}},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRole %s: %w", pluginClusterRole, err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRoleBinding %s: %w", pluginClusterRole, err)
	}
	return nil
}

// startControllers starts kube-controller-manager and kube-scheduler and waits for both.
func (u *upper) startControllers(ctx context.Context) error {
	p := u.pki
	kcmConfig, err := u.componentKubeconfig("kube-controller-manager", controllerMgrUser)
	if err != nil {
		return err
	}
	schedConfig, err := u.componentKubeconfig("kube-scheduler", schedulerUser)
	if err != nil {
		return err
	}
	kcmPort, schedPort := u.port("controller-manager"), u.port("scheduler")
	kcm := []string{u.tc.ControllerManager,
		"--kubeconfig=" + kcmConfig, "--authentication-kubeconfig=" + kcmConfig, "--authorization-kubeconfig=" + kcmConfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(kcmPort),
		"--tls-cert-file=" + p.ControllerMgrServing.Cert, "--tls-private-key-file=" + p.ControllerMgrServing.Key,
		// Without kubelets nothing heartbeats; node lifecycle would mark every node unreachable.
		"--controllers=*,-node-lifecycle-controller",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p.ServiceAccountKey, "--root-ca-file=" + p.CACert,
		"--service-cluster-ip-range=" + serviceClusterCIDR,
		"--leader-elect=false", "--feature-gates=" + featureGates, "--profiling=false",
	}
	binary := u.tc.Scheduler
	var config []string
	if u.state.Scheduler == GpudraScheduler {
		binary = filepath.Join(u.layout.BinDir(), GpudraScheduler)
		path, err := u.schedulerConfig(schedConfig)
		if err != nil {
			return err
		}
		config = []string{"--config=" + path}
	}
	sched := append([]string{binary,
		"--kubeconfig=" + schedConfig, "--authentication-kubeconfig=" + schedConfig, "--authorization-kubeconfig=" + schedConfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(schedPort),
		"--tls-cert-file=" + p.SchedulerServing.Cert, "--tls-private-key-file=" + p.SchedulerServing.Key,
		"--leader-elect=false", "--feature-gates=" + featureGates, "--profiling=false",
	}, config...)
	kc, err := u.start("kube-controller-manager", kcm, nil, map[string]int{"secure": kcmPort})
	if err != nil {
		return err
	}
	sc, err := u.start(u.state.Scheduler, sched, nil, map[string]int{"secure": schedPort})
	if err != nil {
		return err
	}
	if err := waitReady(ctx, kc, "healthy", componentTimeout, httpsGetter(url(kcmPort)+"/healthz", u.caPool, nil, "ok")); err != nil {
		return err
	}
	return waitReady(ctx, sc, "healthy", componentTimeout, httpsGetter(url(schedPort)+"/healthz", u.caPool, nil, "ok"))
}

// schedulerConfig writes gpudra-scheduler's configuration: the shipped one
// (deployments/scheduler/scheduler-config.yaml) with the lab's kubeconfig, since
// kube-scheduler ignores --kubeconfig when it is given --config.
func (u *upper) schedulerConfig(kubeconfig string) (string, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(deployments.SchedulerConfiguration, &cfg); err != nil {
		return "", fmt.Errorf("scheduler configuration: %w", err)
	}
	cfg["clientConnection"] = map[string]any{"kubeconfig": kubeconfig}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(u.layout.ComponentDir(GpudraScheduler), "scheduler-config.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, data, 0o600)
}
