package helm_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/kubernetes/fake"
	k8sappsv1 "k8s.io/kubernetes/pkg/apis/apps/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/kubeletplugin/mps"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// pluginUser is the kubelet plugin's identity, as its pod-bound token gives it.
const pluginUser = "system:serviceaccount:gpudra:gpudra-kubelet-plugin"

// admit evaluates a ValidatingAdmissionPolicy the way the API server does (its CEL
// environment, variables, match conditions and message expressions) for a request on a
// Deployment by user on node, and returns whether it is admitted and the first denial's
// message.
func admit(t *testing.T, policy *admissionv1.ValidatingAdmissionPolicy, op admission.Operation, obj runtime.Object, username, node string) (bool, string) {
	t.Helper()
	return review(t, policy, request{op: op, obj: obj, username: username, node: node,
		gvk: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
		gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}})
}

// request is one API request as admission sees it: old is the object before an update.
type request struct {
	op             admission.Operation
	obj, old       runtime.Object
	username, node string
	gvk            schema.GroupVersionKind
	gvr            schema.GroupVersionResource
}

// review evaluates policy for r as the API server does, and returns whether r is admitted
// and the first denial's message.
func review(t *testing.T, policy *admissionv1.ValidatingAdmissionPolicy, r request) (bool, string) {
	t.Helper()
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	withAuthz := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	var vars []plugincel.NamedExpressionAccessor
	for _, v := range policy.Spec.Variables {
		vars = append(vars, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	compiler.CompileAndStoreVariables(vars, withAuthz, environment.StoredExpressions)
	var matches []plugincel.ExpressionAccessor
	for i := range policy.Spec.MatchConditions {
		matches = append(matches, (*matchconditions.MatchCondition)(&policy.Spec.MatchConditions[i]))
	}
	validations := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	for i, v := range policy.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	validator := validating.NewValidator(
		compiler.CompileCondition(validations, withAuthz, environment.StoredExpressions),
		matchconditions.NewMatcher(compiler.CompileCondition(matches, withAuthz, environment.StoredExpressions), policy.Spec.FailurePolicy, "policy", "validate", policy.Name),
		compiler.CompileCondition(nil, withAuthz, environment.StoredExpressions),
		compiler.CompileCondition(messages, plugincel.OptionalVariableDeclarations{}, environment.StoredExpressions),
		policy.Spec.FailurePolicy, nil)
	acc := r.obj.(metav1.Object)
	who := &user.DefaultInfo{Name: r.username}
	if r.node != "" {
		who.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {r.node}}
	}
	attrs := &admission.VersionedAttributes{
		Attributes:      admission.NewAttributesRecord(r.obj, r.old, r.gvk, acc.GetNamespace(), acc.GetName(), r.gvr, "", r.op, nil, false, who),
		VersionedObject: admission.NewLazyObject(r.obj),
		VersionedKind:   r.gvk,
	}
	if r.old != nil {
		attrs.VersionedOldObject = admission.NewLazyObject(r.old)
	}
	res := validator.Validate(context.Background(), r.gvr, attrs, nil, nil, celconfig.RuntimeCELCostBudget, nil)
	for _, d := range res.Decisions {
		if d.Action == validating.ActionDeny {
			return false, d.Message
		}
	}
	return true, ""
}

// compileErrors are the policy's expressions that the API server would refuse when the policy
// is created (it compiles new policies for the NewExpressions environment).
func compileErrors(t *testing.T, policy *admissionv1.ValidatingAdmissionPolicy) []string {
	t.Helper()
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	withAuthz := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	var errs []string
	for _, v := range policy.Spec.Variables {
		if r := compiler.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, withAuthz, environment.NewExpressions); r.Error != nil {
			errs = append(errs, "variable "+v.Name+": "+r.Error.Error())
		}
	}
	for _, v := range policy.Spec.Validations {
		if r := compiler.CompileCELExpression(&validating.ValidationCondition{Expression: v.Expression}, withAuthz, environment.NewExpressions); r.Error != nil {
			errs = append(errs, v.Expression+": "+r.Error.Error())
		}
		if v.MessageExpression != "" {
			if r := compiler.CompileCELExpression(&validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}, plugincel.OptionalVariableDeclarations{}, environment.NewExpressions); r.Error != nil {
				errs = append(errs, v.MessageExpression+": "+r.Error.Error())
			}
		}
	}
	return errs
}

// flagValues are a container's --name=value arguments.
func flagValues(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, a := range c.Args {
		if name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok && strings.HasPrefix(a, "--") {
			out[name] = value
		}
	}
	return out
}

// daemonOf is the Deployment the plugin of this DaemonSet makes for an MPS claim on node:
// mps.Pods configured from the DaemonSet's flags and environment as the plugin
// configures it (cmd/gpudra-kubelet-plugin: the daemon sees the driver root at
// /driver-root). limits, when not nil, gives the claim's devices and limits (else one GPU,
// 50 % of its threads, 1 GiB pinned).
func daemonOf(t *testing.T, ds *appsv1.DaemonSet, node, claimUID string, limits *prepared.MPSDaemon) *appsv1.Deployment {
	t.Helper()
	c := ds.Spec.Template.Spec.Containers[0]
	f := flagValues(c)
	if f["mps-control-daemons"] != "pod" {
		t.Fatalf("%s runs MPS daemons as %q, not in pods", ds.Name, f["mps-control-daemons"])
	}
	p := mps.Pods{
		Client: fake.NewClientset(), Namespace: namespace, NodeName: node,
		Image: f["mps-daemon-image"], PullPolicy: corev1.PullPolicy(f["mps-daemon-image-pull-policy"]),
		ServiceAccountName: f["mps-daemon-service-account"], PriorityClassName: f["mps-daemon-priority-class"],
		Simulated: strings.HasPrefix(f["nvml"], "sim:"), DriverRoot: f["driver-root"],
	}
	if !p.Simulated {
		p.Binary = mps.PodDriverRoot + strings.TrimPrefix(f["mps-control-daemon"], f["container-driver-root"])
		// The plugin's own LD_LIBRARY_PATH, its directories under the container's driver
		// root moved to where the daemon's pod mounts it (cmd/gpudra-kubelet-plugin).
		dirs := strings.Split(envOf(c, "LD_LIBRARY_PATH").Value, ":")
		for k, dir := range dirs {
			if rest, ok := strings.CutPrefix(dir, f["container-driver-root"]+"/"); ok {
				dirs[k] = mps.PodDriverRoot + "/" + rest
			}
		}
		p.LibraryPath = strings.Join(dirs, ":")
	}
	dir := filepath.Join(f["plugin-data-dir"], "mps", claimUID)
	d := prepared.MPSDaemon{PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"), ShmDir: filepath.Join(dir, "shm"),
		Devices: []string{"GPU-00000000-0000-0000-0000-000000000001"}, ActiveThreadPercent: 50, PinnedMemoryMiB: []int64{1024}}
	if limits != nil {
		d.ActiveThreadPercent, d.PinnedMemoryMiB = limits.ActiveThreadPercent, limits.PinnedMemoryMiB
		d.Devices = limits.Devices
	}
	if err := p.Create(d); err != nil {
		t.Fatal(err)
	}
	dep, err := p.Client.AppsV1().Deployments(namespace).Get(context.Background(), mps.PodPrefix+claimUID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// As the API server hands it to admission: with its defaults, and v1 carries the
	// deprecated serviceAccount too.
	k8sappsv1.SetObjectDefaults_Deployment(dep)
	dep.Spec.Template.Spec.DeprecatedServiceAccount = dep.Spec.Template.Spec.ServiceAccountName
	return dep
}

// refusal is a change to a daemon's Deployment and what the policy says refusing it.
type refusal struct {
	name   string
	change func(*appsv1.Deployment)
	want   string
}

// TestMPSDaemonPolicy: the pods the chart's plugins make for MPS claims (the real code,
// configured from the rendered DaemonSet) pass the chart's admission policy, and a plugin's
// token cannot make one that differs in any field the policy pins.
func TestMPSDaemonPolicy(t *testing.T) {
	const node, uid = "gpu-node-1", "6b3c0a52-0d1e-4f5a-9b7c-3e2d1f0a9b8c"
	for _, pool := range []struct {
		name, daemonSet string
		sets            []string
	}{
		{"real NVML", "gpudra-kubelet-plugin", nil},
		{"simulated pool", "gpudra-kubelet-plugin-dgx-h100", labValues},
		{"lab's real node, its own data directory", "gpudra-kubelet-plugin-r1-real", realNodeValues},
	} {
		t.Run(pool.name, func(t *testing.T) {
			m := render(t, pool.sets...)
			policy := m.get("ValidatingAdmissionPolicy", "gpudra-mps-daemon-pods").(*admissionv1.ValidatingAdmissionPolicy)
			if ops := policy.Spec.MatchConstraints.ResourceRules[0].Operations; len(ops) != 2 || ops[0] != admissionv1.Create || ops[1] != admissionv1.Update {
				t.Errorf("operations %v, want CREATE and UPDATE (a daemon of an earlier plugin can always be deleted)", ops)
			}
			if b, ok := m.get("ValidatingAdmissionPolicyBinding", "gpudra-mps-daemon-pods").(*admissionv1.ValidatingAdmissionPolicyBinding); !ok || b.Spec.PolicyName != policy.Name {
				t.Errorf("binding %+v, want one for %s", b, policy.Name)
			}
			if errs := compileErrors(t, policy); len(errs) > 0 {
				t.Fatalf("the API server would refuse the policy:\n%s", strings.Join(errs, "\n"))
			}
			ds := m.get("DaemonSet", pool.daemonSet).(*appsv1.DaemonSet)
			good := daemonOf(t, ds, node, uid, nil)
			privileged := !strings.HasPrefix(flagValues(ds.Spec.Template.Spec.Containers[0])["nvml"], "sim:")
			// Every daemon the plugin makes passes: whatever the claim's devices and limits.
			for _, limits := range []prepared.MPSDaemon{
				{Devices: []string{"GPU-00000000-0000-0000-0000-000000000001"}},
				{Devices: []string{"MIG-00000000-0000-0000-0000-000000000002", "GPU-00000000-0000-0000-0000-000000000003"}, ActiveThreadPercent: 100},
				{Devices: []string{"GPU-00000000-0000-0000-0000-000000000001", "GPU-00000000-0000-0000-0000-000000000003"}, PinnedMemoryMiB: []int64{0, 81920}},
				{Devices: []string{"GPU-00000000-0000-0000-0000-000000000001"}, ActiveThreadPercent: 1, PinnedMemoryMiB: []int64{1}},
			} {
				d := daemonOf(t, ds, node, uid, &limits)
				if ok, msg := admit(t, policy, admission.Create, d, pluginUser, node); !ok {
					t.Fatalf("the plugin's own daemon for %+v is refused: %s\n%+v", limits, msg, d.Spec.Template.Spec)
				}
			}
			if ok, msg := admit(t, policy, admission.Update, good, pluginUser, node); !ok {
				t.Fatalf("the plugin's own daemon is refused on update: %s", msg)
			}
			if ok, _ := admit(t, policy, admission.Create, good, "system:serviceaccount:gpudra:someone-else", node); !ok {
				t.Error("the policy holds identities other than the plugin's")
			}
			if got := envOf(good.Spec.Template.Spec.Containers[0], "LD_LIBRARY_PATH"); privileged && (got == nil || got.Value != envOf(ds.Spec.Template.Spec.Containers[0], "LD_LIBRARY_PATH").Value) {
				t.Fatalf("the daemon's LD_LIBRARY_PATH is %+v, want the plugin's", got)
			}
			for _, tc := range mpsDaemonRefusals(good, uid, privileged) {
				t.Run(tc.name, func(t *testing.T) {
					d := good.DeepCopy()
					tc.change(d)
					if ok, msg := admit(t, policy, admission.Create, d, pluginUser, node); ok || !strings.Contains(msg, tc.want) {
						t.Errorf("admitted %v (%q), want refused saying %q", ok, msg, tc.want)
					}
				})
			}
		})
	}
}

// mpsDaemonRefusals are the changes a plugin's token could make to the daemon the plugin
// makes (good) to run something else on its node, each with what the policy says refusing
// it. privileged: the daemon of a real NVML pool.
func mpsDaemonRefusals(good *appsv1.Deployment, uid string, privileged bool) []refusal {
	hostPath := func(name, path string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptr.To(corev1.HostPathDirectory)}}}
	}
	spec := func(d *appsv1.Deployment) *corev1.PodSpec { return &d.Spec.Template.Spec }
	ctr := func(d *appsv1.Deployment) *corev1.Container { return &d.Spec.Template.Spec.Containers[0] }
	mount := func(d *appsv1.Deployment, name string) *corev1.VolumeMount {
		for i := range ctr(d).VolumeMounts {
			if ctr(d).VolumeMounts[i].Name == name {
				return &ctr(d).VolumeMounts[i]
			}
		}
		panic("no volume mount " + name)
	}
	const (
		containerFields = "containers[0] of an MPS control daemon sets only"
		podFields       = "spec.template.spec of an MPS control daemon sets only"
		args            = "must run gpudra-kubelet-plugin mps-control-daemon --pipe-dir=/tmp/nvidia-mps"
		env             = "env of an MPS control daemon is empty"
		mounts          = "volumeMounts of an MPS control daemon mount pipe at /tmp/nvidia-mps"
		volumes         = "may only be host paths (type Directory)"
		security        = "securityContext of an MPS control daemon is exactly"
	)
	cases := []refusal{
		{"another image", func(d *appsv1.Deployment) { ctr(d).Image = "docker.io/library/busybox:latest" }, "image of an MPS control daemon must be " + good.Spec.Template.Spec.Containers[0].Image},
		{"the controller's service account", func(d *appsv1.Deployment) {
			spec(d).ServiceAccountName, spec(d).DeprecatedServiceAccount = "gpudra-controller", "gpudra-controller"
		}, "serviceAccountName of an MPS control daemon must be gpudra-mps-daemon, not gpudra-controller"},
		{"the deprecated service account field", func(d *appsv1.Deployment) { spec(d).DeprecatedServiceAccount = "gpudra-controller" }, "must be gpudra-mps-daemon"},
		{"a mounted token", func(d *appsv1.Deployment) { spec(d).AutomountServiceAccountToken = ptr.To(true) }, "automountServiceAccountToken of an MPS control daemon must be false"},
		{"a token by default", func(d *appsv1.Deployment) { spec(d).AutomountServiceAccountToken = nil }, "automountServiceAccountToken"},
		{"the node's network", func(d *appsv1.Deployment) { spec(d).HostNetwork = true }, "may not use the node's network, PID or IPC namespace"},
		{"the node's PIDs", func(d *appsv1.Deployment) { spec(d).HostPID = true }, "may not use the node's network, PID or IPC namespace"},
		{"the node's IPC", func(d *appsv1.Deployment) { spec(d).HostIPC = true }, "may not use the node's network, PID or IPC namespace"},
		{"a second container", func(d *appsv1.Deployment) {
			spec(d).Containers = append(spec(d).Containers, corev1.Container{Name: "x", Image: ctr(d).Image})
		}, "exactly one container"},
		{"an init container", func(d *appsv1.Deployment) {
			spec(d).InitContainers = []corev1.Container{{Name: "x", Image: ctr(d).Image}}
		}, "no initContainers"},
		{"an ephemeral container", func(d *appsv1.Deployment) {
			spec(d).EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "x", Image: ctr(d).Image}}}
		}, "ephemeralContainers"},
		{"a runtime class", func(d *appsv1.Deployment) { spec(d).RuntimeClassName = ptr.To("nvidia") }, "runtimeClassName"},
		{"the host's user namespace", func(d *appsv1.Deployment) { spec(d).HostUsers = ptr.To(true) }, podFields},
		{"a ResourceClaim of its own", func(d *appsv1.Deployment) {
			spec(d).ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("someone-elses-claim")}}
		}, "not resourceClaims"},
		{"a pod security context running as root", func(d *appsv1.Deployment) {
			spec(d).SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](0)}
		}, "(securityContext empty)"},
		{"a sysctl", func(d *appsv1.Deployment) {
			spec(d).SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "0"}}}
		}, "(securityContext empty)"},
		{"an AppArmor annotation", func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/mps-control-daemon": "unconfined"}
		}, "its template no annotations"},
		{"a shell", func(d *appsv1.Deployment) { ctr(d).Command, ctr(d).Args = []string{"sh"}, []string{"-c", "id"} }, args},
		{"a host binary as the daemon", func(d *appsv1.Deployment) {
			a := ctr(d).Args
			a[len(a)-1] = "--mps-control-daemon=/driver-root/usr/bin/nsenter"
		}, args},
		{"another pipe directory", func(d *appsv1.Deployment) { ctr(d).Args[1] = "--pipe-dir=/etc" }, args},
		{"a flag added", func(d *appsv1.Deployment) {
			ctr(d).Args = slices.Insert(ctr(d).Args, len(ctr(d).Args)-1, "--pipe-dir=/etc")
		}, args},
		{"devices that are not UUIDs", func(d *appsv1.Deployment) { ctr(d).Args[3] = "--devices=$(id)" }, args},
		{"an active thread percentage above 100", func(d *appsv1.Deployment) { ctr(d).Args[4] = "--active-thread-percentage=500" }, args},
		{"the flags out of order", func(d *appsv1.Deployment) { ctr(d).Args[4], ctr(d).Args[5] = ctr(d).Args[5], ctr(d).Args[4] }, args},
		{"a probe running a shell", func(d *appsv1.Deployment) {
			ctr(d).ReadinessProbe.Exec.Command = []string{"sh", "-c", "id"}
		}, "only probe of an MPS control daemon is its readiness check"},
		{"a probe checking another pipe directory", func(d *appsv1.Deployment) {
			ctr(d).ReadinessProbe.Exec.Command[3] = "--pipe-dir=/etc"
		}, "only probe of an MPS control daemon is its readiness check"},
		{"a liveness probe", func(d *appsv1.Deployment) {
			ctr(d).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"gpudra-kubelet-plugin"}}}}
		}, "not livenessProbe"},
		{"a postStart hook", func(d *appsv1.Deployment) {
			ctr(d).Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh"}}}}
		}, "not lifecycle"},
		{"a working directory", func(d *appsv1.Deployment) { ctr(d).WorkingDir = "/tmp/nvidia-mps" }, "not workingDir"},
		{"a termination message file over the driver's libraries", func(d *appsv1.Deployment) {
			ctr(d).TerminationMessagePath = "/driver-root/usr/lib64/libcuda.so.1"
		}, "terminationMessagePath /dev/termination-log"},
		{"resources", func(d *appsv1.Deployment) {
			ctr(d).Resources = corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}
		}, "resources empty"},
		{"a preloaded library", func(d *appsv1.Deployment) {
			ctr(d).Env = append(ctr(d).Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/tmp/nvidia-mps/x.so"})
		}, env},
		{"a library path into the claim's pipe directory", func(d *appsv1.Deployment) {
			ctr(d).Env = []corev1.EnvVar{{Name: "LD_LIBRARY_PATH", Value: "/tmp/nvidia-mps"}}
		}, env},
		{"a library path from a field", func(d *appsv1.Deployment) {
			ctr(d).Env = []corev1.EnvVar{{Name: "LD_LIBRARY_PATH", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
		}, env},
		{"the environment from a ConfigMap", func(d *appsv1.Deployment) {
			ctr(d).EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}}}}
		}, "not envFrom"},
		{"a host port", func(d *appsv1.Deployment) { ctr(d).Ports = []corev1.ContainerPort{{ContainerPort: 22, HostPort: 22}} }, "not ports"},
		{"the host's /etc", func(d *appsv1.Deployment) { spec(d).Volumes = append(spec(d).Volumes, hostPath("etc", "/etc")) }, volumes},
		{"another claim's pipe directory", func(d *appsv1.Deployment) {
			spec(d).Volumes[0] = hostPath("pipe", filepath.Join(filepath.Dir(filepath.Dir(spec(d).Volumes[0].HostPath.Path)), "other-claim", "pipe"))
		}, "may only be host paths (type Directory) <plugin data directory>/mps/" + uid},
		{"a directory outside the plugin's", func(d *appsv1.Deployment) { spec(d).Volumes[1] = hostPath("log", "/var/log/mps/"+uid+"/log") }, volumes},
		{"a host path made if missing", func(d *appsv1.Deployment) {
			spec(d).Volumes[0].HostPath.Type = ptr.To(corev1.HostPathDirectoryOrCreate)
		}, volumes},
		{"another driver root", func(d *appsv1.Deployment) {
			spec(d).Volumes = append(spec(d).Volumes, hostPath("driver-root", "/var/lib/docker"))
		}, "driver-root, a driver root of the chart's pools"},
		{"a Secret volume", func(d *appsv1.Deployment) {
			spec(d).Volumes = append(spec(d).Volumes, corev1.Volume{Name: "pipe", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "gpudra-webhook-cert"}}})
		}, volumes},
		{"the pipe directory over the driver's libraries", func(d *appsv1.Deployment) {
			mount(d, "pipe").MountPath = "/driver-root/usr/lib64"
		}, mounts},
		{"the log directory over the binary", func(d *appsv1.Deployment) {
			mount(d, "log").MountPath = "/usr/bin"
		}, mounts},
		{"a second mount of the pipe directory", func(d *appsv1.Deployment) {
			ctr(d).VolumeMounts = append(ctr(d).VolumeMounts, corev1.VolumeMount{Name: "pipe", MountPath: "/etc/ld.so.preload.d"})
		}, mounts},
		{"a sub-path", func(d *appsv1.Deployment) { mount(d, "shm").SubPath = "x" }, mounts},
		{"a sub-path from the environment", func(d *appsv1.Deployment) { mount(d, "shm").SubPathExpr = "$(HOME)" }, mounts},
		{"mount propagation", func(d *appsv1.Deployment) {
			ctr(d).VolumeMounts[0].MountPropagation = ptr.To(corev1.MountPropagationBidirectional)
		}, mounts},
		{"many replicas", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](50) }, "at most 1 replica"},
		{"privileged without a driver root", func(d *appsv1.Deployment) {
			ctr(d).SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			ctr(d).Env = nil
			spec(d).Volumes = slices.DeleteFunc(spec(d).Volumes, func(v corev1.Volume) bool { return v.Name == "driver-root" })
			ctr(d).VolumeMounts = slices.DeleteFunc(ctr(d).VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "driver-root" })
		}, security},
		{"capabilities added", func(d *appsv1.Deployment) {
			ctr(d).SecurityContext.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"SYS_ADMIN"}}
		}, security},
		{"a writable root file system", func(d *appsv1.Deployment) { ctr(d).SecurityContext.ReadOnlyRootFilesystem = ptr.To(false) }, security},
		{"another user", func(d *appsv1.Deployment) { ctr(d).SecurityContext.RunAsUser = ptr.To[int64](0) }, security},
	}
	if privileged {
		cases = append(cases,
			refusal{"the driver root writable", func(d *appsv1.Deployment) { mount(d, "driver-root").ReadOnly = false }, mounts},
			refusal{"the driver root elsewhere", func(d *appsv1.Deployment) { mount(d, "driver-root").MountPath = "/usr/lib" }, mounts},
			refusal{"an extra library directory", func(d *appsv1.Deployment) {
				ctr(d).Env[0].Value = "/tmp/nvidia-mps:" + ctr(d).Env[0].Value
			}, env},
		)
	} else {
		cases = append(cases,
			refusal{"privilege escalation", func(d *appsv1.Deployment) { ctr(d).SecurityContext.AllowPrivilegeEscalation = nil }, security},
			refusal{"a library path without the driver", func(d *appsv1.Deployment) {
				ctr(d).Env = []corev1.EnvVar{{Name: "LD_LIBRARY_PATH", Value: "/driver-root/usr/lib64"}}
			}, env},
		)
	}
	return cases
}

// TestAdmissionPoliciesCompile: the API server accepts every admission policy the chart
// renders, for every value set (its CEL compiles as a new policy's must).
func TestAdmissionPoliciesCompile(t *testing.T) {
	for name, sets := range valueSets {
		for _, o := range render(t, sets...).all("ValidatingAdmissionPolicy") {
			p := o.(*admissionv1.ValidatingAdmissionPolicy)
			if errs := compileErrors(t, p); len(errs) > 0 {
				t.Errorf("%s: policy %s would be refused:\n%s", name, p.Name, strings.Join(errs, "\n"))
			}
		}
	}
}
