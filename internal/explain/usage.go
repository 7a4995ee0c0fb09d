package explain

import (
	"encoding/json"
	"strconv"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// DeviceUsage is the usage the kubelet plugin writes in the data of a claim's
// status.devices entry, with the words explain shows it in.
type DeviceUsage struct {
	api.DeviceUsage `json:",inline"`
}

// Memory is the memory used of the limit: "3.2 of 20.0 GiB", "?" for the used memory
// NVML had no value for.
func (u *DeviceUsage) Memory() string {
	gib := func(b int64) string { return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) }
	used := "?"
	if u.MemoryUsedBytes != nil {
		used = gib(*u.MemoryUsedBytes)
	}
	return used + " of " + gib(u.MemoryLimitBytes) + " GiB"
}

// HeldBack is how long High shares held the device's processes back ("1m35s"); "" when
// the plugin did not say.
func (u *DeviceUsage) HeldBack() string {
	if u.HeldBackSeconds == nil {
		return ""
	}
	return (time.Duration(*u.HeldBackSeconds) * time.Second).String()
}

// Observed is when the plugin read the usage, in RFC 3339 and UTC.
func (u *DeviceUsage) Observed() string { return u.ObservedAt.UTC().Format(time.RFC3339) }

// deviceUsage is the usage in the claim's status entry of the allocated device r.
func deviceUsage(cl *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) *DeviceUsage {
	for _, s := range cl.Status.Devices {
		if s.Driver != r.Driver || s.Pool != r.Pool || s.Device != r.Device || (s.ShareID == nil) != (r.ShareID == nil) ||
			(s.ShareID != nil && *s.ShareID != string(*r.ShareID)) || s.Data == nil {
			continue
		}
		var data struct {
			Usage *DeviceUsage `json:"usage"`
		}
		if json.Unmarshal(s.Data.Raw, &data) == nil {
			return data.Usage
		}
	}
	return nil
}
