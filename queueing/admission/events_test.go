package admission

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// eventLog records Events as "namespace/name type reason: note".
type eventLog struct {
	mu  sync.Mutex
	got []string
}

var _ events.EventRecorder = (*eventLog)(nil)

func (l *eventLog) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	m, err := meta.Accessor(regarding)
	if err != nil {
		panic(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprintf("%s/%s %s %s: %s", m.GetNamespace(), m.GetName(), eventtype, reason, fmt.Sprintf(note, args...)))
}

func (l *eventLog) events() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

func TestDecisionsAreEventsOnTheWorkload(t *testing.T) {
	rec := &eventLog{}
	r := newReconciler(lab(t, job("train", "dp0", "dp1"), job("next", "dp0")))
	r.Recorder = rec
	if got := reconcile(t, r, "train"); got.State != kueue.CheckStateReady {
		t.Fatalf("first: %s %s", got.State, got.Message)
	}
	retry := reconcile(t, r, "next")
	if retry.State != kueue.CheckStateRetry {
		t.Fatalf("second: %s %s", retry.State, retry.Message)
	}
	got := rec.events()
	if len(got) != 2 {
		t.Fatalf("events %q, want one per decision", got)
	}
	if !strings.HasPrefix(got[0], "team-a/train Normal GangPlaced: ") {
		t.Errorf("first event %q, want Normal GangPlaced on team-a/train", got[0])
	}
	if want := "team-a/next Warning GangDoesNotFit: " + retry.Message; got[1] != want {
		t.Errorf("second event %q, want %q (the check's message)", got[1], want)
	}
}

func TestPinnedPodGetsAnEventNamingItsNode(t *testing.T) {
	rec := &eventLog{}
	c := lab(t, gatedPod("train-2", "r1-n1,r1-n2,r2-n1,r2-n2", 2))
	if _, err := pinWith(t, &PodPinner{Client: c, Recorder: rec}, c, "train-2"); err != nil {
		t.Fatal(err)
	}
	got := rec.events()
	if len(got) != 1 || !strings.HasPrefix(got[0], "team-a/train-2 Normal PinnedToPlannedNode: pinned to node r2-n1: slot 2 of the 4 nodes") {
		t.Errorf("events %q, want one Normal PinnedToPlannedNode naming r2-n1 and slot 2", got)
	}
}
