package usage

import (
	"testing"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// A claim's usage is written again only when it changed by an amount a reader notices.
func TestChangedIgnoresSmallChanges(t *testing.T) {
	ptr := func(n int) *int { return &n }
	i64 := func(n int64) *int64 { return &n }
	base := api.DeviceUsage{MemoryUsedBytes: i64(1 << 30), MemoryLimitBytes: 4 << 30, SMUtilizationPercent: ptr(20), Processes: 1}
	with := func(f func(*api.DeviceUsage)) []api.DeviceUsage {
		u := base
		f(&u)
		return []api.DeviceUsage{u}
	}
	for _, tc := range []struct {
		name string
		now  []api.DeviceUsage
		want bool
	}{
		{"the same", with(func(*api.DeviceUsage) {}), false},
		{"10 MiB and 2 points more", with(func(u *api.DeviceUsage) { u.MemoryUsedBytes, u.SMUtilizationPercent = i64(1<<30+10<<20), ptr(22) }), false},
		{"1 GiB more", with(func(u *api.DeviceUsage) { u.MemoryUsedBytes = i64(2 << 30) }), true},
		{"5 points more", with(func(u *api.DeviceUsage) { u.SMUtilizationPercent = ptr(25) }), true},
		{"another process", with(func(u *api.DeviceUsage) { u.Processes = 2 }), true},
		{"memory no longer known", with(func(u *api.DeviceUsage) { u.MemoryUsedBytes = nil }), true},
		{"held back 30 s", with(func(u *api.DeviceUsage) { u.HeldBackSeconds = i64(30) }), true},
		{"another device", append(with(func(*api.DeviceUsage) {}), base), true},
	} {
		if got := Changed([]api.DeviceUsage{base}, tc.now); got != tc.want {
			t.Errorf("%s: changed %v, want %v", tc.name, got, tc.want)
		}
	}
}
