package lab

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/internal/buildinfo"
)

// Options configure Up.
type Options struct {
	// Dir is the lab's state folder; default DefaultDir().
	Dir string
	// LabFile is the cluster shape; empty means the embedded deployments/lab/lab.yaml.
	LabFile string
	// Repo is the gpudra repository the plugin is built from; default: found from the working directory.
	Repo string
	// PluginBinary is a prebuilt gpudra-kubelet-plugin to use instead of building one.
	PluginBinary string
	// Progress receives what a user wants to see while the lab starts; default os.Stderr.
	Progress io.Writer
}

// DefaultDir is $GPUDRA_LAB_DIR, else <repo>/.lab, else ./.lab.
func DefaultDir() string {
	if d := os.Getenv("GPUDRA_LAB_DIR"); d != "" {
		abs, _ := filepath.Abs(d)
		return abs
	}
	if repo, err := RepoRoot("."); err == nil {
		return filepath.Join(repo, ".lab")
	}
	abs, _ := filepath.Abs(".lab")
	return abs
}

// upper carries one Up through its steps.
type upper struct {
	opts   Options
	layout Layout
	file   *File
	tc     *Toolchain
	pki    *PKI
	state  *State
	ports  map[string]int
	caPool *x509.CertPool
	client kubernetes.Interface
	out    io.Writer
	// pluginSource is what the plugin's image is built from (pluginImage).
	pluginSource *buildinfo.Source
}

func (u *upper) port(name string) int {
	p, ok := u.ports[name]
	if !ok {
		panic("lab: no port reserved for " + name)
	}
	return p
}

func (u *upper) start(name string, argv, env []string, ports map[string]int) (Component, error) {
	c, err := startProcess(u.layout, name, argv, env)
	if c.PID > 0 {
		c.Ports = ports
		u.state.Components = append(u.state.Components, c)
		if werr := u.state.write(); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return c, &ComponentError{Component: name, Log: c.Log, Err: err}
	}
	return c, nil
}

func (u *upper) step(format string, args ...any) {
	fmt.Fprintf(u.out, "[lab %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// Up starts a lab and returns its state once every component is ready. On failure it stops
// what it started, keeps the logs, and returns an error naming the failed component and its log.
// Only one lab runs per machine: Up refuses while another is running.
func Up(ctx context.Context, opts Options) (*State, error) {
	if opts.Progress == nil {
		opts.Progress = os.Stderr
	}
	if opts.Dir == "" {
		opts.Dir = DefaultDir()
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	file, err := LoadFile(opts.LabFile)
	if err != nil {
		return nil, err
	}
	if opts.PluginBinary == "" && opts.Repo == "" {
		if opts.Repo, err = RepoRoot("."); err != nil {
			return nil, err
		}
	}
	if err := claimActive(dir); err != nil {
		return nil, err
	}
	// A folder left by a lab that is not running is reset (claimActive proved nothing runs).
	if s, err := ReadState(dir); err == nil {
		for _, c := range s.Components {
			if alive(c) {
				_ = releaseActive(dir)
				return nil, &RunningLabError{Dir: dir}
			}
		}
	}
	if err := resetDir(dir); err != nil {
		_ = releaseActive(dir)
		return nil, err
	}
	u := &upper{opts: opts, layout: Layout{dir}, file: file, out: opts.Progress,
		state: &State{Dir: dir, StartedAt: time.Now(), Nodes: file.Nodes(), Kueue: file.Kueue.Enabled, Scheduler: file.scheduler(), Install: file.install(),
			ControllerReplicas: file.controllerReplicas()}}
	if d := file.Kueue.podsReadyTimeout(); d != 0 && file.Kueue.Enabled {
		u.state.KueuePodsReadyTimeout = d.String()
	}
	if len(u.state.RealNodes()) > 0 {
		if err := CheckRealNodeHost(); err != nil {
			// The rest of the lab still works; tests of real nodes skip and say why.
			u.state.RealNodesLeftOut = err.Error()
			u.state.Nodes = slices.DeleteFunc(u.state.Nodes, func(n Node) bool { return n.Real })
			u.step("leaving out the lab file's real nodes: %v", err)
		}
	}
	start := time.Now()
	if err := u.run(ctx); err != nil {
		u.step("lab failed after %s; stopping what it started (logs kept in %s)", time.Since(start).Round(time.Second), u.layout.LogDir())
		if serr := stopLab(u.state); serr != nil {
			klog.ErrorS(serr, "Stopping the failed lab")
		}
		_ = releaseActive(dir)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted; every process the lab had started is stopped (logs in %s): %w", u.layout.LogDir(), ctx.Err())
		}
		return nil, err
	}
	u.step("lab is up in %s: %d nodes, kubeconfig %s", time.Since(start).Round(100*time.Millisecond), len(u.state.Nodes), u.layout.Kubeconfig())
	return u.state, nil
}

func resetDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create lab folder: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("clean lab folder: %w", err)
		}
	}
	return nil
}

func (u *upper) run(ctx context.Context) error {
	var err error
	u.step("lab folder %s", u.layout.Root)
	if u.tc, err = EnsureToolchain(ctx, u.out, u.file.toolchainNeeds(len(u.state.RealNodes()) > 0)); err != nil {
		return err
	}
	plugin := u.opts.PluginBinary
	if plugin == "" {
		plugin = filepath.Join(u.layout.BinDir(), "gpudra-kubelet-plugin")
		if err := buildBinary(ctx, u.out, u.opts.Repo, plugin); err != nil {
			return err
		}
	}
	if u.state.Scheduler == GpudraScheduler {
		if err := buildBinary(ctx, u.out, u.opts.Repo, filepath.Join(u.layout.BinDir(), GpudraScheduler)); err != nil {
			return err
		}
	}
	controller := filepath.Join(u.layout.BinDir(), controllerComponent)
	if u.file.Kueue.Enabled {
		if err := buildBinary(ctx, u.out, u.opts.Repo, controller); err != nil {
			return err
		}
	}
	names := []string{"etcd-client", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok",
		"kueue-health", "kueue-metrics", "kueue-pprof", "kueue-webhook", "jobset-health", "jobset-webhook",
		"training-operator-health", "training-operator-webhook", "trainer-health", "trainer-webhook"}
	names = append(names, controllerPortNames(u.state.ControllerReplicas)...)
	for _, n := range u.state.Nodes {
		names = append(names, "metrics-"+n.Name)
		if n.Real {
			names = append(names, "kubelet-"+n.Name, "kubelet-healthz-"+n.Name)
		}
	}
	ports, err := freePorts(len(names))
	if err != nil {
		return err
	}
	u.ports = map[string]int{}
	for i, n := range names {
		u.ports[n] = ports[i]
	}
	u.state.Server = url(u.port("apiserver"))
	u.state.Kubectl = u.tc.Kubectl
	if u.pki, err = NewPKI(u.layout.PKIDir()); err != nil {
		return fmt.Errorf("lab PKI: %w", err)
	}
	u.caPool = x509.NewCertPool()
	u.caPool.AddCert(u.pki.CA.Cert)
	if _, err := u.componentKubeconfig("admin", adminUser, mastersGroup); err != nil {
		return err
	}
	if err := os.Rename(u.layout.ComponentKubeconfig("admin"), u.layout.Kubeconfig()); err != nil {
		return err
	}
	cfg, err := u.state.RESTConfig()
	if err != nil {
		return err
	}
	if u.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}

	u.step("starting etcd and kube-apiserver on 127.0.0.1:%d", u.port("apiserver"))
	if err := u.startEtcd(ctx); err != nil {
		return err
	}
	if err := u.startAPIServer(ctx); err != nil {
		return err
	}
	if err := u.grantPlugins(ctx, u.client); err != nil {
		return &ComponentError{Component: "kube-apiserver", Log: u.layout.Log("kube-apiserver"), Err: err}
	}
	if !u.chart() {
		if err := installDeviceClasses(ctx, u.client); err != nil {
			return &ComponentError{Component: "kube-apiserver", Log: u.layout.Log("kube-apiserver"), Err: err}
		}
	}
	u.step("starting kube-controller-manager and %s", u.state.Scheduler)
	if err := u.startControllers(ctx); err != nil {
		return err
	}
	kwokNodes := len(u.state.Nodes) - len(u.state.RealNodes())
	u.step("creating %d nodes and starting kwok", kwokNodes)
	if err := u.startNodes(ctx); err != nil {
		return err
	}
	if u.tc.FluidCRDs != "" {
		u.step("serving Fluid's Dataset and DataLoad CRDs (no Fluid controllers)")
		if err := u.applyFluidCRDs(ctx); err != nil {
			return err
		}
	}
	// The chart creates Kueue objects, so with install: chart Kueue starts first.
	if u.chart() && u.file.Kueue.Enabled {
		if err := u.serveJobKindCRDs(ctx); err != nil {
			return err
		}
		u.step("starting Kueue")
		if err := u.startKueue(ctx); err != nil {
			return err
		}
		if err := u.startJobKinds(ctx); err != nil {
			return err
		}
	}
	if u.chart() {
		u.step("installing gpudra from its chart, deployments/helm/gpudra")
		if err := u.installChart(ctx); err != nil {
			return err
		}
		u.step("running the chart's gpudra-kubelet-plugin pods of %d kwok nodes", kwokNodes)
		if err := u.startChartPlugins(ctx); err != nil {
			return err
		}
	} else {
		u.step("starting %d gpudra-kubelet-plugin processes", kwokNodes)
		if err := u.startPlugins(ctx, plugin); err != nil {
			return err
		}
	}
	if real := u.state.RealNodes(); len(real) > 0 {
		u.step("starting %d real node(s): containerd, kubelet and gpudra-kubelet-plugin", len(real))
		if err := u.startRealNodes(ctx, plugin); err != nil {
			return err
		}
	}
	if u.file.Kueue.Enabled {
		// gpudra-controller watches Kueue's kinds, so it needs Kueue's CRDs served.
		if u.chart() {
			u.step("running the chart's %s (admission check, config webhook)", controllerPods(u.state.ControllerReplicas, "gpudra-controller pods"))
			if err := u.startChartControllers(ctx); err != nil {
				return err
			}
		} else {
			if err := u.serveJobKindCRDs(ctx); err != nil {
				return err
			}
			u.step("starting Kueue")
			if err := u.startKueue(ctx); err != nil {
				return err
			}
			if err := u.startJobKinds(ctx); err != nil {
				return err
			}
			u.step("starting %s (admission check, config webhook)", controllerPods(u.state.ControllerReplicas, "gpudra-controller replicas"))
			if err := u.startController(ctx, controller); err != nil {
				return err
			}
		}
	}
	return u.state.write()
}

// controllerPods names n gpudra-controller replicas (what: their plural), for progress lines.
func controllerPods(n int, what string) string {
	if n == 1 {
		return strings.TrimSuffix(what, "s")
	}
	return fmt.Sprintf("%d %s", n, what)
}

// chart reports whether the lab installs gpudra from its Helm chart.
func (u *upper) chart() bool { return u.file.Install == InstallChart }
