package kubeletplugin

import (
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// checkClaimUID accepts the UIDs Kubernetes gives claims, which name the claim's CDI
// spec, its MPS and HAMi-core directories and its MPS daemon's Deployment: a DNS-1123
// label (lowercase letters, digits and '-', beginning and ending with a letter or digit,
// at most 63 characters), which every UUID the API server assigns is. It refuses what
// would name another path ("", ".", "..", anything with a '/').
func checkClaimUID(uid types.UID) error {
	if errs := validation.IsDNS1123Label(string(uid)); len(errs) > 0 {
		return fmt.Errorf("claim UID %q: must be a UUID as Kubernetes assigns, or another DNS-1123 label (lowercase letters, digits and '-', at most 63 characters): %s",
			uid, strings.Join(errs, "; "))
	}
	return nil
}

// claimLocks orders the operations on one claim, which the kubelet plugin library's
// serialisation of every call used to: its prepare with the wait for its MPS control
// daemon, its unprepare with the wait for the daemon to stop, and a background repair.
// Operations on different claims go on side by side and meet only in the node's lock,
// which each takes after its claim's.
type claimLocks struct {
	mu   sync.Mutex
	held map[types.UID]*claimLock
}

type claimLock struct {
	mu    sync.Mutex
	users int // holders and waiters
}

// lock takes the claim's lock and returns its release.
func (c *claimLocks) lock(uid types.UID) (unlock func()) {
	c.mu.Lock()
	if c.held == nil {
		c.held = map[types.UID]*claimLock{}
	}
	l := c.held[uid]
	if l == nil {
		l = &claimLock{}
		c.held[uid] = l
	}
	l.users++
	c.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		c.mu.Lock()
		if l.users--; l.users == 0 {
			delete(c.held, uid)
		}
		c.mu.Unlock()
	}
}
