package lab

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/deployments"
	deploylab "github.com/gpudra/gpudra/deployments/lab"
	"github.com/gpudra/gpudra/topology"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Node labels set on every lab node.
const (
	LabelHostname = "kubernetes.io/hostname"
	// LabelProfile names the simulated NVML profile a node runs (a lab convenience).
	LabelProfile = "lab.gpudra.dev/profile"
)

const (
	fileAPIVersion = "lab.gpudra.dev/v1alpha1"
	fileKind       = "Lab"
)

// File describes the shape of a lab cluster (the lab file).
type File struct {
	APIVersion   string        `json:"apiVersion"`
	Kind         string        `json:"kind"`
	NodeDefaults NodeResources `json:"nodeDefaults,omitempty"`
	// MIG is every plugin's MIG strategy (--mig: static, dynamic or none) unless a node
	// says otherwise; empty leaves the plugin's default.
	MIG   string    `json:"mig,omitempty"`
	Kueue KueueSpec `json:"kueue,omitempty"`
	// Scheduler is the scheduler the lab runs: kube-scheduler (the default) or
	// gpudra-scheduler (kube-scheduler with gpudra's plugins, configured with
	// deployments/scheduler/scheduler-config.yaml).
	Scheduler string `json:"scheduler,omitempty"`
	// Install is how gpudra is installed: processes (the default: the lab starts the
	// plugins and the controller itself, with its own RBAC) or chart (helm install of
	// deployments/helm/gpudra; see chart.go).
	Install string `json:"install,omitempty"`
	// Controller is how the lab runs gpudra-controller (with kueue.enabled).
	Controller ControllerSpec `json:"controller,omitempty"`
	// CRDs names projects whose CustomResourceDefinitions the lab serves without their
	// controllers, so that gpudra's use of their objects can be tried: CRDSets' values.
	CRDs   []string `json:"crds,omitempty"`
	Blocks []Block  `json:"blocks"`
}

// CRDsFluid is the lab file's name of Fluid's Dataset and DataLoad CRDs
// (data.fluid.io/v1alpha1, Fluid v1.0.8).
const CRDsFluid = "fluid"

// CRDSets are the values crds accepts.
var CRDSets = []string{CRDsFluid}

// ControllerSpec shapes the lab's gpudra-controller.
type ControllerSpec struct {
	// Replicas of gpudra-controller, MinControllerReplicas to MaxControllerReplicas (0: 1).
	// They elect a leader, which answers the admission check and labels nodes; every
	// replica serves the config webhook, with the certificate kept in a Secret.
	Replicas int `json:"replicas,omitempty"`
}

// The replicas of gpudra-controller a lab runs: each one is a process with its certificate
// folder kept in sync, and three are enough to try any failover.
const (
	MinControllerReplicas = 1
	MaxControllerReplicas = 3
)

// The schedulers a lab can run.
const (
	KubeScheduler   = "kube-scheduler"
	GpudraScheduler = "gpudra-scheduler"
)

// KueueSpec says whether the lab runs Kueue, and how.
type KueueSpec struct {
	Enabled bool `json:"enabled"`
	// PodsReadyTimeout replaces the waitForPodsReady timeout of
	// deployments/kueue/config/kueue-config.yaml (5m) in the lab's Kueue: a Go duration
	// from MinPodsReadyTimeout to MaxPodsReadyTimeout, so that a test sees an admitted gang
	// that cannot start evicted in about a minute. Empty keeps the shipped value.
	PodsReadyTimeout string `json:"podsReadyTimeout,omitempty"`
	// WholeGPUQuota is how the lab's Kueue charges whole GPUs: "percent" (the shipped
	// configuration, 100 gpudra.dev/gpu-percent a GPU; the default) or "count" (one
	// gpudra.dev/gpu a GPU, deployments.KueueWholeGPUQuotaCount). A lab's ClusterQueues
	// then need quota in gpudra.dev/gpu for whole GPUs.
	WholeGPUQuota string `json:"wholeGPUQuota,omitempty"`
	// JobKinds are the job kinds besides batch/v1 Job the lab runs a controller for, with
	// Kueue's integration and webhook for them: JobKinds' values.
	JobKinds []string `json:"jobKinds,omitempty"`
}

// JobKindJobSet is the lab file's name of JobSet (jobset.x-k8s.io): the lab runs the
// JobSet controller and keeps Kueue's JobSet webhook.
const JobKindJobSet = "jobset"

// JobKindPyTorchJob and JobKindTFJob are the lab file's names of Kubeflow's PyTorchJob and
// TFJob (kubeflow.org/v1): the lab runs the Kubeflow training operator with the controllers
// and webhooks of the kinds named.
const (
	JobKindPyTorchJob = "pytorchjob"
	JobKindTFJob      = "tfjob"
)

// JobKindTrainJob is the lab file's name of Kubeflow Trainer's TrainJob
// (trainer.kubeflow.org/v1alpha1): the lab runs Trainer's controllers and webhooks, applies a
// torch ClusterTrainingRuntime and keeps Kueue's TrainJob webhooks. A TrainJob runs as a
// JobSet, so it needs jobset too.
const JobKindTrainJob = "trainjob"

// JobKinds are the values kueue.jobKinds accepts.
var JobKinds = []string{JobKindJobSet, JobKindPyTorchJob, JobKindTFJob, JobKindTrainJob}

// runsJobSet is whether the lab runs the JobSet controller.
func (k KueueSpec) runsJobSet() bool {
	return k.Enabled && slices.Contains(k.JobKinds, JobKindJobSet)
}

// runsTrainer is whether the lab runs Kubeflow Trainer.
func (k KueueSpec) runsTrainer() bool {
	return k.Enabled && slices.Contains(k.JobKinds, JobKindTrainJob)
}

// runsTrainingOperator is whether the lab runs the Kubeflow training operator.
func (k KueueSpec) runsTrainingOperator() bool {
	return len(k.kubeflowKinds()) > 0
}

// kubeflowKinds are the training operator's kinds the lab runs, as the operator names them.
func (k KueueSpec) kubeflowKinds() []string {
	if !k.Enabled {
		return nil
	}
	var out []string
	for kind, name := range map[string]string{JobKindPyTorchJob: "PyTorchJob", JobKindTFJob: "TFJob"} {
		if slices.Contains(k.JobKinds, kind) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// The waitForPodsReady timeouts a lab file may give Kueue: long enough for a gang of the
// lab to be scheduled and started on a loaded machine, at most the shipped value's order.
const (
	MinPodsReadyTimeout = 30 * time.Second
	MaxPodsReadyTimeout = time.Hour
)

// podsReadyTimeout is the lab's waitForPodsReady timeout, 0 for the shipped one; validate
// has checked it.
func (k KueueSpec) podsReadyTimeout() time.Duration {
	d, _ := time.ParseDuration(k.PodsReadyTimeout)
	return d
}

func (k KueueSpec) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, kind := range k.JobKinds {
		fp := p.Child("jobKinds").Index(i)
		switch {
		case !slices.Contains(JobKinds, kind):
			errs = append(errs, field.NotSupported(fp, kind, JobKinds))
		case seen[kind]:
			errs = append(errs, field.Duplicate(fp, kind))
		case !k.Enabled:
			errs = append(errs, field.Invalid(fp, kind, "needs kueue.enabled: true"))
		case kind == JobKindTrainJob && !slices.Contains(k.JobKinds, JobKindJobSet):
			errs = append(errs, field.Invalid(fp, kind, fmt.Sprintf("needs %q in kueue.jobKinds too (a TrainJob runs as a JobSet); accepted values: %s",
				JobKindJobSet, strings.Join(JobKinds, ", "))))
		}
		seen[kind] = true
	}
	if q := k.WholeGPUQuota; q != "" {
		fp := p.Child("wholeGPUQuota")
		switch {
		case !slices.Contains(deployments.KueueWholeGPUQuotas, q):
			errs = append(errs, field.NotSupported(fp, q, deployments.KueueWholeGPUQuotas))
		case !k.Enabled:
			errs = append(errs, field.Invalid(fp, q, "needs kueue.enabled: true"))
		}
	}
	if k.PodsReadyTimeout == "" {
		return errs
	}
	fp := p.Child("podsReadyTimeout")
	if !k.Enabled {
		return append(errs, field.Invalid(fp, k.PodsReadyTimeout, "needs kueue.enabled: true"))
	}
	want := fmt.Sprintf("a Go duration from %s to %s (e.g. \"1m\")", MinPodsReadyTimeout, MaxPodsReadyTimeout)
	d, err := time.ParseDuration(k.PodsReadyTimeout)
	if err != nil || d < MinPodsReadyTimeout || d > MaxPodsReadyTimeout {
		return append(errs, field.Invalid(fp, k.PodsReadyTimeout, "must be "+want))
	}
	return errs
}

// NodeResources is what a node reports as capacity and allocatable.
type NodeResources struct {
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
	Pods   int32  `json:"pods,omitempty"`
}

// Block is a group of racks (a network block above the ToR switches).
type Block struct {
	Name string `json:"name"`
	// Oversubscription is the block's spine's downlink to uplink bandwidth ("3:1" or "3";
	// unset: non-blocking), labelled topology.gpudra.dev/block-oversubscription.
	Oversubscription string `json:"oversubscription,omitempty"`
	Racks            []Rack `json:"racks"`
}

// Rack is a set of nodes behind one top-of-rack switch.
type Rack struct {
	Name string `json:"name"`
	// ToR names the rack's top-of-rack switch; default "tor-<rack name>". A node's own tor
	// puts it behind another ToR of the rack.
	ToR string `json:"tor,omitempty"`
	// Oversubscription is the downlink to uplink bandwidth of the rack's ToRs ("3:1" or
	// "3"; unset: non-blocking), labelled topology.gpudra.dev/tor-oversubscription.
	Oversubscription string     `json:"oversubscription,omitempty"`
	Nodes            []NodeSpec `json:"nodes"`
}

// NodeSpec is one simulated GPU server.
type NodeSpec struct {
	Name string `json:"name"`
	// Profile is the simulated NVML profile, passed to the plugin as --nvml=sim:<profile>.
	Profile string `json:"profile,omitempty"`
	// KFD is a simulated AMD or Hygon profile (driver/kfdsim), passed to the plugin as
	// --kfd=sim:<kfd>; without Profile the node has no NVML (--nvml=none), and the NVIDIA
	// GPUs the KFD profile names, if any, are simulated too.
	KFD string `json:"kfd,omitempty"`
	// MIG overrides the lab's MIG strategy for this node's plugin.
	MIG string `json:"mig,omitempty"`
	// ToR overrides the rack's ToR: a rack with several ToRs.
	ToR string `json:"tor,omitempty"`
	// Real makes this a real node: a kubelet with containerd and runc on this machine runs its
	// pods as real containers, and its plugin is registered with that kubelet (the GPUs are
	// still simulated, with device files in a fake driver root: NVIDIA's, and /dev/kfd and
	// /dev/dri for a node with kfd). Real nodes carry the taint
	// lab.gpudra.dev/real-node=true:NoSchedule, so only pods that ask for one land there.
	Real          bool `json:"real,omitempty"`
	NodeResources `json:",inline"`
}

// ProfileLabel is the node's LabelProfile: its simulated AMD profile if it has one (a
// mixed node's KFD profile names its NVIDIA profile), else its NVML profile.
func (n Node) ProfileLabel() string { return cmp.Or(n.KFD, n.Profile) }

// Node is a lab node with everything it inherits from its rack, block and the defaults.
type Node struct {
	Name, Profile, Block, Rack, ToR string
	// KFD is the simulated AMD profile (NodeSpec.KFD), "" for none.
	KFD string
	// ToROversubscription and BlockOversubscription are the ratios of its ToR and its
	// block's spine as label values ("3"), "" when not given.
	ToROversubscription, BlockOversubscription string
	MIG                                        string // the plugin's --mig, "" for its default
	Real                                       bool   // a real kubelet node (see NodeSpec.Real)
	Resources                                  NodeResources
}

// Labels are the node's Kubernetes labels.
func (n Node) Labels() map[string]string {
	l := map[string]string{
		api.LabelBlock: n.Block, api.LabelRack: n.Rack, api.LabelToR: n.ToR,
		LabelHostname: n.Name, LabelProfile: n.ProfileLabel(),
	}
	if n.ToROversubscription != "" {
		l[api.LabelToROversubscription] = n.ToROversubscription
	}
	if n.BlockOversubscription != "" {
		l[api.LabelBlockOversubscription] = n.BlockOversubscription
	}
	return l
}

// ratioLabel is a switch's oversubscription as a label value ("" when unset); ParseFile
// has checked it.
func ratioLabel(v string) string {
	if v == "" {
		return ""
	}
	r, err := topology.ParseOversubscription(v)
	if err != nil {
		return ""
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}

func validRatio(p *field.Path, v string) field.ErrorList {
	if v == "" {
		return nil
	}
	if _, err := topology.ParseOversubscription(v); err != nil {
		return field.ErrorList{field.Invalid(p, v, err.Error())}
	}
	return nil
}

// defaultNodeResources apply when neither the node nor nodeDefaults say otherwise.
var defaultNodeResources = NodeResources{CPU: "64", Memory: "512Gi", Pods: 110}

// DefaultFile returns the embedded default lab file (deployments/lab/lab.yaml).
func DefaultFile() (*File, error) {
	f, err := ParseFile(deploylab.DefaultFile)
	if err != nil {
		return nil, fmt.Errorf("embedded default lab file: %w", err)
	}
	return f, nil
}

// LoadFile reads a lab file; an empty path means the embedded default.
func LoadFile(path string) (*File, error) {
	if path == "" {
		return DefaultFile()
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read lab file: %w", err)
	}
	f, err := ParseFile(data)
	if err != nil {
		return nil, fmt.Errorf("lab file %s: %w", path, err)
	}
	return f, nil
}

// ParseFile decodes a lab file strictly (unknown or duplicate fields are errors) and validates it.
func ParseFile(data []byte) (*File, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	var f File
	strictErrs, err := kjson.UnmarshalStrict(js, &f, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("%s (see deployments/lab/lab.yaml for the accepted fields)", strictErrorText(strictErrs))
	}
	if errs := f.validate(); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return &f, nil
}

func strictErrorText(errs []error) string {
	s := ""
	for i, e := range errs {
		if i > 0 {
			s += "; "
		}
		s += e.Error()
	}
	return s
}

func (f *File) validate() field.ErrorList {
	var errs field.ErrorList
	if f.APIVersion != fileAPIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), f.APIVersion, []string{fileAPIVersion}))
	}
	if f.Kind != fileKind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), f.Kind, []string{fileKind}))
	}
	errs = append(errs, f.NodeDefaults.validate(field.NewPath("nodeDefaults"))...)
	errs = append(errs, f.Kueue.validate(field.NewPath("kueue"))...)
	switch f.Scheduler {
	case "", KubeScheduler, GpudraScheduler:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("scheduler"), f.Scheduler, []string{KubeScheduler, GpudraScheduler}))
	}
	switch f.Install {
	case "", InstallProcesses, InstallChart:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("install"), f.Install, []string{InstallProcesses, InstallChart}))
	}
	if r := f.Controller.Replicas; r != 0 && (r < MinControllerReplicas || r > MaxControllerReplicas) {
		errs = append(errs, field.Invalid(field.NewPath("controller", "replicas"), r, fmt.Sprintf("must be %d to %d", MinControllerReplicas, MaxControllerReplicas)))
	}
	if f.Controller.Replicas > 1 && !f.Kueue.Enabled {
		errs = append(errs, field.Invalid(field.NewPath("controller", "replicas"), f.Controller.Replicas, "needs kueue.enabled: true (the lab runs gpudra-controller only with Kueue)"))
	}
	seenCRDs := sets.New[string]()
	for i, c := range f.CRDs {
		fp := field.NewPath("crds").Index(i)
		switch {
		case !slices.Contains(CRDSets, c):
			errs = append(errs, field.NotSupported(fp, c, CRDSets))
		case seenCRDs.Has(c):
			errs = append(errs, field.Duplicate(fp, c))
		}
		seenCRDs.Insert(c)
	}
	if len(f.Blocks) == 0 {
		errs = append(errs, field.Required(field.NewPath("blocks"), "a lab needs at least one block with one rack and one node"))
	}
	names := sets.New[string]()
	racks := sets.New[string]()
	for i, b := range f.Blocks {
		bp := field.NewPath("blocks").Index(i)
		errs = append(errs, dnsLabel(bp.Child("name"), b.Name)...)
		errs = append(errs, validRatio(bp.Child("oversubscription"), b.Oversubscription)...)
		if len(b.Racks) == 0 {
			errs = append(errs, field.Required(bp.Child("racks"), "a block needs at least one rack"))
		}
		for j, r := range b.Racks {
			rp := bp.Child("racks").Index(j)
			errs = append(errs, dnsLabel(rp.Child("name"), r.Name)...)
			if racks.Has(r.Name) {
				errs = append(errs, field.Duplicate(rp.Child("name"), r.Name))
			}
			racks.Insert(r.Name)
			if r.ToR != "" {
				errs = append(errs, dnsLabel(rp.Child("tor"), r.ToR)...)
			}
			errs = append(errs, validRatio(rp.Child("oversubscription"), r.Oversubscription)...)
			if len(r.Nodes) == 0 {
				errs = append(errs, field.Required(rp.Child("nodes"), "a rack needs at least one node"))
			}
			for k, n := range r.Nodes {
				np := rp.Child("nodes").Index(k)
				errs = append(errs, dnsLabel(np.Child("name"), n.Name)...)
				if names.Has(n.Name) {
					errs = append(errs, field.Duplicate(np.Child("name"), n.Name))
				}
				names.Insert(n.Name)
				if n.ToR != "" {
					errs = append(errs, dnsLabel(np.Child("tor"), n.ToR)...)
				}
				if n.Profile == "" && n.KFD == "" {
					errs = append(errs, field.Required(np.Child("profile"), "a simulated NVML profile such as dgx-h100, dgx-v100 or l40s-pcie, or kfd: a simulated AMD profile such as mi300x-8"))
				}
				errs = append(errs, n.NodeResources.validate(np)...)
			}
		}
	}
	return errs
}

func (r NodeResources) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, q := range map[string]string{"cpu": r.CPU, "memory": r.Memory} {
		if q == "" {
			continue
		}
		if _, err := resource.ParseQuantity(q); err != nil {
			errs = append(errs, field.Invalid(p.Child(name), q, "not a Kubernetes quantity (e.g. \"64\", \"512Gi\")"))
		}
	}
	if r.Pods < 0 {
		errs = append(errs, field.Invalid(p.Child("pods"), r.Pods, "must not be negative"))
	}
	return errs
}

func dnsLabel(p *field.Path, v string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(v) {
		errs = append(errs, field.Invalid(p, v, msg))
	}
	return errs
}

// scheduler is the scheduler the lab runs.
func (f *File) scheduler() string {
	if f.Scheduler == "" {
		return KubeScheduler
	}
	return f.Scheduler
}

// controllerReplicas is how many gpudra-controller replicas the lab runs (with Kueue).
func (f *File) controllerReplicas() int {
	if !f.Kueue.Enabled {
		return 0
	}
	return max(f.Controller.Replicas, MinControllerReplicas)
}

func (f *File) install() string {
	if f.Install == "" {
		return InstallProcesses
	}
	return f.Install
}

// Nodes lists the lab's nodes in file order with inherited topology and resources.
func (f *File) Nodes() []Node {
	var out []Node
	for _, b := range f.Blocks {
		for _, r := range b.Racks {
			tor := r.ToR
			if tor == "" {
				tor = "tor-" + r.Name
			}
			for _, n := range r.Nodes {
				mig := n.MIG
				if mig == "" {
					mig = f.MIG
				}
				nodeToR := tor
				if n.ToR != "" {
					nodeToR = n.ToR
				}
				out = append(out, Node{
					Name: n.Name, Profile: n.Profile, KFD: n.KFD, Block: b.Name, Rack: r.Name, ToR: nodeToR, MIG: mig, Real: n.Real,
					ToROversubscription: ratioLabel(r.Oversubscription), BlockOversubscription: ratioLabel(b.Oversubscription),
					Resources: mergeResources(n.NodeResources, f.NodeDefaults, defaultNodeResources),
				})
			}
		}
	}
	return out
}

func mergeResources(layers ...NodeResources) NodeResources {
	var out NodeResources
	for _, l := range layers {
		if out.CPU == "" {
			out.CPU = l.CPU
		}
		if out.Memory == "" {
			out.Memory = l.Memory
		}
		if out.Pods == 0 {
			out.Pods = l.Pods
		}
	}
	return out
}
