package checkpoint

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// The records below are the claims as files hold them: the checkpoint (File),
// its journal (JournalFile) and the CDI specs' api.AnnotationPreparedClaim. Their JSON
// names are the format, fixed whatever becomes of the Go names of the in-memory types
// (prepared.Claim, cdi.Device...), which loading and saving convert from and to. The
// names in cdiDeviceRecord and below are those of the Go fields that the first v1 and v2
// files were written from. A field added to an in-memory type needs its field here (and
// in the conversions; TestClaimRecordKeepsEveryField fails until it has one), with
// omitempty or a zero value that reads as files without it did.

// checkpointRecord is the checkpoint's data, which its checksum covers.
type checkpointRecord struct {
	BootID string `json:"bootID"`
	// Generation is 0 (absent) in a v1 checkpoint.
	Generation uint64                  `json:"generation,omitempty"`
	Claims     map[string]*claimRecord `json:"claims"`
}

// claimRecord is a prepared.Claim.
type claimRecord struct {
	UID          string           `json:"uid"`
	Namespace    string           `json:"namespace"`
	Name         string           `json:"name"`
	PodClaimName string           `json:"podClaimName,omitempty"`
	State        string           `json:"state"`
	Devices      []deviceRecord   `json:"devices"`
	MPS          *mpsDaemonRecord `json:"mps,omitempty"`
	// TimeSlicesLeft is absent but for a claim released but for its GPUs' time-slices.
	TimeSlicesLeft []string `json:"timeSlicesLeft,omitempty"`
}

// deviceRecord is a prepared.Device.
type deviceRecord struct {
	Request string             `json:"request"`
	Pool    string             `json:"pool"`
	Device  string             `json:"device"`
	ShareID string             `json:"shareID,omitempty"`
	Type    string             `json:"type"`
	GPUs    []int              `json:"gpus"`
	MIG     *migInstanceRecord `json:"mig,omitempty"`
	CDI     cdiDeviceRecord    `json:"cdi"`
}

// migInstanceRecord is a prepared.MIGInstance.
type migInstanceRecord struct {
	Parent      int    `json:"parent"`
	Profile     string `json:"profile"`
	GIProfileID int    `json:"giProfileID"`
	CIProfileID int    `json:"ciProfileID"`
	Start       int    `json:"start"`
	Size        int    `json:"size"`
}

// mpsDaemonRecord is a prepared.MPSDaemon.
type mpsDaemonRecord struct {
	PipeDir             string   `json:"pipeDir"`
	LogDir              string   `json:"logDir"`
	ShmDir              string   `json:"shmDir,omitempty"`
	Devices             []string `json:"devices"`
	ActiveThreadPercent int      `json:"activeThreadPercent,omitempty"`
	PinnedMemoryMiB     []int64  `json:"pinnedMemoryMiB,omitempty"`
	PID                 int      `json:"pid,omitempty"`
}

// cdiDeviceRecord is a cdi.Device: what the device's CDI spec entry is written from.
type cdiDeviceRecord struct {
	Name           string           `json:"Name"`
	Device         string           `json:"Device"`
	GPUs           []cdiGPURecord   `json:"GPUs"`
	MIG            *cdiMIGRecord    `json:"MIG"`
	MemoryBytes    int64            `json:"MemoryBytes"`
	ComputePercent int              `json:"ComputePercent"`
	Limits         *cdiLimitsRecord `json:"Limits"`
	MPS            *cdiMPSRecord    `json:"MPS"`
	CacheDir       string           `json:"CacheDir"`
	// PreloadFile is absent from records written before HAMi-core was preloaded by file.
	PreloadFile string `json:"PreloadFile,omitempty"`
	TimeSlice   string `json:"TimeSlice"`
}

// cdiGPURecord is a cdi.GPU.
type cdiGPURecord struct {
	Index int    `json:"Index"`
	Minor int    `json:"Minor"`
	UUID  string `json:"UUID"`
	// AMD is a cdi.AMDNodes; absent for NVIDIA GPUs.
	AMD *cdiAMDRecord `json:"AMD,omitempty"`
}

// cdiAMDRecord is a cdi.AMDNodes.
type cdiAMDRecord struct {
	RenderMinor int  `json:"RenderMinor"`
	Card        int  `json:"Card"`
	ROCmUUID    bool `json:"ROCmUUID,omitempty"`
}

// cdiMIGRecord is a cdi.MIG.
type cdiMIGRecord struct {
	Parent     cdiGPURecord `json:"Parent"`
	GI         int          `json:"GI"`
	CI         int          `json:"CI"`
	UUID       string       `json:"UUID"`
	GICapMinor int          `json:"GICapMinor"`
	CICapMinor int          `json:"CICapMinor"`
}

// cdiLimitsRecord is a cdi.Limits.
type cdiLimitsRecord struct {
	MemoryMiB      int64  `json:"MemoryMiB"`
	ComputePercent int    `json:"ComputePercent"`
	HAMi           bool   `json:"HAMi"`
	Policy         string `json:"Policy,omitempty"`
	Priority       string `json:"Priority,omitempty"`
	// CUDAIndex is absent when the share is numbered among its claim's own devices.
	CUDAIndex      *int `json:"CUDAIndex,omitempty"`
	Oversubscribed bool `json:"Oversubscribed,omitempty"`
}

// cdiMPSRecord is a cdi.MPS. ShmDir is absent from v1 files (read as "").
type cdiMPSRecord struct {
	PipeDir             string `json:"PipeDir"`
	LogDir              string `json:"LogDir"`
	ShmDir              string `json:"ShmDir"`
	ActiveThreadPercent int    `json:"ActiveThreadPercent"`
	PinnedMemoryMiB     int64  `json:"PinnedMemoryMiB"`
	Priority            string `json:"Priority,omitempty"`
}

// MarshalClaim is the claim's record as JSON.
func MarshalClaim(pc *prepared.Claim) ([]byte, error) {
	return json.Marshal(claimRecordOf(pc))
}

// UnmarshalClaim reads a claim's record; strict (the checkpoint's journal) refuses
// members that are not the record's.
func UnmarshalClaim(raw []byte, strict bool) (*prepared.Claim, error) {
	var rec claimRecord
	var err error
	if strict {
		err = StrictDecode(raw, &rec)
	} else {
		err = json.Unmarshal(raw, &rec)
	}
	if err != nil {
		return nil, err
	}
	return rec.claim(), nil
}

func checkpointRecordOf(d *Data) *checkpointRecord {
	r := &checkpointRecord{BootID: d.BootID, Generation: d.Generation}
	if d.Claims != nil {
		r.Claims = make(map[string]*claimRecord, len(d.Claims))
		for uid, pc := range d.Claims {
			r.Claims[string(uid)] = claimRecordOf(pc)
		}
	}
	return r
}

// data is the checkpoint's claims; a null claim stays nil (loadCheckpoint refuses it).
func (r *checkpointRecord) data() *Data {
	d := &Data{BootID: r.BootID, Generation: r.Generation}
	if r.Claims != nil {
		d.Claims = make(map[types.UID]*prepared.Claim, len(r.Claims))
		for uid, rec := range r.Claims {
			var pc *prepared.Claim
			if rec != nil {
				pc = rec.claim()
			}
			d.Claims[types.UID(uid)] = pc
		}
	}
	return d
}

func claimRecordOf(pc *prepared.Claim) *claimRecord {
	if pc == nil {
		return nil
	}
	r := &claimRecord{UID: string(pc.UID), Namespace: pc.Namespace, Name: pc.Name, PodClaimName: pc.PodClaimName,
		State: string(pc.State), Devices: convertSlice(pc.Devices, deviceRecordOf), TimeSlicesLeft: pc.TimeSlicesLeft}
	if d := pc.MPS; d != nil {
		r.MPS = &mpsDaemonRecord{PipeDir: d.PipeDir, LogDir: d.LogDir, ShmDir: d.ShmDir, Devices: d.Devices,
			ActiveThreadPercent: d.ActiveThreadPercent, PinnedMemoryMiB: d.PinnedMemoryMiB, PID: d.PID}
	}
	return r
}

func (r *claimRecord) claim() *prepared.Claim {
	pc := &prepared.Claim{UID: types.UID(r.UID), Namespace: r.Namespace, Name: r.Name, PodClaimName: r.PodClaimName,
		State: prepared.State(r.State), Devices: convertSlice(r.Devices, deviceRecord.device)}
	if len(r.TimeSlicesLeft) > 0 { // an empty list reads as none, as it is written
		pc.TimeSlicesLeft = r.TimeSlicesLeft
	}
	if d := r.MPS; d != nil {
		pc.MPS = &prepared.MPSDaemon{PipeDir: d.PipeDir, LogDir: d.LogDir, ShmDir: d.ShmDir, Devices: d.Devices,
			ActiveThreadPercent: d.ActiveThreadPercent, PinnedMemoryMiB: d.PinnedMemoryMiB, PID: d.PID}
	}
	return pc
}

func deviceRecordOf(d prepared.Device) deviceRecord {
	r := deviceRecord{Request: d.Request, Pool: d.Pool, Device: d.Device, ShareID: d.ShareID, Type: d.Type, GPUs: d.GPUs,
		CDI: cdiDeviceRecordOf(d.CDI)}
	if mi := d.MIG; mi != nil {
		r.MIG = &migInstanceRecord{Parent: mi.Parent, Profile: mi.Profile, GIProfileID: mi.GIProfileID, CIProfileID: mi.CIProfileID,
			Start: mi.Start, Size: mi.Size}
	}
	return r
}

func (r deviceRecord) device() prepared.Device {
	d := prepared.Device{Request: r.Request, Pool: r.Pool, Device: r.Device, ShareID: r.ShareID, Type: r.Type, GPUs: r.GPUs,
		CDI: r.CDI.device()}
	if mi := r.MIG; mi != nil {
		d.MIG = &prepared.MIGInstance{Parent: mi.Parent, Profile: mi.Profile, GIProfileID: mi.GIProfileID, CIProfileID: mi.CIProfileID,
			Start: mi.Start, Size: mi.Size}
	}
	return d
}

func cdiDeviceRecordOf(d cdi.Device) cdiDeviceRecord {
	r := cdiDeviceRecord{Name: d.Name, Device: d.Device, GPUs: convertSlice(d.GPUs, cdiGPURecordOf), MemoryBytes: d.MemoryBytes,
		ComputePercent: d.ComputePercent, CacheDir: d.CacheDir, PreloadFile: d.PreloadFile, TimeSlice: d.TimeSlice}
	if m := d.MIG; m != nil {
		r.MIG = &cdiMIGRecord{Parent: cdiGPURecordOf(m.Parent), GI: m.GI, CI: m.CI, UUID: m.UUID, GICapMinor: m.GICapMinor, CICapMinor: m.CICapMinor}
	}
	if l := d.Limits; l != nil {
		r.Limits = &cdiLimitsRecord{MemoryMiB: l.MemoryMiB, ComputePercent: l.ComputePercent, HAMi: l.HAMi, Policy: l.Policy, Priority: l.Priority,
			CUDAIndex: copyInt(l.CUDAIndex), Oversubscribed: l.Oversubscribed}
	}
	if m := d.MPS; m != nil {
		r.MPS = &cdiMPSRecord{PipeDir: m.PipeDir, LogDir: m.LogDir, ShmDir: m.ShmDir, ActiveThreadPercent: m.ActiveThreadPercent,
			PinnedMemoryMiB: m.PinnedMemoryMiB, Priority: m.Priority}
	}
	return r
}

func (r cdiDeviceRecord) device() cdi.Device {
	d := cdi.Device{Name: r.Name, Device: r.Device, GPUs: convertSlice(r.GPUs, cdiGPURecord.gpu), MemoryBytes: r.MemoryBytes,
		ComputePercent: r.ComputePercent, CacheDir: r.CacheDir, PreloadFile: r.PreloadFile, TimeSlice: r.TimeSlice}
	if m := r.MIG; m != nil {
		d.MIG = &cdi.MIG{Parent: m.Parent.gpu(), GI: m.GI, CI: m.CI, UUID: m.UUID, GICapMinor: m.GICapMinor, CICapMinor: m.CICapMinor}
	}
	if l := r.Limits; l != nil {
		d.Limits = &cdi.Limits{MemoryMiB: l.MemoryMiB, ComputePercent: l.ComputePercent, HAMi: l.HAMi, Policy: l.Policy, Priority: l.Priority,
			CUDAIndex: copyInt(l.CUDAIndex), Oversubscribed: l.Oversubscribed}
	}
	if m := r.MPS; m != nil {
		d.MPS = &cdi.MPS{PipeDir: m.PipeDir, LogDir: m.LogDir, ShmDir: m.ShmDir, ActiveThreadPercent: m.ActiveThreadPercent,
			PinnedMemoryMiB: m.PinnedMemoryMiB, Priority: m.Priority}
	}
	return d
}

func cdiGPURecordOf(g cdi.GPU) cdiGPURecord {
	r := cdiGPURecord{Index: g.Index, Minor: g.Minor, UUID: g.UUID}
	if a := g.AMD; a != nil {
		r.AMD = &cdiAMDRecord{RenderMinor: a.RenderMinor, Card: a.Card, ROCmUUID: a.ROCmUUID}
	}
	return r
}

func (r cdiGPURecord) gpu() cdi.GPU {
	g := cdi.GPU{Index: r.Index, Minor: r.Minor, UUID: r.UUID}
	if a := r.AMD; a != nil {
		g.AMD = &cdi.AMDNodes{RenderMinor: a.RenderMinor, Card: a.Card, ROCmUUID: a.ROCmUUID}
	}
	return g
}

func copyInt(p *int) *int {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// convertSlice converts each element; nil stays nil (null in JSON), empty stays empty.
func convertSlice[S, T any](in []S, f func(S) T) []T {
	if in == nil {
		return nil
	}
	out := make([]T, len(in))
	for k, v := range in {
		out[k] = f(v)
	}
	return out
}
