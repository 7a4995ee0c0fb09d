package largefirst

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

var created = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// waiting is a job the webhook looked at, created at created, suspended by Kueue.
func waiting(name, class string) *batchv1.Job {
	j := job(name, 1)
	j.CreationTimestamp = metav1.NewTime(created)
	j.Annotations = map[string]string{DemandAnnotation: "1"}
	if class != "" {
		j.Labels[PriorityClassLabel] = class
	}
	j.Spec.Suspend = ptr.To(true)
	return j
}

func TestAgeingLiftsJobsThatWaitedTooLong(t *testing.T) {
	const maxWait = time.Hour
	running := waiting("running", "")
	running.Spec.Suspend = ptr.To(false)
	notLooked := waiting("not-looked-at", "")
	delete(notLooked.Annotations, DemandAnnotation)
	podPriority := waiting("pod-priority", "")
	podPriority.Spec.Template.Spec.PriorityClassName = "urgent"
	for _, tc := range []struct {
		name      string
		job       *batchv1.Job
		waited    time.Duration
		wantClass string
		wantAfter time.Duration
	}{
		{name: "a small job that waited less is looked at again when it will have", job: waiting("small", ""), waited: 20 * time.Minute, wantAfter: 40 * time.Minute},
		{name: "a small job that waited long enough gets the top band", job: waiting("small", ""), waited: maxWait, wantClass: "gpudra-huge"},
		{name: "a job of a lower band is lifted too", job: waiting("gang", "gpudra-large"), waited: 2 * maxWait, wantClass: "gpudra-huge"},
		{name: "a job already in the top band stays", job: waiting("huge", "gpudra-huge"), waited: 2 * maxWait, wantClass: "gpudra-huge"},
		{name: "a class the user set later is left alone", job: waiting("small", "team-urgent"), waited: 2 * maxWait, wantClass: "team-urgent"},
		{name: "a running job is left alone", job: running, waited: 2 * maxWait},
		{name: "a job the webhook did not look at is left alone", job: notLooked, waited: 2 * maxWait},
		{name: "a job whose pods carry a priority is left alone", job: podPriority, waited: 2 * maxWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, tc.job)
			a := &Ageing{Client: c, Bands: bands, MaxWait: maxWait, Now: func() time.Time { return created.Add(tc.waited) }}
			res, err := a.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(tc.job)})
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.wantAfter {
				t.Errorf("looked at again after %s, want %s", res.RequeueAfter, tc.wantAfter)
			}
			var got batchv1.Job
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(tc.job), &got); err != nil {
				t.Fatal(err)
			}
			if class := got.Labels[PriorityClassLabel]; class != tc.wantClass {
				t.Errorf("%s = %q, want %q", PriorityClassLabel, class, tc.wantClass)
			}
		})
	}
}

func TestAgeingForgetsDeletedJobs(t *testing.T) {
	a := &Ageing{Client: newClient(t), Bands: bands, MaxWait: time.Hour}
	if _, err := a.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "gone"}}); err != nil {
		t.Errorf("a deleted job: %v", err)
	}
}
