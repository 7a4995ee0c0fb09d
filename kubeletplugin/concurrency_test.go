package kubeletplugin_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	plugin "github.com/gpudra/gpudra/kubeletplugin"
)

func TestConcurrentPrepareAndUnprepareKeepTheCheckpointConsistent(t *testing.T) {
	const claims = 200
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

func checkpointClaims(t *testing.T, n *node) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(n.cfg.CheckpointDir, plugin.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Data struct {
			Claims map[string]json.RawMessage `json:"claims"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	return len(f.Data.Claims)
}
