package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Layout names the files in a lab's state folder.
type Layout struct{ Root string }

func (l Layout) PKIDir() string              { return filepath.Join(l.Root, "pki") }
func (l Layout) Kubeconfig() string          { return filepath.Join(l.Root, "kubeconfig") }
func (l Layout) StateFile() string           { return filepath.Join(l.Root, "lab.json") }
func (l Layout) LogDir() string              { return filepath.Join(l.Root, "logs") }
func (l Layout) Log(component string) string { return filepath.Join(l.Root, "logs", component+".log") }
func (l Layout) PIDFile(component string) string {
	return filepath.Join(l.Root, "run", component+".pid")
}
func (l Layout) BinDir() string               { return filepath.Join(l.Root, "bin") }
func (l Layout) NodeDir(node string) string   { return filepath.Join(l.Root, "nodes", node) }
func (l Layout) ComponentDir(c string) string { return filepath.Join(l.Root, "components", c) }

// MIGLayouts is the file of MIG layouts (the chart's defaults) that plugins run as processes
// read with --mig-layouts.
func (l Layout) MIGLayouts() string { return filepath.Join(l.Root, "mig-layouts.yaml") }
func (l Layout) ComponentKubeconfig(c string) string {
	return filepath.Join(l.Root, "components", c, "kubeconfig")
}

// State is what a running lab records in <dir>/lab.json: enough for another process to find
// its API server, report its status and stop exactly the processes it started.
type State struct {
	Dir        string      `json:"dir"`
	StartedAt  time.Time   `json:"startedAt"`
	Server     string      `json:"server"`  // the API server URL
	Kubectl    string      `json:"kubectl"` // the toolchain's kubectl, matching the API server
	Nodes      []Node      `json:"nodes"`
	Kueue      bool        `json:"kueue"`
	Scheduler  string      `json:"scheduler"`  // KubeScheduler or GpudraScheduler
	Install    string      `json:"install"`    // InstallProcesses or InstallChart
	Components []Component `json:"components"` // in start order
	// RealNodesLeftOut says why the lab file's real nodes were left out (this machine cannot
	// run containers); empty when there were none or they run.
	RealNodesLeftOut string `json:"realNodesLeftOut,omitempty"`
	// ControllerReplicas is how many gpudra-controller replicas run (0: none, without Kueue).
	ControllerReplicas int `json:"controllerReplicas,omitempty"`
	// KueuePodsReadyTimeout is the waitForPodsReady timeout the lab gave Kueue (the lab
	// file's kueue.podsReadyTimeout, e.g. "1m0s"); empty when Kueue runs with the shipped one.
	KueuePodsReadyTimeout string `json:"kueuePodsReadyTimeout,omitempty"`
	// PluginImage is the kubelet plugin's image the lab built for its real nodes and names in
	// its chart values (ghcr.io/gpudra/gpudra-kubelet-plugin:<the tree's version>).
	PluginImage string `json:"pluginImage,omitempty"`
}

// RealNodes are the lab's running real (kubelet) nodes.
func (s *State) RealNodes() []Node {
	var out []Node
	for _, n := range s.Nodes {
		if n.Real {
			out = append(out, n)
		}
	}
	return out
}

// Component is one process the lab started.
type Component struct {
	Name  string         `json:"name"` // etcd, kube-apiserver, ..., plugin-<node>
	PID   int            `json:"pid"`
	Argv  []string       `json:"argv"`
	Env   []string       `json:"env,omitempty"` // extra environment, for restarts
	Ports map[string]int `json:"ports,omitempty"`
	Log   string         `json:"log"`
}

// PluginComponent is the component name of a node's kubelet plugin.
func PluginComponent(node string) string { return "plugin-" + node }

// ControllerComponent is the component name of replica i of gpudra-controller when the lab
// runs replicas of it: gpudra-controller for a single one, else gpudra-controller-<i>.
func ControllerComponent(i, replicas int) string {
	if replicas <= 1 {
		return controllerComponent
	}
	return controllerComponent + "-" + strconv.Itoa(i)
}

// ControllerComponents are the component names of the lab's gpudra-controller replicas.
func (s *State) ControllerComponents() []string {
	var out []string
	for i := range s.ControllerReplicas {
		out = append(out, ControllerComponent(i, s.ControllerReplicas))
	}
	return out
}

// Component returns the named component, or nil.
func (s *State) Component(name string) *Component {
	for i := range s.Components {
		if s.Components[i].Name == name {
			return &s.Components[i]
		}
	}
	return nil
}

// ErrNoLab says that a folder holds no lab.
var ErrNoLab = errors.New("no lab")

// ReadState loads the state of the lab in dir.
func ReadState(dir string) (*State, error) {
	data, err := os.ReadFile(Layout{dir}.StateFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s (start one with `gpudra lab up`)", ErrNoLab, dir)
	}
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("lab state %s: %w", Layout{dir}.StateFile(), err)
	}
	return &s, nil
}

func (s *State) write() error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := Layout{s.Dir}.StateFile() + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, Layout{s.Dir}.StateFile())
}

// RESTConfig is the lab administrator's client configuration.
func (s *State) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", Layout{s.Dir}.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("lab kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

// writeKubeconfig writes a self-contained kubeconfig (CA and client key pair embedded).
func writeKubeconfig(path, server string, caPEM []byte, kp KeyPair, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gpudra-lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	cfg.Contexts["gpudra-lab"] = &clientcmdapi.Context{Cluster: "gpudra-lab", AuthInfo: user}
	cfg.CurrentContext = "gpudra-lab"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}
