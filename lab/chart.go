package lab

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/internal/buildinfo"
	"github.com/gpudra/gpudra/internal/helmchart"
	"github.com/gpudra/gpudra/internal/release"
)

// Chart mode (`install: chart` in the lab file): the lab installs gpudra with helm from
// deployments/helm/gpudra — DeviceClasses, RBAC, the node-restriction admission policy,
// the webhook configuration, the Kueue admission check, the plugin DaemonSets and the
// controller Deployment — and the end-to-end tests run against what the chart made.
//
// kwok has no container runtime: it only marks the pods it is given Running. So the lab
// runs each gpudra pod kwok holds as a process on this machine, the way a runtime would
// run its container: the container's command, args and environment (field references
// resolved), with the pod's service-account token (bound to the pod, so the API server
// records its node and the chart's admission policy applies), and only these flags
// added, which a container gets from its own filesystem and network namespace: the
// kubeconfig (in place of the in-cluster one), the node's lab folders in place of host
// paths, and listen addresses on 127.0.0.1. The webhook is called at a URL on 127.0.0.1
// (the chart's webhook.url), since the lab has no kube-proxy (see controller.go). Real
// (kubelet) nodes run their pool's pod themselves, as a container of the plugin's image (see
// chartValues and State.PluginImage).
const (
	chartRelease   = "gpudra"
	chartNamespace = controllerNamespace
	// chartTokenLifetime is how long the pods' tokens last; a lab lives shorter.
	chartTokenLifetime = 48 * time.Hour
)

// The lab file's install modes.
const (
	InstallProcesses = "processes"
	InstallChart     = "chart"
)

// RealNodePluginDaemonSet is the chart's DaemonSet (namespace, name) that runs the plugin of
// a real node; ok is false when the lab did not install gpudra from the chart (the lab then
// runs that plugin itself, component PluginComponent(node)).
func (s *State) RealNodePluginDaemonSet(node string) (namespace, name string, ok bool) {
	if s.Install != InstallChart {
		return "", "", false
	}
	return chartNamespace, chartPluginDaemonSet(node), true
}

// chartPoolOf is the chart pool of a real node, chartPluginDaemonSet its DaemonSet.
func chartPoolOf(node string) string          { return strings.ToLower(node) }
func chartPluginDaemonSet(node string) string { return "gpudra-kubelet-plugin-" + chartPoolOf(node) }

// chartValues are the chart values of a lab: one plugin DaemonSet pool per simulated
// profile (its NVML profile and MIG strategy) on the kwok nodes, the controller with
// the webhook at its 127.0.0.1 URL and the Kueue admission check, the image the real
// nodes import.
func (u *upper) chartValues() ([]byte, error) {
	type pool struct {
		Name               string              `json:"name"`
		NVML               string              `json:"nvml"`
		KFD                string              `json:"kfd,omitempty"`
		MIG                string              `json:"mig,omitempty"`
		NodeSelector       map[string]string   `json:"nodeSelector"`
		Tolerations        []corev1.Toleration `json:"tolerations,omitempty"`
		HostNetwork        bool                `json:"hostNetwork,omitempty"`
		MetricsPort        int                 `json:"metricsPort,omitempty"`
		MetricsHost        string              `json:"metricsHost,omitempty"`
		MetricsSecure      *bool               `json:"metricsSecure,omitempty"`
		DriverRoot         string              `json:"driverRoot,omitempty"`
		PluginDataDir      string              `json:"pluginDataDir,omitempty"`
		KubeletRegistryDir string              `json:"kubeletRegistryDir,omitempty"`
		CDIRoot            string              `json:"cdiRoot,omitempty"`
		NvidiaCDIHook      string              `json:"nvidiaCDIHook,omitempty"`
		MPSControlDaemons  string              `json:"mpsControlDaemons,omitempty"`
	}
	mig := map[string]string{}
	nodeOf := map[string]Node{} // a node of each profile label
	for _, n := range u.kwokNodes() {
		profile := n.ProfileLabel()
		if m, ok := mig[profile]; ok && m != n.MIG {
			return nil, fmt.Errorf("install: chart needs one MIG strategy per profile (the chart's plugin pools select nodes by profile); profile %s has %q and %q", profile, m, n.MIG)
		}
		if o, ok := nodeOf[profile]; ok && o.Profile != n.Profile {
			return nil, fmt.Errorf("install: chart needs one NVML profile per KFD profile (the chart's plugin pools select nodes by profile); kfd %s has %q and %q", profile, o.Profile, n.Profile)
		}
		mig[profile], nodeOf[profile] = n.MIG, n
	}
	var pools []pool
	for profile, m := range mig {
		name := strings.ToLower(profile)
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			return nil, fmt.Errorf("profile %s cannot name a chart pool: %s", profile, strings.Join(errs, "; "))
		}
		// kwok runs no pods: the MPS control daemons of kwok nodes' plugins (processes
		// here) are their children. A real node runs them in pods (the chart's default).
		nvml, kfd := "sim:"+nodeOf[profile].Profile, ""
		if n := nodeOf[profile]; n.KFD != "" {
			kfd = "sim:" + n.KFD
			if n.Profile == "" {
				nvml = "none"
			}
		}
		pools = append(pools, pool{Name: name, NVML: nvml, KFD: kfd, MIG: m, NodeSelector: map[string]string{LabelProfile: profile}, MPSControlDaemons: "process"})
	}
	sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
	// A real node's kubelet runs its pool's pod as a container of the plugin's image
	// (State.PluginImage): in the host's network (the lab has no kube-proxy, so it reaches the API
	// server at kubernetesService), with the node's own folders as host paths. Its taint keeps the
	// simulated pools' pods off it.
	for _, n := range u.state.RealNodes() {
		p := u.layout.realNode(n.Name)
		name := chartPoolOf(n.Name)
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			return nil, fmt.Errorf("real node %s cannot name a chart pool: %s", n.Name, strings.Join(errs, "; "))
		}
		nvml, kfd := "sim:"+n.Profile, ""
		if n.KFD != "" {
			kfd = "sim:" + n.KFD
			if n.Profile == "" {
				nvml = "none"
			}
		}
		pools = append(pools, pool{Name: name, NVML: nvml, KFD: kfd, MIG: n.MIG,
			NodeSelector: map[string]string{LabelHostname: n.Name},
			Tolerations:  []corev1.Toleration{{Key: RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			// A kubelet on 127.0.0.1 reports no node address (status.hostIP).
			// Its metrics on loopback, over HTTP as the lab's other plugins: the tests read them.
			HostNetwork: true, MetricsPort: u.port("metrics-" + n.Name), MetricsHost: "127.0.0.1", MetricsSecure: ptrTo(false), DriverRoot: p.driverRoot,
			PluginDataDir: filepath.Join(p.dir, "plugin"), KubeletRegistryDir: filepath.Join(p.kubelet, "root", "plugins_registry"), CDIRoot: p.cdi,
			NvidiaCDIHook: u.tc.CDIHook,
		})
	}
	apiHost, apiPort, err := net.SplitHostPort(strings.TrimPrefix(u.state.Server, "https://"))
	if err != nil {
		return nil, fmt.Errorf("API server address %q: %w", u.state.Server, err)
	}
	controller, webhook := u.chartControllerValues()
	values := map[string]any{
		// The plugin's image the real nodes import (State.PluginImage).
		"image":             map[string]any{"registry": release.DefaultRegistry, "tag": buildinfo.ChartVersion(u.pluginImage(context.Background()).Version)},
		"kubernetesService": map[string]any{"host": apiHost, "port": apiPort},
		"kubeletPlugin":     map[string]any{"defaultPool": false, "pools": pools, "privileged": false},
		// The controller's replicas and their webhook (controller.go).
		"controller": controller,
		"webhook":    webhook,
		"topology":   map[string]any{"labels": map[string]any{"block": api.LabelBlock, "rack": api.LabelRack, "tor": api.LabelToR}},
		"kueue":      map[string]any{"admissionCheck": u.file.Kueue.Enabled},
		// The gates of every behaviour the demo and the tests use (featuregates.go).
		"featureGates": gpudraFeatureGates(),
		// Room for a waiting gang is planned every 15 s (the chart says 1m), so that a
		// test sees it made within a minute. Only pods labelled movable are ever moved.
		"defrag": map[string]any{"interval": "15s"},
	}
	return yaml.Marshal(values)
}

// installChart renders the chart with the lab's values through Helm's Go SDK, as `helm
// template` would, and applies what it renders in Helm's install order into its namespace,
// which it creates first (as `helm install --create-namespace`, without a release record).
func (u *upper) installChart(ctx context.Context) error {
	values, err := u.chartValues()
	if err != nil {
		return err
	}
	dir := u.layout.ComponentDir("helm")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "values.yaml"), values, 0o600); err != nil {
		return err
	}
	// Rendered for the API server's version, as helm install renders for its cluster.
	server, err := u.client.Discovery().ServerVersion()
	if err != nil {
		return &ComponentError{Component: "helm template", Err: err}
	}
	rendered, err := helmchart.Render(filepath.Join(u.opts.Repo, "deployments/helm/gpudra"),
		helmchart.Options{Release: chartRelease, Namespace: chartNamespace, KubeVersion: server.GitVersion}, helmchart.Values{YAML: values})
	if err != nil {
		return &ComponentError{Component: "helm template", Err: err}
	}
	if err := os.WriteFile(filepath.Join(dir, "rendered.yaml"), []byte(rendered), 0o600); err != nil {
		return err
	}
	objs, err := DecodeManifests([]byte(rendered))
	if err != nil {
		return &ComponentError{Component: "helm template", Err: err}
	}
	cfg, err := u.state.RESTConfig()
	if err != nil {
		return err
	}
	ap, err := NewApplier(cfg)
	if err != nil {
		return err
	}
	ap.Namespace = chartNamespace
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": chartNamespace}}}
	if err := ap.Apply(ctx, append([]*unstructured.Unstructured{ns}, objs...)...); err != nil {
		return &ComponentError{Component: "chart install", Err: err}
	}
	return nil
}

// chartPod waits until the chart's pod of the given component runs on a kwok node
// (node: that node; "" any) and returns it.
func (u *upper) chartPod(ctx context.Context, component, node string) (*corev1.Pod, error) {
	var found *corev1.Pod
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, componentTimeout, true, func(ctx context.Context) (bool, error) {
		pods, err := u.client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: ChartPodSelector(component)})
		if err != nil {
			last = err
			return false, nil
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp == nil && p.Spec.NodeName != "" && (node == "" || p.Spec.NodeName == node) {
				found = p
				return true, nil
			}
		}
		last = fmt.Errorf("no %s pod of release %s%s yet (%d pods of the component)", component, chartRelease, onNode(node), len(pods.Items))
		return false, nil
	})
	if err != nil {
		return nil, &ComponentError{Component: "helm release " + chartRelease, Log: u.layout.Log("kube-controller-manager"), Err: fmt.Errorf("the chart's %s pod%s: %w (last: %v)", component, onNode(node), err, last)}
	}
	return found, nil
}

// ChartPodSelector selects the pods of one component of the lab's gpudra release
// ("kubelet-plugin", "controller").
func ChartPodSelector(component string) string {
	return "app.kubernetes.io/instance=" + chartRelease + ",app.kubernetes.io/component=" + component
}

// chartPodState says where the chart's plugin pod on a node stands, for errors.
func (u *upper) chartPodState(ctx context.Context, node string) string {
	pods, err := u.client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: ChartPodSelector("kubelet-plugin"),
		FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return err.Error()
	}
	var states []string
	for _, p := range pods.Items {
		st := p.Name + " " + string(p.Status.Phase)
		for _, c := range p.Status.ContainerStatuses {
			switch {
			case c.State.Waiting != nil:
				st += fmt.Sprintf(", %s waiting: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
			case c.State.Terminated != nil:
				st += fmt.Sprintf(", %s terminated: %s (exit %d) %s", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode, c.State.Terminated.Message)
			}
			if c.RestartCount > 0 {
				st += fmt.Sprintf(", %d restarts", c.RestartCount)
			}
		}
		states = append(states, st)
	}
	if len(states) == 0 {
		return "none on the node yet"
	}
	return strings.Join(states, "; ")
}

func onNode(node string) string {
	if node == "" {
		return ""
	}
	return " on node " + node
}

// podProcess is what the lab runs for one container of a chart pod: the binary named by
// its command (from the lab's bin folder), its args, then extra; its environment; and a
// kubeconfig with the pod's own service-account token.
func (u *upper) podProcess(ctx context.Context, pod *corev1.Pod, component string, extra ...string) (argv, env []string, err error) {
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.Containers[0].Command) != 1 {
		return nil, nil, fmt.Errorf("pod %s: the lab runs pods of one container with a one-word command", pod.Name)
	}
	c := pod.Spec.Containers[0]
	for _, e := range c.Env {
		v, err := envValue(pod, e)
		if err != nil {
			return nil, nil, fmt.Errorf("pod %s, env %s: %w", pod.Name, e.Name, err)
		}
		env = append(env, e.Name+"="+v)
	}
	tr, err := u.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptrTo(int64(chartTokenLifetime.Seconds())),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("token of service account %s for pod %s: %w", pod.Spec.ServiceAccountName, pod.Name, err)
	}
	kubeconfig := u.layout.ComponentKubeconfig(component)
	if err := writeTokenKubeconfig(kubeconfig, u.state.Server, u.pki.CA.CertPEM(), tr.Status.Token, pod.Spec.ServiceAccountName); err != nil {
		return nil, nil, err
	}
	argv = append([]string{filepath.Join(u.layout.BinDir(), filepath.Base(c.Command[0]))}, c.Args...)
	argv = append(argv, "--kubeconfig="+kubeconfig)
	return append(argv, extra...), env, nil
}

// envValue resolves a container's environment variable: literal values and the pod field
// references a container runtime's kubelet resolves.
func envValue(pod *corev1.Pod, e corev1.EnvVar) (string, error) {
	if e.ValueFrom == nil {
		return e.Value, nil
	}
	if f := e.ValueFrom.FieldRef; f != nil {
		switch f.FieldPath {
		case "spec.nodeName":
			return pod.Spec.NodeName, nil
		case "metadata.uid":
			return string(pod.UID), nil
		case "metadata.name":
			return pod.Name, nil
		case "metadata.namespace":
			return pod.Namespace, nil
		case "spec.serviceAccountName":
			return pod.Spec.ServiceAccountName, nil
		}
		return "", fmt.Errorf("field %s: the lab resolves spec.nodeName, metadata.uid, metadata.name, metadata.namespace, spec.serviceAccountName", f.FieldPath)
	}
	return "", fmt.Errorf("the lab resolves only values and field references")
}

func writeTokenKubeconfig(path, server string, caPEM []byte, token, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gpudra-lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["gpudra-lab"] = &clientcmdapi.Context{Cluster: "gpudra-lab", AuthInfo: user}
	cfg.CurrentContext = "gpudra-lab"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

func ptrTo[T any](v T) *T { return &v }

// startChartPlugins runs the chart's kubelet-plugin pod of every kwok node and waits until
// each node's pool is published.
func (u *upper) startChartPlugins(ctx context.Context) error {
	nodes := u.kwokNodes()
	var cs []Component
	for _, n := range nodes {
		pod, err := u.chartPod(ctx, "kubelet-plugin", n.Name)
		if err != nil {
			return err
		}
		d := u.layout.NodeDir(n.Name)
		for _, sub := range []string{"plugin", "registry", "cdi", "checkpoint"} {
			if err := os.MkdirAll(filepath.Join(d, sub), 0o700); err != nil {
				return err
			}
		}
		name := PluginComponent(n.Name)
		argv, env, err := u.podProcess(ctx, pod, name,
			"--plugin-data-dir="+filepath.Join(d, "plugin"), "--registrar-dir="+filepath.Join(d, "registry"),
			"--cdi-root="+filepath.Join(d, "cdi"), "--checkpoint-dir="+filepath.Join(d, "checkpoint"),
			// On this machine, not in a container: the driver root is where --driver-root says.
			"--container-driver-root=",
			// Plain HTTP, on loopback only: the lab's tests scrape it without a token.
			"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(u.port("metrics-"+n.Name)), "--metrics-secure=false")
		if err != nil {
			return &ComponentError{Component: name, Err: err}
		}
		// The ConfigMaps the pod mounts (the chart's MIG layouts), as files on this machine.
		mounts, err := configMapMounts(ctx, u.client, pod, d)
		if err != nil {
			return &ComponentError{Component: name, Err: err}
		}
		argv = inMounts(argv, mounts)
		if u.opts.PluginBinary != "" {
			argv[0] = u.opts.PluginBinary
		}
		c, err := u.start(name, argv, env, map[string]int{"metrics": u.port("metrics-" + n.Name)})
		if err != nil {
			return err
		}
		cs = append(cs, c)
	}
	return u.waitPoolsPublished(ctx, nodes, cs)
}
