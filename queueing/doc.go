// Package queueing is gpudra's Kueue integration: GPU quotas, gang admission and
// DRA-aware rack placement. Subpackages hold the pure decisions (gang) apart from the
// controllers that talk to the API server.
package queueing
