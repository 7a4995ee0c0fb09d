package lab

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/gpudra/gpudra/queueing/admission"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The demo's queue step submits two jobs to the sample queues of deployments/kueue: a gang
// that the gpudra check places in one rack, and a job larger than its team can ever hold.
const (
	// DemoGangJob is the demo's gang, in team-a's LocalQueue training.
	DemoGangJob = "demo-gang"
	// DemoTooBigJob is the demo's job that asks more GPUs than team-b can hold.
	DemoTooBigJob = "demo-too-big"
	// DemoJobsFile, in deployments/kueue, holds the two jobs and their claim templates.
	DemoJobsFile = "30-demo-gang.yaml"
	// demoCheck is the AdmissionCheck of deployments/kueue/00-admission-check.yaml.
	demoCheck = "gpudra-topology"
)

// demoQueueFiles are the samples of deployments/kueue the demo applies before its jobs: the
// gpudra check, then the flavor, ClusterQueues, namespaces, LocalQueues and priorities.
var demoQueueFiles = []string{"00-admission-check.yaml", "10-queues.yaml"}

var (
	jobsGVR      = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	workloadsGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
)

// manifestApplier applies manifests (Applier does, with server-side apply).
type manifestApplier interface {
	Apply(ctx context.Context, objs ...*unstructured.Unstructured) error
}

// demoQueuesStep applies the sample queues in dir (deployments/kueue) and submits the jobs of
// DemoJobsFile. It waits until Kueue admits the gang and its pods run, prints where each pod
// went, and fails when they are not all in one rack; then it waits for Kueue's answer to the
// job too big for team-b and prints why it waits (the job is left pending). Jobs an earlier
// demo left are deleted and submitted again. Without Kueue it says why it does nothing.
func demoQueuesStep(ctx context.Context, out io.Writer, cs kubernetes.Interface, dyn dynamic.Interface, ap manifestApplier, s *State, dir string, timeout time.Duration) error {
	switch {
	case !s.Kueue:
		fmt.Fprintln(out, "\nNo Kueue queues in this demo: the lab runs without Kueue (lab file kueue.enabled: false).")
		return nil
	case s.ControllerReplicas == 0 && s.Component(controllerComponent) == nil:
		fmt.Fprintln(out, "\nNo Kueue queues in this demo: no gpudra-controller runs to answer the gpudra-topology admission check.")
		return nil
	case dir == "":
		fmt.Fprintln(out, "\nNo Kueue queues in this demo: deployments/kueue was not found (run the demo from the gpudra repository).")
		return nil
	}
	var queues []*unstructured.Unstructured
	for _, f := range demoQueueFiles {
		objs, err := ReadManifests(filepath.Join(dir, f))
		if err != nil {
			return fmt.Errorf("read the sample queues: %w", err)
		}
		queues = append(queues, objs...)
	}
	jobsFile := filepath.Join(dir, DemoJobsFile)
	demo, err := ReadManifests(jobsFile)
	if err != nil {
		return fmt.Errorf("read the demo's jobs: %w", err)
	}
	var jobs, templates []*unstructured.Unstructured
	for _, o := range demo {
		if o.GetKind() == "Job" {
			jobs = append(jobs, o)
		} else {
			templates = append(templates, o)
		}
	}
	gang, tooBig := findJob(jobs, DemoGangJob), findJob(jobs, DemoTooBigJob)
	if gang == nil || tooBig == nil {
		return fmt.Errorf("%s: want Jobs %s and %s", jobsFile, DemoGangJob, DemoTooBigJob)
	}

	fmt.Fprintf(out, "\nKueue: applying the sample queues in %s (%s):\n", dir, strings.Join(demoQueueFiles, ", "))
	for _, o := range queues {
		fmt.Fprintf(out, "  %s %s%s\n", strings.ToLower(o.GetKind()), objectName(o), describeClusterQueue(o))
	}
	if err := ap.Apply(ctx, queues...); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nSubmitting %s:\n", jobsFile)
	for _, o := range templates {
		fmt.Fprintf(out, "  %s %s\n", strings.ToLower(o.GetKind()), objectName(o))
	}
	if err := ap.Apply(ctx, templates...); err != nil {
		return err
	}
	uids := map[string]types.UID{}
	for _, j := range jobs {
		uid, replaced, err := submitJob(ctx, cs, dyn, j, timeout)
		if err != nil {
			return err
		}
		uids[j.GetName()] = uid
		note := ""
		if replaced {
			note = "; the earlier demo's job deleted first"
		}
		fmt.Fprintf(out, "  job %s in LocalQueue %s: %s%s\n", objectName(j), j.GetLabels()[kueueQueueLabel], describeJob(j, templates), note)
	}

	pods := jobPods(gang)
	fmt.Fprintf(out, "\nWaiting for Kueue to admit %s (the gpudra check plans the whole gang) and its %d pods to run...\n", DemoGangJob, pods)
	wl, rows, err := waitGang(ctx, cs, dyn, gang.GetNamespace(), uids[DemoGangJob], pods, timeout)
	if err != nil {
		return fmt.Errorf("job %s: %w", objectName(gang), err)
	}
	WriteGangTable(out, rows)
	if _, err := oneRack(rows); err != nil {
		return fmt.Errorf("gang %s was admitted, but %w", DemoGangJob, err)
	}
	_, msg, _ := admissionCheckMessage(wl, demoCheck)
	fmt.Fprintf(out, "gang %s admitted by the gpudra check: %s\n", DemoGangJob, msg)

	why, err := waitQuotaRefused(ctx, cs, dyn, tooBig.GetNamespace(), uids[DemoTooBigJob], timeout)
	if err != nil {
		return fmt.Errorf("job %s: %w", objectName(tooBig), err)
	}
	fmt.Fprintf(out, "\n%s waits: %s\n", DemoTooBigJob, why)
	fmt.Fprintf(out, "  (left pending: kubectl get workloads -n %s)\n", tooBig.GetNamespace())
	return nil
}

// kueueQueueLabel names a job's LocalQueue.
const kueueQueueLabel = "kueue.x-k8s.io/queue-name"

func findJob(jobs []*unstructured.Unstructured, name string) *unstructured.Unstructured {
	for _, j := range jobs {
		if j.GetName() == name {
			return j
		}
	}
	return nil
}

// jobPods is a Job's parallelism (1 when unset).
func jobPods(job *unstructured.Unstructured) int {
	p, found, _ := unstructured.NestedInt64(job.Object, "spec", "parallelism")
	if !found {
		return 1
	}
	return int(p)
}

// podGPUs counts the whole GPUs each pod of job asks for through the claim templates of
// templates (requests of DeviceClass gpu.gpudra.dev; count 1 when unset).
func podGPUs(job *unstructured.Unstructured, templates []*unstructured.Unstructured) int {
	claims, _, _ := unstructured.NestedSlice(job.Object, "spec", "template", "spec", "resourceClaims")
	n := 0
	for _, c := range claims {
		name, _, _ := unstructured.NestedString(c.(map[string]any), "resourceClaimTemplateName")
		for _, t := range templates {
			if t.GetKind() != "ResourceClaimTemplate" || t.GetName() != name || t.GetNamespace() != job.GetNamespace() {
				continue
			}
			reqs, _, _ := unstructured.NestedSlice(t.Object, "spec", "spec", "devices", "requests")
			for _, r := range reqs {
				class, _, _ := unstructured.NestedString(r.(map[string]any), "exactly", "deviceClassName")
				if class != api.DeviceClassGPU {
					continue
				}
				count, found, _ := unstructured.NestedInt64(r.(map[string]any), "exactly", "count")
				if !found {
					count = 1
				}
				n += int(count)
			}
		}
	}
	return n
}

// describeClusterQueue says, for a ClusterQueue, how many GPUs its quota of
// gpudra.dev/gpu-percent holds and how many more it may borrow in its cohort; "" for other
// objects.
func describeClusterQueue(o *unstructured.Unstructured) string {
	if o.GetKind() != "ClusterQueue" {
		return ""
	}
	var nominal, borrowing resource.Quantity
	groups, _, _ := unstructured.NestedSlice(o.Object, "spec", "resourceGroups")
	for _, g := range groups {
		flavors, _, _ := unstructured.NestedSlice(g.(map[string]any), "flavors")
		for _, f := range flavors {
			resources, _, _ := unstructured.NestedSlice(f.(map[string]any), "resources")
			for _, r := range resources {
				r := r.(map[string]any)
				if r["name"] != api.QuotaGPUPercent {
					continue
				}
				for field, sum := range map[string]*resource.Quantity{"nominalQuota": &nominal, "borrowingLimit": &borrowing} {
					if v, ok := r[field]; ok {
						if q, err := resource.ParseQuantity(fmt.Sprint(v)); err == nil {
							sum.Add(q)
						}
					}
				}
			}
		}
	}
	if nominal.IsZero() {
		return ""
	}
	d := fmt.Sprintf(": %s GPUs", gpus(nominal))
	if cohort, _, _ := unstructured.NestedString(o.Object, "spec", "cohortName"); cohort != "" && !borrowing.IsZero() {
		d += fmt.Sprintf(", and up to %s more borrowed in cohort %s", gpus(borrowing), cohort)
	}
	return d
}

// gpus writes a quantity of gpudra.dev/gpu-percent in GPUs.
func gpus(q resource.Quantity) string {
	return strconv.FormatFloat(float64(q.MilliValue())/100000, 'f', -1, 64)
}

// describeJob says how many pods and GPUs a job asks for, and where its pods must stay.
func describeJob(job *unstructured.Unstructured, templates []*unstructured.Unstructured) string {
	pods, gpus := jobPods(job), podGPUs(job, templates)
	d := fmt.Sprintf("%d pods × %d GPUs (%d GPUs)", pods, gpus, pods*gpus)
	tmpl, _, _ := unstructured.NestedStringMap(job.Object, "spec", "template", "metadata", "annotations")
	if t := tmpl[api.AnnotationRequiredTopology]; t != "" {
		d += ", all in one " + t
	}
	return d
}

// submitJob creates job. A Job's pod template cannot change, so one of that name that an
// earlier demo left is deleted first, its pods at once (kwok honours grace periods; the old
// pods would hold their GPUs 30 s more), and created again. It returns the new Job's UID
// and whether it replaced one.
func submitJob(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, job *unstructured.Unstructured, timeout time.Duration) (types.UID, bool, error) {
	ns, name := job.GetNamespace(), job.GetName()
	jobs := dyn.Resource(jobsGVR).Namespace(ns)
	old, err := jobs.Get(ctx, name, metav1.GetOptions{})
	replaced := err == nil
	switch {
	case replaced:
		bg := metav1.DeletePropagationBackground
		if err := jobs.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !isNotFound(err) {
			return "", true, fmt.Errorf("delete the earlier demo's job %s/%s: %w", ns, name, err)
		}
		if err := deleteJobPodsNow(ctx, cs, ns, old.GetUID()); err != nil {
			return "", true, err
		}
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			_, err := jobs.Get(ctx, name, metav1.GetOptions{})
			return isNotFound(err), nil
		}); err != nil {
			return "", true, fmt.Errorf("the earlier demo's job %s/%s is not gone after %s", ns, name, timeout)
		}
	case !isNotFound(err):
		return "", false, err
	}
	created, err := jobs.Create(ctx, job.DeepCopy(), metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil {
		return "", replaced, fmt.Errorf("create job %s/%s: %w", ns, name, err)
	}
	return created.GetUID(), replaced, nil
}

// deleteJobPodsNow deletes the pods of the Job with uid with grace period 0.
func deleteJobPodsNow(ctx context.Context, cs kubernetes.Interface, ns string, uid types.UID) error {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(uid)})
	if err != nil {
		return err
	}
	now := int64(0)
	for _, p := range pods.Items {
		if err := cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &now}); err != nil && !isNotFound(err) {
			return fmt.Errorf("delete pod %s/%s: %w", ns, p.Name, err)
		}
	}
	return nil
}

// jobWorkload is the Kueue Workload of the Job with uid; nil when Kueue has not made it yet.
func jobWorkload(ctx context.Context, dyn dynamic.Interface, ns string, uid types.UID) (*kueue.Workload, error) {
	list, err := dyn.Resource(workloadsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, u := range list.Items {
		for _, o := range u.GetOwnerReferences() {
			if o.Kind == "Job" && o.UID == uid {
				var wl kueue.Workload
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &wl); err != nil {
					return nil, fmt.Errorf("workload %s/%s: %w", ns, u.GetName(), err)
				}
				return &wl, nil
			}
		}
	}
	return nil, nil
}

// waitGang waits until the Workload of the Job with uid is admitted and its pods, want of
// them, run with their claims allocated. On timeout the error says what it saw last.
func waitGang(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, ns string, uid types.UID, want int, timeout time.Duration) (*kueue.Workload, []GangRow, error) {
	var (
		wl   *kueue.Workload
		rows []GangRow
		why  = "no Kueue Workload yet"
	)
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		w, err := jobWorkload(ctx, dyn, ns, uid)
		if err != nil || w == nil {
			if err != nil {
				why = err.Error()
			}
			return false, nil
		}
		wl = w
		if !apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted) {
			why = "workload " + wl.Name + " is not admitted: " + workloadWaits(wl)
			return false, nil
		}
		rows, why = gangPods(ctx, cs, ns, uid, want)
		return why == "", nil
	})
	if err != nil {
		return nil, rows, fmt.Errorf("not admitted with all %d pods running after %s: %s", want, timeout, why)
	}
	return wl, rows, nil
}

// gangPods reads the running pods of the Job with uid, their nodes and claims; why says what
// is missing when fewer than want run or a claim is not allocated yet.
func gangPods(ctx context.Context, cs kubernetes.Interface, ns string, uid types.UID, want int) (rows []GangRow, why string) {
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(uid)})
	if err != nil {
		return nil, err.Error()
	}
	var running []corev1.Pod
	var waiting []string
	for _, p := range list.Items {
		switch {
		case p.DeletionTimestamp != nil:
		case p.Status.Phase == corev1.PodRunning:
			running = append(running, p)
		default:
			waiting = append(waiting, p.Name+" "+podWaits(&p))
		}
	}
	if len(running) < want {
		sort.Strings(waiting)
		why = fmt.Sprintf("%d of %d pods run", len(running), want)
		if len(waiting) > 0 {
			why += "; " + strings.Join(waiting, "; ")
		}
		return nil, why
	}
	var nodes []corev1.Node
	var claims []resourcev1.ResourceClaim
	seen := map[string]bool{}
	for _, p := range running {
		if !seen[p.Spec.NodeName] {
			seen[p.Spec.NodeName] = true
			n, err := cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				return nil, err.Error()
			}
			nodes = append(nodes, *n)
		}
		for _, st := range p.Status.ResourceClaimStatuses {
			if st.ResourceClaimName == nil {
				continue
			}
			c, err := cs.ResourceV1().ResourceClaims(ns).Get(ctx, *st.ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				return nil, err.Error()
			}
			claims = append(claims, *c)
		}
	}
	rows = gangRows(running, nodes, claims)
	for _, r := range rows {
		if len(r.GPUs) == 0 {
			return rows, "pod " + r.Pod + " runs without an allocated claim"
		}
	}
	return rows, ""
}

// podWaits says why a pod does not run: its scheduling gates, or the scheduler's condition.
func podWaits(p *corev1.Pod) string {
	if len(p.Spec.SchedulingGates) > 0 {
		var gates []string
		for _, g := range p.Spec.SchedulingGates {
			gates = append(gates, g.Name)
		}
		return "is held by scheduling gate " + strings.Join(gates, ", ")
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			return "is not scheduled: " + c.Reason + ": " + c.Message
		}
	}
	return "is " + string(p.Status.Phase)
}

// GangRow is one pod of a gang: its node, the node's rack and the devices of its claims.
type GangRow struct {
	Pod  string // namespace/name
	Node string
	Rack string // the node's topology.gpudra.dev/rack label
	GPUs []string
}

// gangRows lists pods (by name) with their node's rack and the devices allocated to their
// claims, as far as nodes and claims hold them.
func gangRows(pods []corev1.Pod, nodes []corev1.Node, claims []resourcev1.ResourceClaim) []GangRow {
	rack := map[string]string{}
	for _, n := range nodes {
		rack[n.Name] = n.Labels[api.LabelRack]
	}
	byName := map[string]resourcev1.ResourceClaim{}
	for _, c := range claims {
		byName[c.Namespace+"/"+c.Name] = c
	}
	var rows []GangRow
	for _, p := range pods {
		r := GangRow{Pod: p.Namespace + "/" + p.Name, Node: p.Spec.NodeName, Rack: rack[p.Spec.NodeName]}
		for _, st := range p.Status.ResourceClaimStatuses {
			if st.ResourceClaimName == nil {
				continue
			}
			if c, ok := byName[p.Namespace+"/"+*st.ResourceClaimName]; ok {
				r.GPUs = append(r.GPUs, claimStatus(c).Devices...)
			}
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Pod < rows[j].Pod })
	return rows
}

// WriteGangTable prints a gang as a table: pod → node → rack → GPUs.
func WriteGangTable(w io.Writer, rows []GangRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tNODE\tRACK\tGPUS")
	for _, r := range rows {
		rack := r.Rack
		if rack == "" {
			rack = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Pod, r.Node, rack, strings.Join(r.GPUs, ","))
	}
	tw.Flush()
}

// oneRack returns the rack all of a gang's pods run in, or an error naming the racks they
// span (or the pod whose node has no rack label).
func oneRack(rows []GangRow) (string, error) {
	if len(rows) == 0 {
		return "", fmt.Errorf("no pod runs")
	}
	pods := map[string][]string{}
	for _, r := range rows {
		if r.Rack == "" {
			return "", fmt.Errorf("pod %s runs on node %s, which has no %s label", r.Pod, r.Node, api.LabelRack)
		}
		pods[r.Rack] = append(pods[r.Rack], r.Pod)
	}
	if len(pods) == 1 {
		return rows[0].Rack, nil
	}
	var racks []string
	for rack, ps := range pods {
		racks = append(racks, fmt.Sprintf("%s (%s)", rack, strings.Join(ps, ", ")))
	}
	sort.Strings(racks)
	return "", fmt.Errorf("its pods span %d racks: %s", len(pods), strings.Join(racks, "; "))
}

// quotaRefusal is Kueue's message on a Workload it reserved no quota for (its QuotaReserved
// condition False with a message); false when quota is reserved or Kueue has not said why.
func quotaRefusal(wl *kueue.Workload) (string, bool) {
	c := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
	if c == nil || c.Status != metav1.ConditionFalse || c.Message == "" {
		return "", false
	}
	return c.Message, true
}

// admissionCheckMessage is the state and message of the named admission check on a Workload.
func admissionCheckMessage(wl *kueue.Workload, check string) (kueue.CheckState, string, bool) {
	for _, s := range wl.Status.AdmissionChecks {
		if string(s.Name) == check {
			return s.State, s.Message, true
		}
	}
	return "", "", false
}

// workloadWaits says why a Workload is not admitted yet: Kueue's quota answer, else the
// gpudra check's state.
func workloadWaits(wl *kueue.Workload) string {
	if !apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) {
		if msg, ok := quotaRefusal(wl); ok {
			return "Kueue reserved no quota: " + msg
		}
		return "Kueue has not reserved quota yet"
	}
	state, msg, ok := admissionCheckMessage(wl, demoCheck)
	if !ok {
		return "admission check " + demoCheck + " has no state yet"
	}
	if msg == "" {
		return fmt.Sprintf("admission check %s: %s", demoCheck, state)
	}
	return fmt.Sprintf("admission check %s: %s: %s", demoCheck, state, msg)
}

// waitQuotaRefused waits until Kueue says it reserves no quota for the Job with uid for lack
// of GPU quota (its message names gpudra.dev/gpu-percent) and returns Kueue's message: from
// the Workload's QuotaReserved condition or, where Kueue v0.19 lost that condition to a
// concurrent status write of its own, from the Pending warning it recorded on the Workload.
// It fails at once when Kueue reserves quota for it.
func waitQuotaRefused(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, ns string, uid types.UID, timeout time.Duration) (string, error) {
	why, last := "", "no Kueue Workload yet"
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		wl, err := jobWorkload(ctx, dyn, ns, uid)
		if err != nil || wl == nil {
			if err != nil {
				last = err.Error()
			}
			return false, nil
		}
		if apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved) {
			return false, fmt.Errorf("Kueue reserved quota for workload %s, which asks more GPUs than its ClusterQueue can hold", wl.Name)
		}
		msg, ok := quotaRefusal(wl)
		if ok && strings.Contains(msg, api.QuotaGPUPercent) {
			why = msg
			return true, nil
		}
		if c := admission.KueueEventReason(ctx, cs, wl); c != nil && strings.Contains(c.Message, api.QuotaGPUPercent) {
			why = c.Message
			return true, nil
		}
		last = "workload " + wl.Name + ": " + workloadWaits(wl)
		return false, nil
	})
	if err != nil && !wait.Interrupted(err) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("no answer from Kueue naming %s after %s: %s", api.QuotaGPUPercent, timeout, last)
	}
	return why, nil
}
