package convert

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/resource"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// NVIDIA's opaque configs (apiVersion resource.nvidia.com/v1beta1), as its API documents
// their fields. Decoding is strict, so a field this converter does not know is reported
// rather than dropped.
type nvConfig struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Sharing    *nvSharing `json:"sharing,omitempty"`
}

type nvSharing struct {
	Strategy          string         `json:"strategy"`
	TimeSlicingConfig *nvTimeSlicing `json:"timeSlicingConfig,omitempty"`
	MpsConfig         *nvMPS         `json:"mpsConfig,omitempty"`
}

// nvMigConfig is MigDeviceConfig: its sharing has no timeSlicingConfig.
type nvMigConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Sharing    *struct {
		Strategy  string `json:"strategy"`
		MpsConfig *nvMPS `json:"mpsConfig,omitempty"`
	} `json:"sharing,omitempty"`
}

type nvTimeSlicing struct {
	Interval *string `json:"interval,omitempty"`
}

type nvMPS struct {
	DefaultActiveThreadPercentage     *int                         `json:"defaultActiveThreadPercentage,omitempty"`
	DefaultPinnedDeviceMemoryLimit    *resource.Quantity           `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	DefaultPerDevicePinnedMemoryLimit map[string]resource.Quantity `json:"defaultPerDevicePinnedMemoryLimit,omitempty"`
	MultiUser                         *bool                        `json:"multiUser,omitempty"`
}

// configResult is a converted opaque config's parameters, or why there is none.
type configResult struct {
	params  *yaml.Node
	summary string // e.g. "GpuConfig, sharing MPS"
	whys    []fieldWhy
}

// fieldWhy is a reason tied to a field below the parameters.
type fieldWhy struct {
	field string // below parameters, "" for the object
	why   string
}

// convertConfig converts the parameters of an opaque config for driver gpu.nvidia.com.
func convertConfig(params *yaml.Node) configResult {
	var res configResult
	why := func(field, format string, args ...any) {
		res.whys = append(res.whys, fieldWhy{field, fmt.Sprintf(format, args...)})
	}
	if !isMap(params) {
		why("", "not an object")
		return res
	}
	var generic any
	if err := params.Decode(&generic); err != nil {
		why("", "cannot be read: %v", err)
		return res
	}
	raw, err := json.Marshal(generic)
	if err != nil {
		why("", "cannot be read: %v", err)
		return res
	}
	apiVersion, kind := text(params, "apiVersion"), text(params, "kind")
	if apiVersion != nvConfigAPIVersion {
		why("apiVersion", "%q: only NVIDIA's %s configs are converted", apiVersion, nvConfigAPIVersion)
		return res
	}
	var sharing *nvSharing
	var outKind string
	switch kind {
	case nvGpuConfig:
		var c nvConfig
		if !strictDecode(raw, &c, kind, why) {
			return res
		}
		sharing = c.Sharing
		outKind = api.GpuConfigKind
	case nvMigDeviceConfig:
		var c nvMigConfig
		if !strictDecode(raw, &c, kind, why) {
			return res
		}
		if c.Sharing != nil {
			sharing = &nvSharing{Strategy: c.Sharing.Strategy, MpsConfig: c.Sharing.MpsConfig}
		}
		outKind = api.MigConfigKind
	case "VfioDeviceConfig":
		why("kind", "VfioDeviceConfig configures VFIO passthrough, which gpudra does not offer")
		return res
	case "ComputeDomainChannelConfig", "ComputeDomainDaemonConfig":
		why("kind", "%s configures NVIDIA's ComputeDomains (IMEX), which gpudra does not offer", kind)
		return res
	default:
		why("kind", "%q: want %s or %s", kind, nvGpuConfig, nvMigDeviceConfig)
		return res
	}

	var s *api.Sharing
	if sharing != nil {
		s = &api.Sharing{Strategy: api.SharingStrategy(sharing.Strategy)}
		switch sharing.Strategy {
		case "TimeSlicing":
			if t := sharing.TimeSlicingConfig; t != nil {
				s.TimeSlicing = &api.TimeSlicingConfig{}
				if t.Interval != nil {
					s.TimeSlicing.Interval = api.TimeSliceInterval(*t.Interval)
				}
			}
			if sharing.MpsConfig != nil {
				why("sharing.mpsConfig", "set with strategy TimeSlicing; NVIDIA's driver refuses it too")
			}
		case "MPS":
			if m := sharing.MpsConfig; m != nil {
				s.MPS = &api.MPSConfig{
					DefaultActiveThreadPercentage:  m.DefaultActiveThreadPercentage,
					DefaultPinnedDeviceMemoryLimit: m.DefaultPinnedDeviceMemoryLimit,
				}
				if len(m.DefaultPerDevicePinnedMemoryLimit) > 0 {
					why("sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit", "per-device pinned memory limits have no gpudra equivalent: gpudra's sharing.mps.defaultPinnedDeviceMemoryLimit applies to every device of the claim")
				}
				if m.MultiUser != nil {
					why("sharing.mpsConfig.multiUser", "gpudra's MPS control daemons have no multi-user mode")
				}
			}
			if sharing.TimeSlicingConfig != nil {
				why("sharing.timeSlicingConfig", "set with strategy MPS; NVIDIA's driver refuses it too")
			}
		default:
			why("sharing.strategy", "%q: want TimeSlicing or MPS", sharing.Strategy)
		}
	}
	node := configNode(outKind, s)
	if err := validateEmitted(node); err != nil {
		var fe *field.Error
		var agg utilerrors.Aggregate
		switch {
		case errors.As(err, &agg):
			for _, e := range agg.Errors() {
				if errors.As(e, &fe) {
					why(nvField(fe.Field), "%s; gpudra's %s takes: %s", valueOf(fe), outKind, fe.Detail)
				} else {
					why("", "as gpudra's %s it is not valid: %v", outKind, e)
				}
			}
		case errors.As(err, &fe):
			why(nvField(fe.Field), "%s; gpudra's %s takes: %s", valueOf(fe), outKind, fe.Detail)
		default:
			why("", "as gpudra's %s it is not valid: %v", outKind, err)
		}
	}
	if len(res.whys) > 0 {
		return res
	}
	res.params = node
	res.summary = outKind
	if s != nil {
		res.summary += ", sharing " + string(s.Strategy)
	}
	return res
}

func strictDecode(raw []byte, into any, kind string, why func(field, format string, args ...any)) bool {
	strict, err := sigsjson.UnmarshalStrict(raw, into, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		why("", "cannot be read as NVIDIA's %s: %v", kind, err)
		return false
	}
	for _, e := range strict {
		msg := e.Error()
		if name, ok := strings.CutPrefix(msg, "unknown field "); ok {
			why(strings.Trim(name, `"`), "not a field of NVIDIA's %s this converter knows; no gpudra equivalent", kind)
			continue
		}
		why("", "%s: %s", kind, msg)
	}
	return len(strict) == 0
}

// nvField names NVIDIA's field for a field of gpudra's config.
func nvField(f string) string {
	f = strings.Replace(f, "sharing.mps.", "sharing.mpsConfig.", 1)
	return strings.Replace(f, "sharing.timeSlicing.", "sharing.timeSlicingConfig.", 1)
}

func valueOf(fe *field.Error) string {
	if fe.BadValue == nil || fe.Type == field.ErrorTypeRequired || fe.Type == field.ErrorTypeForbidden {
		return fe.Type.String()
	}
	return fmt.Sprintf("%v", fe.BadValue)
}

// configNode writes a gpudra config as YAML, fields in the order the docs show them.
func configNode(kind string, s *api.Sharing) *yaml.Node {
	n := mapping("apiVersion", api.APIVersion, "kind", kind)
	if s == nil {
		return n
	}
	sh := mapping("strategy", string(s.Strategy))
	if t := s.TimeSlicing; t != nil {
		ts := mapping()
		if t.Interval != "" {
			set(ts, "interval", str(string(t.Interval)))
		}
		set(sh, "timeSlicing", ts)
	}
	if m := s.MPS; m != nil {
		mps := mapping()
		if m.DefaultActiveThreadPercentage != nil {
			set(mps, "defaultActiveThreadPercentage", integer(int64(*m.DefaultActiveThreadPercentage)))
		}
		if m.DefaultPinnedDeviceMemoryLimit != nil {
			set(mps, "defaultPinnedDeviceMemoryLimit", str(m.DefaultPinnedDeviceMemoryLimit.String()))
		}
		set(sh, "mps", mps)
	}
	set(n, "sharing", sh)
	return n
}

// validateEmitted decodes the YAML that will be written with gpudra's strict decoder and
// validates it with its defaults, as the webhook and the kubelet plugin do.
func validateEmitted(n *yaml.Node) error {
	data, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	obj, err := api.Decode(data)
	if err != nil {
		return err
	}
	obj.Normalize()
	return obj.Validate()
}
