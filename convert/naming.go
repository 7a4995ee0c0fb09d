package convert

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Kubernetes' limits on the names the converter writes.
const (
	// maxObjectName is the length of a DNS subdomain, the limit on an object's name.
	maxObjectName = 253
	// maxLabel is the length of a DNS label, the limit on a request's name.
	maxLabel = 63
	// hashLen is the length of the hash that stands for the cut part of a long name.
	hashLen = 8
)

// dnsLabel turns s into lower-case letters, digits and '-' that start and end with a
// letter or digit, at most max long. A longer name keeps its start and ends in a hash of
// the whole of s, so that names cut from different inputs stay different and the same
// input always gives the same name. An s with no letter or digit gives a hash.
func dnsLabel(s string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteRune('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) <= max && out != "" {
		return out
	}
	sum := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(sum[:])[:hashLen]
	keep := max - hashLen - 1
	if keep < 1 {
		return h[:min(max, hashLen)]
	}
	if len(out) > keep {
		out = out[:keep]
	}
	if out = strings.Trim(out, "-"); out == "" {
		return h
	}
	return out + "-" + h
}

// namer hands out names that are not taken, within a length limit: the name itself, or
// the name with -2, -3, ... appended. It remembers where each name's count stopped, so
// n names that all want the same one cost O(n) look-ups in all, not O(n²).
type namer struct {
	taken map[string]bool
	next  map[string]int
	// probes counts the look-ups of taken names, for tests of the cost.
	probes int
}

func newNamer() *namer { return &namer{taken: map[string]bool{}, next: map[string]int{}} }

// take marks name as taken (a name of the input).
func (n *namer) take(name string) { n.taken[name] = true }

// unique returns base, or base with a number appended that makes it free, cut to fit in
// max, and marks it taken. scope is prepended to every name looked up (kind/namespace/),
// and not part of the result.
func (n *namer) unique(scope, base string, max int) string {
	n.probes++
	if !n.taken[scope+base] {
		n.taken[scope+base] = true
		return base
	}
	k := n.next[scope+base]
	if k < 2 {
		k = 2
	}
	for ; ; k++ {
		n.probes++
		suffix := "-" + strconv.Itoa(k)
		cand := base
		if len(cand)+len(suffix) > max {
			cand = strings.TrimRight(cand[:max-len(suffix)], "-")
		}
		cand += suffix
		if !n.taken[scope+cand] {
			n.next[scope+base] = k + 1
			n.taken[scope+cand] = true
			return cand
		}
	}
}
