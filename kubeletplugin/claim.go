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
type claimLocks = keyedLocks[types.UID]

// keyedLocks is a lock for each key, held by one holder at a time. A key's lock exists
// while it is held or waited for: the memory it takes is bounded by the holders and
// waiters, not by the keys ever locked.
type keyedLocks[K comparable] struct {
	mu   sync.Mutex
	held map[K]*keyedLock
}

type keyedLock struct {
	mu    sync.Mutex
	users int // holders and waiters
}

// lock takes key's lock and returns its release.
func (c *keyedLocks[K]) lock(key K) (unlock func()) {
	c.mu.Lock()
	if c.held == nil {
		c.held = map[K]*keyedLock{}
	}
	l := c.held[key]
	if l == nil {
		l = &keyedLock{}
		c.held[key] = l
	}
	l.users++
	c.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		c.mu.Lock()
		if l.users--; l.users == 0 {
			delete(c.held, key)
		}
		c.mu.Unlock()
	}
}
