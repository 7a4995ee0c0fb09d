package kubeletplugin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/kubeletplugin/checkpoint"
	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// The checkpoints and CDI specs in testdata are what plugins wrote on a simulated
// dgx-h100 node (node-a) with the state directory /var/lib/kubelet/plugins/gpu.gpudra.dev,
// the CDI directory /run/cdi, the driver root /run/nvidia/driver and HAMi-core
// configured:
//
//   - checkpoint-v1-full.json and cdi-v1/: the plugin of commit eb41f57, the last with
//     checkpoint v1 (the whole state in one file; MPS claims without shm directories);
//   - checkpoint-v2.json, checkpoint-v2.journal and cdi-v2/: the plugin of commit
//     95f6d81, checkpoint v2 (the claims whole and mig in the checkpoint, the others in
//     its journal, as is claim gone, prepared, unprepared and deleted);
//   - checkpoint-v1.json: see TestV1CheckpointIsMigrated.
//
// Both nodes hold the claims of formatClaims: a whole GPU with a Long time-slice, a MIG
// device, a share under MPS limits (a pod's claim from a template), a share under
// HAMi-core, an NVLink group of two GPUs under MPS, a claim whose unprepare was
// interrupted after prepared.UnprepareStarted and one whose prepare was killed after writing its
// CDI spec.
const (
	formatStateDir = "/var/lib/kubelet/plugins/gpu.gpudra.dev"
	formatBootID   = "6f0e3c9a-51d2-4b8e-9a47-2c1d8e5b7f03"
)

// formatDevice is what a user of a claim's device notices.
type formatDevice struct {
	request, device, typ string
	share                bool // a share: its ShareID ends the CDI device name
	gpus                 []int
	// visible is what GPUDRA_VISIBLE_DEVICES lists: the GPUs' UUIDs or the MIG device's.
	visible []string
	// memory and compute are the device's capacity as its workload is told.
	memory  int64
	compute int
	limits  *cdi.Limits
	// mps: the claim's MPS directories; hami: its HAMi-core cache directory.
	mps, hami bool
	timeSlice string
}

type formatClaim struct {
	uid                           types.UID
	namespace, name, podClaimName string
	state                         prepared.State
	devices                       []formatDevice
	// daemon is the claim's MPS control daemon: its devices, default active thread
	// percentage and pinned memory limits; nil when it has none.
	daemon *prepared.MPSDaemon
}

const (
	uuidGPU0 = "GPU-dc0e8f32-4b45-5255-9752-1180c2456a3f"
	uuidGPU1 = "GPU-85fafb06-d0d2-5e5d-bcc8-bc6b6e7bb8f8"
	uuidGPU2 = "GPU-111b87e8-e4e1-5cbc-b883-03f71537463b"
	uuidGPU4 = "GPU-86e37e8f-b350-5be5-bd26-fc29d6de5df9"
	uuidGPU5 = "GPU-202f2785-4d97-5741-adfe-18f5ce82cfdb"
	uuidGPU6 = "GPU-65bf2e1c-f88e-5a56-b79f-4e8bbc6872f4"
	uuidGPU7 = "GPU-3aefc8bb-5130-56f1-b5fc-286c7849b64d"
	gib      = int64(1) << 30
)

// formatClaims are the claims of the testdata nodes; podClaimName is set for v2 only
// (v1 did not record it).
var formatClaims = []formatClaim{
	{uid: "0b6f4a1e-3c52-4d7a-8e19-5f2a7c4d9b10", namespace: "default", name: "whole", state: prepared.PrepareCompleted,
		devices: []formatDevice{{request: "gpu", device: "gpu-2", typ: api.TypeGPU, gpus: []int{2}, visible: []string{uuidGPU2},
			memory: 80 * gib, compute: 100, timeSlice: "Long"}}},
	{uid: "1c7a5b2f-4d63-4e8b-9f2a-6a3b8d5e0c21", namespace: "default", name: "mig", state: prepared.PrepareCompleted,
		devices: []formatDevice{{request: "mig", device: "gpu-0-mig-1g10gb-0", typ: api.TypeMIG, gpus: []int{0},
			visible: []string{"MIG-" + uuidGPU0 + "/0/0"}, memory: 10 * gib, compute: 12, timeSlice: "Default"}}},
	{uid: "2d8b6c3a-5e74-4f9c-a03b-7b4c9e6f1d32", namespace: "ml", name: "inference-7d9f-gpu", podClaimName: "gpu", state: prepared.PrepareCompleted,
		devices: []formatDevice{{request: "share", device: "gpu-1-share", typ: api.TypeShare, share: true, gpus: []int{1}, visible: []string{uuidGPU1},
			memory: 4 * gib, compute: 20, limits: &cdi.Limits{MemoryMiB: 4096, ComputePercent: 20}, mps: true}},
		daemon: &prepared.MPSDaemon{Devices: []string{uuidGPU1}, ActiveThreadPercent: 20, PinnedMemoryMiB: []int64{4096}}},
	{uid: "3e9c7d4b-6f85-405d-b14c-8c5d0f7a2e43", namespace: "ml", name: "notebook", state: prepared.PrepareCompleted,
		devices: []formatDevice{{request: "share", device: "gpu-1-share", typ: api.TypeShare, share: true, gpus: []int{1}, visible: []string{uuidGPU1},
			memory: 8 * gib, compute: 30, limits: &cdi.Limits{MemoryMiB: 8192, ComputePercent: 30, HAMi: true}, hami: true, timeSlice: "Default"}}},
	{uid: "4fad8e5c-7096-416e-825d-9d6e1a8b3f54", namespace: "training", name: "pair", state: prepared.PrepareCompleted,
		devices: []formatDevice{{request: "pair", device: "nvlink-4-5", typ: api.TypeNVLinkGroup, gpus: []int{4, 5}, visible: []string{uuidGPU4, uuidGPU5},
			memory: 80 * gib, compute: 100, mps: true}},
		daemon: &prepared.MPSDaemon{Devices: []string{uuidGPU4, uuidGPU5}, ActiveThreadPercent: 50, PinnedMemoryMiB: []int64{20480, 20480}}},
	{uid: "61cfa07e-92b8-4380-a47f-bf803cad5b76", namespace: "default", name: "leaving", state: prepared.UnprepareStarted,
		devices: []formatDevice{{request: "gpu", device: "gpu-6", typ: api.TypeGPU, gpus: []int{6}, visible: []string{uuidGPU6},
			memory: 80 * gib, compute: 100, timeSlice: "Default"}}},
	{uid: "72d0b18f-a3c9-4491-b580-c0914dbe6c87", namespace: "default", name: "killed", state: prepared.PrepareStarted,
		devices: []formatDevice{{request: "gpu", device: "gpu-7", typ: api.TypeGPU, gpus: []int{7}, visible: []string{uuidGPU7},
			memory: 80 * gib, compute: 100, timeSlice: "Short"}}},
}

// formatFiles are the testdata checkpoints: the checkpoint, its journal ("" for none)
// and its CDI specs ("" for none).
var formatFiles = []struct {
	name, checkpoint, journal, specs string
	version                          string
	generation                       uint64
	bootID                           string
	// full: the node of formatClaims; shm and podClaimName: recorded by that version.
	full, shm bool
}{
	{name: "v1", checkpoint: "checkpoint-v1.json", version: checkpointVersionV1, bootID: "boot-1"},
	{name: "v1-full", checkpoint: "checkpoint-v1-full.json", specs: "cdi-v1", version: checkpointVersionV1, bootID: formatBootID, full: true},
	{name: "v2", checkpoint: "checkpoint-v2.json", journal: "checkpoint-v2.journal", specs: "cdi-v2", version: checkpoint.Version,
		generation: 4, bootID: formatBootID, full: true, shm: true},
}

// checkpointVersionV1 is the format of plugins before the journal, which the plugin
// still reads.
const checkpointVersionV1 = "gpu.gpudra.dev/checkpoint/v1"

// checksum is the SHA-256 of data in hex, as the checkpoint's files check their data.
func checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// checkLine splits a journal line, "<sha256 hex> <payload>", and checks the payload's
// checksum.
func checkLine(line []byte) ([]byte, bool) {
	const n = sha256.Size * 2
	if len(line) < n+1 || line[n] != ' ' {
		return nil, false
	}
	payload := line[n+1:]
	return payload, checksum(payload) == string(line[:n])
}

// formatDir is a checkpoint directory holding the testdata checkpoint and journal.
func formatDir(t *testing.T, file, journal string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range map[string]string{checkpoint.File: file, checkpoint.JournalFile: journal} {
		if src == "" {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("testdata", src))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func loadStore(t *testing.T, dir string) *checkpoint.Data {
	t.Helper()
	s := checkpoint.New(dir, nil, klog.Background())
	defer s.Close()
	d, err := s.Load()
	if err != nil {
		t.Fatalf("loading the checkpoint: %v", err)
	}
	return d
}

// TestCheckpointFilesLoad loads each testdata checkpoint (with its journal) as a plugin
// does at start-up and checks the claims a user would see again: their states, devices,
// CDI device names and the edits their CDI specs are made from, which are those of the
// CDI specs the same plugin wrote.
func TestCheckpointFilesLoad(t *testing.T) {
	for _, ff := range formatFiles {
		t.Run(ff.name, func(t *testing.T) {
			d := loadStore(t, formatDir(t, ff.checkpoint, ff.journal))
			if d.BootID != ff.bootID || d.Generation != ff.generation {
				t.Errorf("boot %q generation %d, want %q and %d", d.BootID, d.Generation, ff.bootID, ff.generation)
			}
			if !ff.full {
				return
			}
			if len(d.Claims) != len(formatClaims) {
				t.Errorf("%d claims, want %d", len(d.Claims), len(formatClaims))
			}
			var specs map[string]*cdispec.Spec
			if ff.specs != "" {
				specs = readSpecs(t, filepath.Join("testdata", ff.specs))
			}
			for _, want := range formatClaims {
				pc := d.Claims[want.uid]
				if pc == nil {
					t.Errorf("claim %s/%s (%s) is missing", want.namespace, want.name, want.uid)
					continue
				}
				checkFormatClaim(t, pc, want, ff.shm)
				if spec := specs[string(want.uid)]; spec != nil {
					checkAgainstSpec(t, pc, spec)
				} else if ff.specs != "" {
					t.Errorf("claim %s has no CDI spec in %s", want.name, ff.specs)
				}
			}
		})
	}
}

func checkFormatClaim(t *testing.T, pc *prepared.Claim, want formatClaim, shm bool) {
	t.Helper()
	podClaimName := ""
	if shm {
		podClaimName = want.podClaimName
	}
	if pc.UID != want.uid || pc.Namespace != want.namespace || pc.Name != want.name || pc.PodClaimName != podClaimName || pc.State != want.state {
		t.Errorf("claim %s: %s %s/%s podClaimName %q, want %s %s/%s %q", want.uid, pc.State, pc.Namespace, pc.Name, pc.PodClaimName,
			want.state, want.namespace, want.name, podClaimName)
	}
	dirs := func(kind string) (pipe, log, shmDir string) {
		base := filepath.Join(formatStateDir, kind, string(want.uid))
		if shm {
			shmDir = filepath.Join(base, "shm")
		}
		return filepath.Join(base, "pipe"), filepath.Join(base, "log"), shmDir
	}
	if len(pc.Devices) != len(want.devices) {
		t.Fatalf("claim %s: %d devices, want %d", want.name, len(pc.Devices), len(want.devices))
	}
	for k, w := range want.devices {
		got := pc.Devices[k]
		c := got.CDI
		name := string(want.uid) + "-" + w.device
		if w.share {
			name += "-" + got.ShareID
		}
		if got.Request != w.request || got.Pool != "node-a" || got.Device != w.device || got.Type != w.typ || (got.ShareID != "") != w.share ||
			!reflect.DeepEqual(got.GPUs, w.gpus) || c.Name != name || c.Device != w.device {
			t.Errorf("claim %s device %d: %+v, want %+v (CDI device %s)", want.name, k, got, w, name)
		}
		if v := visibleUUIDs(c); !reflect.DeepEqual(v, w.visible) {
			t.Errorf("claim %s device %s: visible devices %v, want %v", want.name, w.device, v, w.visible)
		}
		if (got.MIG != nil) != (w.typ == api.TypeMIG) || (c.MIG != nil) != (w.typ == api.TypeMIG) {
			t.Errorf("claim %s device %s: MIG %+v, CDI MIG %+v", want.name, w.device, got.MIG, c.MIG)
		}
		if mi := got.MIG; mi != nil && (mi.Parent != 0 || mi.Profile != "1g.10gb" || mi.Start != 0 || mi.Size != 1 ||
			c.MIG.Parent.UUID != uuidGPU0 || c.MIG.GICapMinor != 3 || c.MIG.CICapMinor != 4) {
			t.Errorf("claim %s device %s: MIG %+v, CDI MIG %+v", want.name, w.device, mi, c.MIG)
		}
		if c.MemoryBytes != w.memory || c.ComputePercent != w.compute || !reflect.DeepEqual(c.Limits, w.limits) || c.TimeSlice != w.timeSlice {
			t.Errorf("claim %s device %s: memory %d compute %d limits %+v time-slice %q, want %d %d %+v %q", want.name, w.device,
				c.MemoryBytes, c.ComputePercent, c.Limits, c.TimeSlice, w.memory, w.compute, w.limits, w.timeSlice)
		}
		wantCache := ""
		if w.hami {
			wantCache = filepath.Join(formatStateDir, "vgpu", string(want.uid))
		}
		if c.CacheDir != wantCache {
			t.Errorf("claim %s device %s: cache directory %q, want %q", want.name, w.device, c.CacheDir, wantCache)
		}
		if (c.MPS != nil) != w.mps {
			t.Errorf("claim %s device %s: MPS %+v, want MPS %v", want.name, w.device, c.MPS, w.mps)
		} else if c.MPS != nil {
			pipe, log, shmDir := dirs("mps")
			if c.MPS.PipeDir != pipe || c.MPS.LogDir != log || c.MPS.ShmDir != shmDir {
				t.Errorf("claim %s device %s: MPS directories %+v, want %s %s %q", want.name, w.device, c.MPS, pipe, log, shmDir)
			}
			if d := want.daemon; c.MPS.ActiveThreadPercent != d.ActiveThreadPercent || c.MPS.PinnedMemoryMiB != d.PinnedMemoryMiB[0] {
				t.Errorf("claim %s device %s: MPS client limits %+v, want %d%% and %d MiB", want.name, w.device, c.MPS, d.ActiveThreadPercent, d.PinnedMemoryMiB[0])
			}
		}
	}
	if (pc.MPS != nil) != (want.daemon != nil) {
		t.Errorf("claim %s: MPS control daemon %+v, want %+v", want.name, pc.MPS, want.daemon)
	} else if want.daemon != nil {
		daemon := *want.daemon
		daemon.PipeDir, daemon.LogDir, daemon.ShmDir = dirs("mps")
		daemon.PID = pc.MPS.PID
		if !reflect.DeepEqual(*pc.MPS, daemon) || pc.MPS.PID == 0 {
			t.Errorf("claim %s: MPS control daemon %+v, want %+v", want.name, *pc.MPS, daemon)
		}
	}
}

// visibleUUIDs is what GPUDRA_VISIBLE_DEVICES lists for the device.
func visibleUUIDs(d cdi.Device) []string {
	if d.MIG != nil {
		return []string{d.MIG.UUID}
	}
	var out []string
	for _, g := range d.GPUs {
		out = append(out, g.UUID)
	}
	return out
}

// readSpecs reads the CDI specs in dir by claim UID.
func readSpecs(t *testing.T, dir string) map[string]*cdispec.Spec {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "gpudra.dev-gpu_*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no CDI specs in %s (%v)", dir, err)
	}
	out := map[string]*cdispec.Spec{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var s cdispec.Spec
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		uid := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "gpudra.dev-gpu_"), ".json")
		out[uid] = &s
	}
	return out
}

// specView is what a container of the claim gets from a CDI spec, by CDI device name:
// the GPUs it sees (GPUDRA_VISIBLE_DEVICES), its device nodes and its mounts (host path
// by container path).
type specView map[string]struct {
	Visible string
	Nodes   []string
	Mounts  map[string]string
}

func viewOf(s *cdispec.Spec) specView {
	out := specView{}
	for _, d := range s.Devices {
		v := out[d.Name]
		v.Mounts = map[string]string{}
		for _, kv := range d.ContainerEdits.Env {
			// Plugins of checkpoint v1 named the variable NVIDIA_VISIBLE_DEVICES.
			if val, ok := strings.CutPrefix(kv, "GPUDRA_VISIBLE_DEVICES="); ok {
				v.Visible = val
			} else if val, ok := strings.CutPrefix(kv, "NVIDIA_VISIBLE_DEVICES="); ok && v.Visible == "" {
				v.Visible = val
			}
		}
		for _, n := range d.ContainerEdits.DeviceNodes {
			v.Nodes = append(v.Nodes, n.Path+"="+n.HostPath)
		}
		for _, m := range d.ContainerEdits.Mounts {
			v.Mounts[m.ContainerPath] = m.HostPath
		}
		out[d.Name] = v
	}
	return out
}

// checkAgainstSpec checks the loaded claim against the CDI spec the plugin wrote for
// it: the CDI devices, what their containers see and mount.
func checkAgainstSpec(t *testing.T, pc *prepared.Claim, spec *cdispec.Spec) {
	t.Helper()
	view := viewOf(spec)
	if len(view) != len(pc.Devices) {
		t.Errorf("claim %s: %d CDI devices in its spec, %d in the checkpoint", pc.Name, len(view), len(pc.Devices))
	}
	for _, d := range pc.Devices {
		v, ok := view[d.CDI.Name]
		if !ok {
			t.Errorf("claim %s: CDI device %s is not in its spec", pc.Name, d.CDI.Name)
			continue
		}
		if want := strings.Join(visibleUUIDs(d.CDI), ","); v.Visible != want {
			t.Errorf("claim %s: spec's device %s sees %q, the checkpoint says %q", pc.Name, d.CDI.Name, v.Visible, want)
		}
		if m := d.CDI.MPS; m != nil {
			want := map[string]string{cdi.MPSPipeDir: m.PipeDir, cdi.MPSLogDir: m.LogDir}
			if m.ShmDir != "" {
				want[cdi.MPSShmDir] = m.ShmDir
			}
			for cpath, host := range want {
				if v.Mounts[cpath] != host {
					t.Errorf("claim %s: spec's device %s mounts %q at %s, the checkpoint says %q", pc.Name, d.CDI.Name, v.Mounts[cpath], cpath, host)
				}
			}
		}
		if dir := d.CDI.CacheDir; dir != "" && v.Mounts[cdi.VGPUCacheDir] != dir {
			t.Errorf("claim %s: spec's device %s mounts %q at %s, the checkpoint says %q", pc.Name, d.CDI.Name, v.Mounts[cdi.VGPUCacheDir], cdi.VGPUCacheDir, dir)
		}
	}
}

// TestCheckpointFilesRoundTrip loads each testdata checkpoint, writes it as a plugin
// does (a compaction: checkpoint v2, the next generation) and loads it again: the claims
// are the same, and the new checkpoint's data is, as JSON, the old checkpoint's with
// its journal applied and the next generation. A v1 checkpoint's new file also has the
// fields v1 did not have, empty. Each claim's journal record and CDI spec annotation, as
// a plugin writes them, are its record in the testdata, as JSON.
func TestCheckpointFilesRoundTrip(t *testing.T) {
	for _, ff := range formatFiles {
		t.Run(ff.name, func(t *testing.T) {
			dir := formatDir(t, ff.checkpoint, ff.journal)
			s := checkpoint.New(dir, nil, klog.Background())
			defer s.Close()
			d, err := s.Load()
			if err != nil {
				t.Fatal(err)
			}
			want := &checkpoint.Data{BootID: d.BootID, Generation: d.Generation + 1, Claims: d.Claims}
			if err := s.Compact(d); err != nil {
				t.Fatal(err)
			}
			if got := loadStore(t, dir); !reflect.DeepEqual(got, want) {
				t.Errorf("loaded, written and loaded again:\n%+v\nwant\n%+v", got, want)
			}

			old := testdataJSON(t, ff.checkpoint, ff.journal)
			old["generation"] = float64(want.Generation)
			var f struct {
				Version  string
				Checksum string
				Data     json.RawMessage
			}
			raw, err := os.ReadFile(filepath.Join(dir, checkpoint.File))
			if err != nil || json.Unmarshal(raw, &f) != nil {
				t.Fatalf("reading the written checkpoint: %v", err)
			}
			if f.Version != checkpoint.Version || f.Checksum != checksum(f.Data) {
				t.Errorf("written checkpoint: version %q, checksum %s of data %s", f.Version, f.Checksum, checksum(f.Data))
			}
			var written map[string]any
			if err := json.Unmarshal(f.Data, &written); err != nil {
				t.Fatal(err)
			}
			sameJSON(t, "data", written, old, ff.version == checkpointVersionV1)

			// What a prepare appends to the journal, and annotates the CDI spec with.
			oldClaims, _ := old["claims"].(map[string]any)
			journalDir := t.TempDir()
			journalPath := filepath.Join(journalDir, checkpoint.JournalFile)
			journal := checkpoint.New(journalDir, nil, klog.Background())
			defer journal.Close()
			if err := journal.Compact(&checkpoint.Data{BootID: d.BootID, Claims: map[types.UID]*prepared.Claim{}}); err != nil {
				t.Fatal(err)
			}
			st := formatState(t)
			for uid, pc := range d.Claims {
				before, _ := os.ReadFile(journalPath)
				if err := journal.Put(&checkpoint.Data{Claims: map[types.UID]*prepared.Claim{}}, pc, ""); err != nil {
					t.Fatal(err)
				}
				after, _ := os.ReadFile(journalPath)
				payload, ok := checkLine(bytes.TrimSuffix(after[len(before):], []byte("\n")))
				var rec struct{ Put map[string]any }
				if !ok || json.Unmarshal(payload, &rec) != nil {
					t.Fatalf("journal record of %s: %q", uid, payload)
				}
				sameJSON(t, "journal record of "+string(uid), rec.Put, oldClaims[string(uid)], ff.version == checkpointVersionV1)

				ann, err := st.writeSpec(pc)
				if err != nil {
					t.Fatal(err)
				}
				var annotated map[string]any
				if err := json.Unmarshal(ann, &annotated); err != nil {
					t.Fatal(err)
				}
				completed, _ := deepCopyJSON(oldClaims[string(uid)]).(map[string]any)
				completed["state"] = string(prepared.PrepareCompleted)
				sameJSON(t, "CDI spec annotation of "+string(uid), annotated, completed, ff.version == checkpointVersionV1)
			}
			onDisk, err := st.specs.Claims()
			if err != nil {
				t.Fatal(err)
			}
			for uid, pc := range d.Claims {
				if onDisk[string(uid)] == "" {
					t.Errorf("claim %s: the written CDI spec has no record", pc.Name)
				}
			}
		})
	}
}

// TestCDISpecFilesRebuild rebuilds the claims from the testdata CDI specs' annotations,
// as a plugin does when its checkpoint is corrupt: each claim is as its checkpoint has
// it, completed, and a CDI spec written from it gives its containers what the old one
// did.
func TestCDISpecFilesRebuild(t *testing.T) {
	for _, ff := range formatFiles {
		if ff.specs == "" {
			continue
		}
		t.Run(ff.name, func(t *testing.T) {
			d := loadStore(t, formatDir(t, ff.checkpoint, ff.journal))
			old := readSpecs(t, filepath.Join("testdata", ff.specs))
			st := formatState(t)
			for uid := range old {
				raw, err := os.ReadFile(filepath.Join("testdata", ff.specs, "gpudra.dev-gpu_"+uid+".json"))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(st.specs.Path(uid), raw, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			rebuilt := st.rebuild()
			if rebuilt.BootID != st.bootID || len(rebuilt.Claims) != len(d.Claims) {
				t.Errorf("rebuilt %d claims of boot %q, want %d of %q", len(rebuilt.Claims), rebuilt.BootID, len(d.Claims), st.bootID)
			}
			for uid, pc := range d.Claims {
				want := *pc
				want.State = prepared.PrepareCompleted
				got := rebuilt.Claims[uid]
				if got == nil {
					t.Errorf("claim %s was not rebuilt", pc.Name)
					continue
				}
				if !reflect.DeepEqual(*got, want) {
					t.Errorf("claim %s rebuilt as\n%+v\nwant\n%+v", pc.Name, *got, want)
				}
				if _, err := st.writeSpec(got); err != nil {
					t.Fatal(err)
				}
				written := readSpecs(t, filepath.Dir(st.specs.Path(string(uid))))[string(uid)]
				if got, want := viewOf(written), viewOf(old[string(uid)]); !reflect.DeepEqual(got, want) {
					t.Errorf("claim %s: CDI spec written from the rebuilt claim gives\n%+v\nthe old one\n%+v", pc.Name, got, want)
				}
			}
		})
	}
}

// formatState is the part of a plugin's state that writes and reads CDI specs, on the
// testdata node.
func formatState(t *testing.T) *state {
	t.Helper()
	specs, err := cdi.NewSpecs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	node := cdi.Node{DriverRoot: "/run/nvidia/driver", VGPULibrary: "/usr/local/vgpu/libvgpu.so"}
	return &state{specs: specs, planner: &planner{node: node}, bootID: formatBootID, logger: klog.Background()}
}

// testdataJSON is a testdata checkpoint's data, as JSON, with its journal's records
// applied.
func testdataJSON(t *testing.T, checkpoint, journal string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", checkpoint))
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Data map[string]any }
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if journal == "" {
		return f.Data
	}
	claims := f.Data["claims"].(map[string]any)
	raw, err = os.ReadFile(filepath.Join("testdata", journal))
	if err != nil {
		t.Fatal(err)
	}
	for k, l := range bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))[1:] {
		var r struct {
			Put    map[string]any
			Delete string
		}
		if err := json.Unmarshal(l[sha256Hex+1:], &r); err != nil {
			t.Fatalf("%s line %d: %v", journal, k+2, err)
		}
		if r.Put != nil {
			claims[r.Put["uid"].(string)] = r.Put
		} else {
			delete(claims, r.Delete)
		}
	}
	return f.Data
}

const sha256Hex = 64

func deepCopyJSON(v any) any {
	raw, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(raw, &out)
	return out
}

// sameJSON reports where got differs from want, decoded JSON values. With added, got
// may have members that want has not, when their values are empty (fields that a
// later version records).
func sameJSON(t *testing.T, path string, got, want any, added bool) {
	t.Helper()
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			t.Errorf("%s: %v, want %v", path, got, want)
			return
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				t.Errorf("%s.%s: missing, want %v", path, k, wv)
				continue
			}
			sameJSON(t, path+"."+k, gv, wv, added)
		}
		for k, gv := range g {
			if _, ok := w[k]; ok {
				continue
			}
			if !added || !emptyJSON(gv) {
				t.Errorf("%s.%s: %v, want no such member", path, k, gv)
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			t.Errorf("%s: %v, want %v", path, got, want)
			return
		}
		for k := range w {
			sameJSON(t, path+"["+strconv.Itoa(k)+"]", g[k], w[k], added)
		}
	default:
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, want %v", path, got, want)
		}
	}
}

func emptyJSON(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case float64:
		return v == 0
	case bool:
		return !v
	}
	return false
}
