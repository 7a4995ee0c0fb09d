package cdi

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// The CDI vendor, class and kind of gpudra's specs.
const (
	Vendor = "gpudra.dev"
	Class  = "gpu"
	Kind   = Vendor + "/" + Class
)

// Specs reads and writes gpudra's per-claim specs in one CDI directory. Specs are
// written atomically (temporary file and rename) with mode 0600.
type Specs struct {
	dir   string
	cache *cdiapi.Cache
}

// NewSpecs manages the specs in dir (created if missing).
func NewSpecs(dir string) (*Specs, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("CDI spec directory: %w", err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI spec directory %s: %w", dir, err)
	}
	return &Specs{dir: dir, cache: cache}, nil
}

// DeviceID is the fully qualified CDI device name the kubelet passes to the runtime.
func DeviceID(name string) string { return parser.QualifiedName(Vendor, Class, name) }

func specName(claimUID string) string {
	return cdiapi.GenerateTransientSpecName(Vendor, Class, claimUID) + ".json"
}

// Path is where the claim's spec lives.
func (s *Specs) Path(claimUID string) string { return filepath.Join(s.dir, specName(claimUID)) }

// Write writes the claim's spec with one CDI device per entry of devs and returns
// their qualified ids in the same order. claim names the claim in the variables of its
// own (ClaimEdits); record is stored in api.AnnotationPreparedClaim.
func (s *Specs) Write(claimUID, claim string, node Node, devs []Device, record []byte) ([]string, error) {
	spec := &cdispec.Spec{
		Kind:           Kind,
		ContainerEdits: node.specEdits(!allAMD(devs)),
	}
	if record != nil {
		spec.Annotations = map[string]string{api.AnnotationPreparedClaim: string(record)}
	}
	ids := make([]string, len(devs))
	for k, own := range node.ClaimEdits(claim, devs) {
		e, err := node.DeviceEdits(devs[k], own)
		if err != nil {
			return nil, fmt.Errorf("CDI spec for claim %s: %w", claimUID, err)
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: devs[k].Name, ContainerEdits: e})
		ids[k] = DeviceID(devs[k].Name)
	}
	version, err := cdiapi.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("CDI spec for claim %s: %w", claimUID, err)
	}
	spec.Version = version
	if err := s.cache.WriteSpec(spec, specName(claimUID)); err != nil {
		return nil, fmt.Errorf("writing CDI spec for claim %s: %w", claimUID, err)
	}
	return ids, nil
}

// Remove deletes the claim's spec; a missing spec is not an error.
func (s *Specs) Remove(claimUID string) error {
	if err := s.cache.RemoveSpec(specName(claimUID)); err != nil {
		return fmt.Errorf("removing CDI spec for claim %s: %w", claimUID, err)
	}
	return nil
}

// Exists reports whether the claim's spec is on disk.
func (s *Specs) Exists(claimUID string) bool {
	_, err := os.Stat(s.Path(claimUID))
	return err == nil
}

// Claims lists the claims that have a gpudra spec on disk, with each spec's
// api.AnnotationPreparedClaim ("" when absent or unreadable).
func (s *Specs) Claims() (map[string]string, error) {
	prefix := cdiapi.GenerateTransientSpecName(Vendor, Class, "")
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("listing CDI specs: %w", err)
	}
	out := map[string]string{}
	for _, e := range entries {
		uid, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !strings.HasSuffix(uid, ".json") || e.IsDir() {
			continue
		}
		uid = strings.TrimSuffix(uid, ".json")
		out[uid] = ""
		data, err := os.ReadFile(filepath.Join(s.dir, e.Name()))
		if err != nil {
			continue
		}
		var spec cdispec.Spec
		if json.Unmarshal(data, &spec) == nil {
			out[uid] = spec.Annotations[api.AnnotationPreparedClaim]
		}
	}
	return out, nil
}

// MIGCapMinors returns the minors of the /dev/nvidia-caps nodes granting access to GPU
// instance gi and its compute instance ci on the GPU with the given minor, read from
// the driver's <root>/proc/driver/nvidia-caps/mig-minors (where this process sees the
// driver root), or computed with the driver's
// numbering (config 1, monitor 2, then per GPU 15 GIs of 1+8 entries) when it is absent.
func (n Node) MIGCapMinors(gpuMinor, gi, ci int) (giMinor, ciMinor int, err error) {
	giKey := fmt.Sprintf("gpu%d/gi%d/access", gpuMinor, gi)
	ciKey := fmt.Sprintf("gpu%d/gi%d/ci%d/access", gpuMinor, gi, ci)
	f, err := os.Open(filepath.Join(cmp.Or(n.ContainerDriverRoot, n.root()), "proc/driver/nvidia-caps/mig-minors"))
	if errors.Is(err, fs.ErrNotExist) {
		base := 3 + gpuMinor*15*9 + gi*9
		return base, base + 1 + ci, nil
	}
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	giMinor, ciMinor = -1, -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok {
			continue
		}
		v, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil {
			continue
		}
		switch key {
		case giKey:
			giMinor = v
		case ciKey:
			ciMinor = v
		}
	}
	if giMinor < 0 || ciMinor < 0 {
		return 0, 0, fmt.Errorf("mig-minors has no entry for %s or %s", giKey, ciKey)
	}
	return giMinor, ciMinor, sc.Err()
}
