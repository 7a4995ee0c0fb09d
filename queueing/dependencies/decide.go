package dependencies

import (
	"fmt"
	corev1 "k8s.io/api/core/v1"
	"strings"
)

// Phase is where a dependency stands.
type Phase string

// A dependency's phases, as its job's Events and gpudra explain write them.
const (
	PhaseNotCreated Phase = "not created yet"
	PhaseSuspended  Phase = "Suspended"
	PhaseRunning    Phase = "Running"
	PhaseComplete   Phase = "Complete"
	PhaseFailed     Phase = "Failed"
)

// Status is a dependency and its phase.
type Status struct {
	Dependency
	Phase Phase `json:"phase"`
	// Object is the dependency as read (kind, name, UID and resourceVersion; no UID when it
	// does not exist): what the job's Events name as related.
	Object *corev1.ObjectReference `json:"-"`
}

func (s Status) String() string { return fmt.Sprintf("%s (%s)", s.Dependency, s.Phase) }

// Action is what the controller does with a gated job.
type Action int

const (
	// Wait keeps the gate: a dependency has not finished.
	Wait Action = iota
	// Release removes gpudra's gate: every dependency succeeded (or finished, with
	// policy run).
	Release
	// Fail keeps the job from running: a dependency failed and the policy is fail.
	Fail
)

// Decision is what to do with a gated job, and the note its Event carries.
type Decision struct {
	Action Action
	Note   string
}

// Decide is what a gated job with spec does, its dependencies being in statuses (in the
// annotation's order).
func Decide(spec Spec, statuses []Status) Decision {
	var waiting, failed []string
	for _, s := range statuses {
		switch s.Phase {
		case PhaseComplete:
		case PhaseFailed:
			failed = append(failed, s.Dependency.String())
		default:
			waiting = append(waiting, s.String())
		}
	}
	if len(failed) > 0 && spec.Policy == PolicyFail {
		return Decision{Action: Fail, Note: fmt.Sprintf("dependency %s failed (%s: fail): this job will not run", strings.Join(failed, ", "), FailurePolicyAnnotation)}
	}
	if len(waiting) > 0 {
		return Decision{Action: Wait, Note: "waiting for " + strings.Join(waiting, ", ")}
	}
	all := make([]string, len(statuses))
	for k, s := range statuses {
		all[k] = s.String()
	}
	return Decision{Action: Release, Note: fmt.Sprintf("dependencies finished: %s; admission gate %s removed", strings.Join(all, ", "), Gate)}
}
