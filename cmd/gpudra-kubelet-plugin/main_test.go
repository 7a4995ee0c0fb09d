package main

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpudra/gpudra/internal/logoptions"
	plugin "github.com/gpudra/gpudra/kubeletplugin"
	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

func TestSharingToolsAreSimulatedOnlyOnSimulatedNodesWithoutPaths(t *testing.T) {
	tests := []struct {
		name      string
		f         flags
		simulated bool
		wantMPS   mps.Control
		wantTS    plugin.TimeSlicer
	}{
		{"real node: the driver root's tools", flags{driverRoot: "/run/nvidia/driver"}, false,
			mps.Process{Binary: "/run/nvidia/driver/usr/bin/nvidia-cuda-mps-control"}, plugin.NvidiaSMI{Binary: "/run/nvidia/driver/usr/bin/nvidia-smi"}},
		{"real node: paths given", flags{driverRoot: "/", mpsControl: "/driver-root/usr/bin/nvidia-cuda-mps-control", nvidiaSMI: "/driver-root/usr/bin/nvidia-smi"}, false,
			mps.Process{Binary: "/driver-root/usr/bin/nvidia-cuda-mps-control"}, plugin.NvidiaSMI{Binary: "/driver-root/usr/bin/nvidia-smi"}},
		{"real node, plugin in a container: the mounted driver root's tools", flags{driverRoot: "/run/nvidia/driver", containerDriverRoot: "/driver-root"}, false,
			mps.Process{Binary: "/driver-root/usr/bin/nvidia-cuda-mps-control"}, plugin.NvidiaSMI{Binary: "/driver-root/usr/bin/nvidia-smi"}},
		{"simulated node: simulated tools", flags{driverRoot: "/tmp/root"}, true,
			mps.Simulated{}, &plugin.SimulatedTimeSlicer{}},
		{"simulated node: a path given is used", flags{driverRoot: "/tmp/root", mpsControl: "/opt/fake-mps"}, true,
			mps.Process{Binary: "/opt/fake-mps"}, &plugin.SimulatedTimeSlicer{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl, ts := sharingTools(tc.f, tc.simulated)
			if !reflect.DeepEqual(ctl, tc.wantMPS) {
				t.Errorf("MPS control %#v, want %#v", ctl, tc.wantMPS)
			}
			if !reflect.DeepEqual(ts, tc.wantTS) {
				t.Errorf("time-slicer %#v, want %#v", ts, tc.wantTS)
			}
		})
	}
}

func TestCDIHookPathIsOffOnSimulatedNodesUnlessGiven(t *testing.T) {
	tests := []struct {
		name      string
		flag      string
		simulated bool
		want      string
	}{
		{"real node: the toolkit's default path", "", false, "/usr/bin/nvidia-cdi-hook"},
		{"real node: a path given", "/home/kubernetes/bin/nvidia/nvidia-cdi-hook", false, "/home/kubernetes/bin/nvidia/nvidia-cdi-hook"},
		{"real node: none", "none", false, ""},
		{"simulated node: no hooks", "", true, ""},
		{"simulated node: a path given is used", "/opt/lab/nvidia-cdi-hook", true, "/opt/lab/nvidia-cdi-hook"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := cdiHookPath(tc.flag, tc.simulated); got != tc.want {
				t.Errorf("cdiHookPath(%q, %v) = %q, want %q", tc.flag, tc.simulated, got, tc.want)
			}
		})
	}
}

// The plugin re-executes itself as "gpudra-kubelet-plugin mps-exec <shm dir> <program>
// [args...]" in a new mount namespace to start a claim's MPS control daemon. Run in the
// mount namespace of its parent (here: the test's), it must refuse rather than bind the
// claim's directory over the parent's /dev/shm.
func TestMPSExecIsWiredAndRefusesTheParentsMountNamespace(t *testing.T) {
	shm := t.TempDir()
	marker := filepath.Join(shm, "claim-marker")
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newCommand()
	cmd.SetArgs([]string{mps.ExecCommand, shm, "/bin/true", "-d"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "mount namespace") {
		t.Fatalf("mps-exec in the test's mount namespace: %v, want a refusal", err)
	}
	if _, err := os.Stat("/dev/shm/claim-marker"); err == nil {
		t.Fatal("the claim's shm directory was bound over the test's /dev/shm")
	}
	if sub, _, err := newCommand().Find([]string{mps.ExecCommand}); err != nil || !sub.Hidden || !sub.DisableFlagParsing {
		t.Errorf("mps-exec subcommand %+v (%v): want hidden, flags passed through", sub, err)
	}
}

func TestMPSDaemonPodsFromFlags(t *testing.T) {
	f := flags{nodeName: "n1", mpsNamespace: "gpudra-system", mpsImage: "ghcr.io/gpudra/gpudra:0.1.0", mpsPullPolicy: "Always",
		mpsPullSecrets: []string{"regcred"}, driverRoot: "/run/nvidia/driver", containerDriverRoot: "/driver-root"}
	t.Setenv("LD_LIBRARY_PATH", "/driver-root/usr/lib64:/opt/lib")
	tools, _ := sharingTools(f, false)
	p, err := mpsPods(f, tools, false)
	if err != nil {
		t.Fatal(err)
	}
	// The pod mounts the host's driver root at /driver-root and runs the driver's daemon from it.
	if p.DriverRoot != "/run/nvidia/driver" || p.Binary != "/driver-root/usr/bin/nvidia-cuda-mps-control" || p.LibraryPath != "/driver-root/usr/lib64:/opt/lib" ||
		p.PullPolicy != "Always" || !reflect.DeepEqual(p.PullSecrets, []string{"regcred"}) {
		t.Errorf("daemon pods %+v", p)
	}
	bad := f
	bad.mpsPullPolicy = "Sometimes"
	if _, err := mpsPods(bad, tools, false); err == nil || !strings.Contains(err.Error(), "--mps-daemon-image-pull-policy") {
		t.Errorf("pull policy Sometimes: %v, want an error naming the flag", err)
	}
	// A plugin on the host (no container driver root) cannot say where the pod finds the daemon.
	f.containerDriverRoot = ""
	tools, _ = sharingTools(f, false)
	if _, err := mpsPods(f, tools, false); err == nil || !strings.Contains(err.Error(), "--container-driver-root") {
		t.Errorf("no container driver root: %v, want an error naming --container-driver-root", err)
	}
	// Simulated: no driver root needed; Validate names what is missing.
	f.mpsImage = ""
	tools, _ = sharingTools(f, true)
	p, err = mpsPods(f, tools, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "image") || !strings.Contains(err.Error(), "client") {
		t.Errorf("Validate: %v, want the missing image and client named", err)
	}
}

func TestMPSDaemonCommandRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--devices=GPU-a"}, "--mps-control-daemon"},
		{[]string{"--devices=GPU-a", "--simulated", "--mps-control-daemon=/x"}, "exclude"},
		{[]string{"--simulated"}, "--devices"},
		{[]string{"--simulated", "--devices=GPU-a,GPU-b", "--pinned-memory-mib=10"}, "one per device"},
		{[]string{"--simulated", "--devices=GPU-a", "--pinned-memory-mib=ten"}, `"ten"`},
		{[]string{"--simulated", "--devices=GPU-a", "--active-thread-percentage=150"}, "0 (no cap) to 100"},
		{[]string{"--simulated", "--check", "--pipe-dir=" + t.TempDir()}, "no MPS control daemon"},
	} {
		cmd := mpsDaemonCommand()
		cmd.SetArgs(tc.args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %s", tc.args, err, tc.want)
		}
	}
}

// A plugin that runs MPS daemons as its children stops the daemon pods an earlier plugin
// (--mps-control-daemons=pod) left on its node, and only those.
func TestProcessModeStopsThePodDaemonsOfItsNode(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("create", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		dep := a.(k8stesting.CreateAction).GetObject().(*appsv1.Deployment)
		dep.Status.ReadyReplicas = 1
		return false, nil, nil
	})
	for _, node := range []string{"n1", "n2"} {
		p := mps.Pods{Client: client, Namespace: "gpudra", NodeName: node, Image: "img", Simulated: true, Poll: time.Millisecond}
		pipe := filepath.Join(t.TempDir(), "mps", "uid-"+node, "pipe")
		if _, err := p.Start(prepared.MPSDaemon{PipeDir: pipe, Devices: []string{"GPU-" + node}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := stopPodDaemons(client, "gpudra", "n1"); err != nil {
		t.Fatal(err)
	}
	list, err := client.AppsV1().Deployments("gpudra").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != mps.PodPrefix+"uid-n2" {
		t.Errorf("Deployments left %v, want only node n2's daemon", list.Items)
	}
	// Without the right to list them there are none of its own.
	client.PrependReactor("list", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "", errors.New("no RBAC"))
	})
	if err := stopPodDaemons(client, "gpudra", "n1"); err != nil {
		t.Errorf("without RBAC: %v", err)
	}
}

// A node name that cannot be a Kubernetes node's is refused before anything is written.
func TestNodeNameMustBeANodesName(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"Node_1", "../etc", "a b", strings.Repeat("n", 254)} {
		err := run(t.Context(), flags{nodeName: name, pluginDataDir: filepath.Join(dir, "data")})
		if err == nil || !strings.Contains(err.Error(), "--node-name") || !strings.Contains(err.Error(), "RFC 1123") {
			t.Errorf("--node-name %q: %v, want an error naming the flag and the accepted form", name, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("a refused node name left %d entries in %s", len(entries), dir)
	}
}

// Plain HTTP metrics name every claim of the node to anyone: only on a loopback address.
func TestInsecureMetricsOnlyOnLoopback(t *testing.T) {
	for _, c := range []struct {
		name, addr string
		secure     bool
		wantErr    string
	}{
		{name: "secure on every address", addr: ":9400", secure: true},
		{name: "plain HTTP on 127.0.0.1", addr: "127.0.0.1:9400"},
		{name: "plain HTTP on ::1", addr: "[::1]:9400"},
		{name: "plain HTTP on localhost", addr: "localhost:9400"},
		{name: "plain HTTP on every address is refused", addr: ":9400", wantErr: "loopback"},
		{name: "plain HTTP on the node's address is refused", addr: "10.0.0.7:9400", wantErr: "loopback"},
		{name: "an address without a port is refused", addr: "127.0.0.1", wantErr: "host:port"},
	} {
		t.Run(c.name, func(t *testing.T) {
			access, err := metricsAccess(flags{metricsAt: c.addr, metricsSecure: c.secure}, fake.NewClientset())
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), "--metrics-") {
					t.Fatalf("metricsAccess(%q, secure=%v): %v, want an error naming the flag and %q", c.addr, c.secure, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (access.Reviewer != nil) != c.secure {
				t.Fatalf("metricsAccess(%q, secure=%v) reviews callers: %v", c.addr, c.secure, access.Reviewer != nil)
			}
		})
	}
}

func TestMetricsAreSecureByDefault(t *testing.T) {
	f := &flags{logging: logoptions.New()}
	cmd := newCommandFor(f)
	if err := cmd.Flags().Parse(nil); err != nil {
		t.Fatal(err)
	}
	if !f.metricsSecure {
		t.Fatal("--metrics-secure is off by default")
	}
}
