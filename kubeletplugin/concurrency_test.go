package kubeletplugin_test

import (
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

func TestConcurrentPrepareAndUnprepareKeepTheCheckpointConsistent(t *testing.T) {
	const claims = 1000
	n := newNode(t, "dgx-h100")
	d := n.newDriver(nil)
	all := make([]*resourceapi.ResourceClaim, claims)
	for k := range all {
		all[k] = n.allocate(shareClaim("256Mi", "0", ""))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*claims)
	for _, c := range all {
		wg.Go(func() {
			if _, err := prepare(t, d, c); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	if got := n.specCount(); got != claims {
		t.Errorf("%d CDI specs after preparing %d claims", got, claims)
	}
	if got := checkpointClaims(t, n); got != claims {
		t.Errorf("%d checkpoint entries after preparing %d claims", got, claims)
	}
	// The journal outgrew the checkpoint file while claims were prepared concurrently:
	// compacted at least once after the two compactions of the plugin's start.
	if _, gen, err := plugin.ReadCheckpoint(n.cfg.CheckpointDir); err != nil || gen < 3 {
		t.Errorf("checkpoint generation %d (%v): the journal was never compacted", gen, err)
	}
	for _, c := range all {
		wg.Go(func() {
			if err := unprepare(t, d, c); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := n.specCount(); got != 0 {
		t.Errorf("%d CDI specs left", got)
	}
	if got := checkpointClaims(t, n); got != 0 {
		t.Errorf("%d checkpoint entries left", got)
	}
}

// checkpointClaims counts the claims in the checkpoint on disk (with its journal), all
// of them PrepareCompleted.
func checkpointClaims(t *testing.T, n *node) int {
	t.Helper()
	claims, _, err := plugin.ReadCheckpoint(n.cfg.CheckpointDir)
	if err != nil {
		t.Fatal(err)
	}
	for uid, st := range claims {
		if st != plugin.PrepareCompleted {
			t.Errorf("claim %s is %s in the checkpoint", uid, st)
		}
	}
	return len(claims)
}
