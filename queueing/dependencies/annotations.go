package dependencies

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// RunAfterAnnotation names the jobs, in the job's namespace, that must succeed
	// before it is admitted: comma-separated, each a name or kind/name (job, jobset).
	RunAfterAnnotation = "gpudra.dev/run-after"
	// FailurePolicyAnnotation says what a failed dependency does to the job: fail (the
	// default: its Workload is deactivated, it never runs) or run (it runs anyway).
	FailurePolicyAnnotation = "gpudra.dev/run-after-failure"
	// Gate is gpudra's entry in Kueue's admission gates of a waiting job.
	Gate = "gpudra.dev/run-after"
	// AdmissionGatedBy is Kueue's annotation: while it names a gate, Kueue reserves no
	// quota for the job's Workload.
	AdmissionGatedBy = "kueue.x-k8s.io/admission-gated-by"
	// QueueNameLabel is the label that puts a job into a Kueue LocalQueue.
	QueueNameLabel = "kueue.x-k8s.io/queue-name"
)

// Kind is a kind of job a dependency can be.
type Kind string

const (
	// KindJob is a batch/v1 Job (a name without a kind is one).
	KindJob Kind = "job"
	// KindJobSet is a jobset.x-k8s.io JobSet.
	KindJobSet Kind = "jobset"
)

// Dependency is one job a job runs after.
type Dependency struct {
	Kind Kind   `json:"kind"`
	Name string `json:"name"`
}

// String is the dependency as written in the annotation: the name alone for a Job.
func (d Dependency) String() string {
	if d.Kind == KindJob {
		return d.Name
	}
	return string(d.Kind) + "/" + d.Name
}

// Policy is what a failed dependency does to the job that runs after it.
type Policy string

const (
	// PolicyFail keeps the job from running: its Workload is deactivated.
	PolicyFail Policy = "fail"
	// PolicyRun runs the job anyway once every dependency has finished.
	PolicyRun Policy = "run"
)

const acceptedRunAfter = "comma-separated names of jobs in the job's namespace, each a name (a batch/v1 Job) or job/<name> or jobset/<name>"

// ParseRunAfter parses a gpudra.dev/run-after value strictly: no empty entries, no
// duplicates, known kinds and valid object names.
func ParseRunAfter(value string) ([]Dependency, error) {
	if strings.TrimSpace(value) == "" {
		return nil, fmt.Errorf("annotation %s is empty: want %s", RunAfterAnnotation, acceptedRunAfter)
	}
	var deps []Dependency
	for _, item := range strings.Split(value, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("annotation %s=%q has an empty entry: want %s", RunAfterAnnotation, value, acceptedRunAfter)
		}
		d := Dependency{Kind: KindJob, Name: item}
		if kind, name, ok := strings.Cut(item, "/"); ok {
			d = Dependency{Kind: Kind(strings.ToLower(kind)), Name: name}
			if d.Kind != KindJob && d.Kind != KindJobSet {
				return nil, fmt.Errorf("annotation %s: %q has kind %q: accepted kinds are job and jobset (%s)", RunAfterAnnotation, item, kind, acceptedRunAfter)
			}
		}
		if errs := validation.IsDNS1123Subdomain(d.Name); len(errs) > 0 {
			return nil, fmt.Errorf("annotation %s: %q is not an object name (%s): want %s", RunAfterAnnotation, item, strings.Join(errs, "; "), acceptedRunAfter)
		}
		if slices.Contains(deps, d) {
			return nil, fmt.Errorf("annotation %s: %q is named twice", RunAfterAnnotation, d)
		}
		deps = append(deps, d)
	}
	return deps, nil
}

// ParsePolicy parses gpudra.dev/run-after-failure; empty is fail.
func ParsePolicy(value string) (Policy, error) {
	switch Policy(value) {
	case "", PolicyFail:
		return PolicyFail, nil
	case PolicyRun:
		return PolicyRun, nil
	}
	return "", fmt.Errorf("annotation %s=%q: accepted values are fail (the default) and run", FailurePolicyAnnotation, value)
}

// Spec is what a job's annotations ask for.
type Spec struct {
	After  []Dependency
	Policy Policy
}

// SpecOf parses a job's dependency annotations; ok is false when it has none.
func SpecOf(annotations map[string]string) (spec Spec, ok bool, err error) {
	value, ok := annotations[RunAfterAnnotation]
	if !ok {
		if _, has := annotations[FailurePolicyAnnotation]; has {
			return Spec{}, false, fmt.Errorf("annotation %s without %s: the policy applies to a job that runs after others", FailurePolicyAnnotation, RunAfterAnnotation)
		}
		return Spec{}, false, nil
	}
	if spec.After, err = ParseRunAfter(value); err != nil {
		return Spec{}, true, err
	}
	if spec.Policy, err = ParsePolicy(annotations[FailurePolicyAnnotation]); err != nil {
		return Spec{}, true, err
	}
	return spec, true, nil
}

// gates are the entries of Kueue's admission-gated-by value.
func gates(value string) []string {
	var out []string
	for _, g := range strings.Split(value, ",") {
		if g = strings.TrimSpace(g); g != "" {
			out = append(out, g)
		}
	}
	return out
}

// HasGate says whether annotations carry gpudra's admission gate.
func HasGate(annotations map[string]string) bool {
	return slices.Contains(gates(annotations[AdmissionGatedBy]), Gate)
}

// withGate is the admission-gated-by value with gpudra's gate appended (kept once).
func withGate(value string) string {
	g := gates(value)
	if !slices.Contains(g, Gate) {
		g = append(g, Gate)
	}
	return strings.Join(g, ",")
}

// withoutGate is the admission-gated-by value without gpudra's gate; empty when no other
// gate is left.
func withoutGate(value string) string {
	return strings.Join(slices.DeleteFunc(gates(value), func(g string) bool { return g == Gate }), ",")
}
