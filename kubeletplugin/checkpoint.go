package kubeletplugin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/cdi"
)

// CheckpointVersion is the version of the checkpoint file format.
const CheckpointVersion = "gpu.gpudra.dev/checkpoint/v1"

// CheckpointFile is the checkpoint's name in the checkpoint directory.
const CheckpointFile = "checkpoint.json"

// ClaimState is where a claim is in its prepare/unprepare life.
type ClaimState string

// Claim states. A claim in PrepareStarted or UnprepareStarted when the plugin starts was
// interrupted: the first is rolled back (the kubelet retries the prepare), the second
// is finished (the kubelet's retried unprepare then finds nothing to do).
const (
	PrepareStarted   ClaimState = "PrepareStarted"
	PrepareCompleted ClaimState = "PrepareCompleted"
	UnprepareStarted ClaimState = "UnprepareStarted"
)

// PreparedClaim is the checkpoint's record of one claim.
type PreparedClaim struct {
	UID       types.UID        `json:"uid"`
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	State     ClaimState       `json:"state"`
	Devices   []PreparedDevice `json:"devices"`
	// MPS is the claim's MPS control daemon once started; nil when it has none.
	MPS *MPSDaemon `json:"mps,omitempty"`
}

// PreparedDevice is one allocated device of a claim as prepared on this node.
type PreparedDevice struct {
	Request string `json:"request"`
	Pool    string `json:"pool"`
	// Device is the published device name.
	Device  string `json:"device"`
	ShareID string `json:"shareID,omitempty"`
	// Type is the device's type attribute (gpu, share, mig, nvlink-group).
	Type string `json:"type"`
	// GPUs are the indices of the physical GPUs it uses (the parent, for MIG).
	GPUs []int `json:"gpus"`
	// MIG is set for MIG devices: the instance to create and, once created, its ids.
	MIG *MIGInstance `json:"mig,omitempty"`
	// CDI is what the device's CDI entry is built from.
	CDI cdi.Device `json:"cdi"`
}

// MIGInstance is a MIG device's GPU instance at a fixed placement, with a full
// compute instance.
type MIGInstance struct {
	Parent      int    `json:"parent"`
	Profile     string `json:"profile"`
	GIProfileID int    `json:"giProfileID"`
	CIProfileID int    `json:"ciProfileID"`
	Start       int    `json:"start"`
	Size        int    `json:"size"`
}

// checkpointData is what the checksum covers.
type checkpointData struct {
	BootID string                       `json:"bootID"`
	Claims map[types.UID]*PreparedClaim `json:"claims"`
}

type checkpointFile struct {
	Version  string          `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// ErrCorruptCheckpoint is wrapped by loadCheckpoint for unreadable checkpoints.
var ErrCorruptCheckpoint = errors.New("corrupt checkpoint")

func checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// checkpointStore reads and writes the checkpoint file. Writes go to a temporary file
// renamed over the old one: a killed plugin leaves the old or the new checkpoint,
// never a mix. They are not fsynced: page-cache writes survive a killed process, and
// after a power loss the boot id changes and the checkpoint is discarded anyway.
type checkpointStore struct {
	path string
}

// load returns the checkpoint, an empty one when there is none, or an error wrapping
// ErrCorruptCheckpoint.
func (s checkpointStore) load() (*checkpointData, error) {
	raw, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return &checkpointData{Claims: map[types.UID]*PreparedClaim{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading checkpoint: %w", err)
	}
	var f checkpointFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrCorruptCheckpoint, s.path, err)
	}
	if f.Version != CheckpointVersion {
		return nil, fmt.Errorf("%w %s: version %q, this plugin reads %q", ErrCorruptCheckpoint, s.path, f.Version, CheckpointVersion)
	}
	if checksum(f.Data) != f.Checksum {
		return nil, fmt.Errorf("%w %s: checksum mismatch", ErrCorruptCheckpoint, s.path)
	}
	d := &checkpointData{}
	dec := json.NewDecoder(bytes.NewReader(f.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(d); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrCorruptCheckpoint, s.path, err)
	}
	if d.Claims == nil {
		d.Claims = map[types.UID]*PreparedClaim{}
	}
	return d, nil
}

func (s checkpointStore) save(d *checkpointData) error {
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	// The file is checkpointFile as JSON. data is compact JSON already: spliced in, not
	// marshaled again (json.Marshal would validate and compact all of it a second time).
	raw := make([]byte, 0, len(data)+len(CheckpointVersion)+128)
	raw = append(raw, `{"version":"`+CheckpointVersion+`","checksum":"`...)
	raw = append(raw, checksum(data)...)
	raw = append(raw, `","data":`...)
	raw = append(raw, data...)
	raw = append(raw, '}')
	tmp, err := os.CreateTemp(filepath.Dir(s.path), ".checkpoint-*.tmp")
	if err != nil {
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	_, err = tmp.Write(raw)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	return nil
}

// setAside renames a corrupt checkpoint so that it can be inspected, and returns the new name.
func (s checkpointStore) setAside(now time.Time) (string, error) {
	aside := fmt.Sprintf("%s.corrupt-%s", s.path, now.UTC().Format("20060102T150405.000000000"))
	if err := os.Rename(s.path, aside); err != nil {
		return "", err
	}
	return aside, nil
}

// readBootID reads the kernel's boot id (/proc/sys/kernel/random/boot_id by default).
func readBootID(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the boot id: %w", err)
	}
	return strings.TrimSpace(string(raw)), nil
}
