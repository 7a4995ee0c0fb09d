// Package deployments holds what gets installed into a cluster: DeviceClasses, and
// (as they arrive) the Helm chart, RBAC, Kueue samples and worked examples. The Go side
// only embeds the DeviceClasses so tools and tests use exactly the shipped objects.
package deployments

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"io"

	resourceapi "k8s.io/api/resource/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

//go:embed deviceclasses/*.yaml
var deviceClasses embed.FS

// KueueConfiguration is the Kueue controller configuration gpudra needs
// (kueue/config/kueue-config.yaml): DRA device-class mappings, integrations, waitForPodsReady.
//
//go:embed kueue/config/kueue-config.yaml
var KueueConfiguration []byte

// SchedulerConfiguration is gpudra-scheduler's KubeSchedulerConfiguration
// (scheduler/scheduler-config.yaml): the default profile with GPU fragmentation scoring,
// and the gpudra-fragmentation profile that scores by it alone.
//
//go:embed scheduler/scheduler-config.yaml
var SchedulerConfiguration []byte

// DeviceClasses returns the DeviceClasses gpudra ships.
func DeviceClasses() ([]*resourceapi.DeviceClass, error) {
	entries, err := deviceClasses.ReadDir("deviceclasses")
	if err != nil {
		return nil, err
	}
	var out []*resourceapi.DeviceClass
	for _, e := range entries {
		data, err := deviceClasses.ReadFile("deviceclasses/" + e.Name())
		if err != nil {
			return nil, err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.Name(), err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var dc resourceapi.DeviceClass
			if err := yaml.UnmarshalStrict(doc, &dc); err != nil {
				return nil, fmt.Errorf("%s: %w", e.Name(), err)
			}
			out = append(out, &dc)
		}
	}
	return out, nil
}

// chartValues is the Helm chart's values.yaml: what a default install configures.
//
//go:embed helm/gpudra/values.yaml
var chartValues []byte

// MIGLayouts is the file of MIG layouts the chart installs by default (its value
// kubeletPlugin.migLayouts, in mig-parted's format), as the kubelet plugin's --mig-layouts
// reads it. The lab gives it to plugins it runs as processes, so that a node label names the
// same layouts as on a cluster installed with the chart.
func MIGLayouts() ([]byte, error) {
	var values struct {
		KubeletPlugin struct {
			MIGLayouts map[string]any `json:"migLayouts"`
		} `json:"kubeletPlugin"`
	}
	if err := yaml.Unmarshal(chartValues, &values); err != nil {
		return nil, fmt.Errorf("the chart's values.yaml: %w", err)
	}
	if len(values.KubeletPlugin.MIGLayouts) == 0 {
		return nil, fmt.Errorf("the chart's values.yaml sets no kubeletPlugin.migLayouts")
	}
	return yaml.Marshal(values.KubeletPlugin.MIGLayouts)
}
