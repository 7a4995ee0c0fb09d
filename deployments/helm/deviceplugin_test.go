package helm_test

import (
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// extendedResourceNames maps each rendered DeviceClass to its extendedResourceName ("" for none).
func extendedResourceNames(m manifest) map[string]string {
	out := map[string]string{}
	for _, o := range m.all("DeviceClass") {
		c := o.(*resourceapi.DeviceClass)
		out[c.Name] = ""
		if c.Spec.ExtendedResourceName != nil {
			out[c.Name] = *c.Spec.ExtendedResourceName
		}
	}
	return out
}

// TestDevicePluginNames proves deviceClasses.devicePluginNames and migProfiles: by default
// gpu.gpudra.dev is nvidia.com/gpu and every listed profile has its class; false drops both
// and keeps the other classes as they are; a cluster's own profile list replaces the
// default one, and the MIG classes take the mig class's default config.
func TestDevicePluginNames(t *testing.T) {
	def := extendedResourceNames(render(t))
	if def[api.DeviceClassGPU] != api.ExtendedResourceNVIDIAGPU {
		t.Errorf("default: %s has extendedResourceName %q, want %s", api.DeviceClassGPU, def[api.DeviceClassGPU], api.ExtendedResourceNVIDIAGPU)
	}
	for _, p := range []string{"1g.10gb", "1g.5gb+me", "3g.71gb", "4g.24gb"} {
		if got := def[api.DeviceClassMIGProfile(p)]; got != api.ExtendedResourceNVIDIAMIG(p) {
			t.Errorf("default: DeviceClass %s has extendedResourceName %q, want %s", api.DeviceClassMIGProfile(p), got, api.ExtendedResourceNVIDIAMIG(p))
		}
	}

	off := extendedResourceNames(render(t, "deviceClasses.devicePluginNames=false"))
	for name, ext := range off {
		if strings.HasPrefix(name, "mig-") || strings.HasPrefix(ext, "nvidia.com/") {
			t.Errorf("devicePluginNames=false renders DeviceClass %s (extendedResourceName %q)", name, ext)
		}
	}
	for _, name := range []string{api.DeviceClassGPU, api.DeviceClassShare, api.DeviceClassMIG, api.DeviceClassNVLinkGroup} {
		if ext, ok := off[name]; !ok || ext != "" {
			t.Errorf("devicePluginNames=false: DeviceClass %s rendered %v with extendedResourceName %q", name, ok, ext)
		}
	}
	for _, n := range []int{2, 4, 8} {
		if got := off[api.DeviceClassNVLinkGroupOf(n)]; got != api.ExtendedResourceNVLinkGroupOf(n) {
			t.Errorf("devicePluginNames=false: %s has extendedResourceName %q, want %s", api.DeviceClassNVLinkGroupOf(n), got, api.ExtendedResourceNVLinkGroupOf(n))
		}
	}

	own := render(t, `deviceClasses.migProfiles=["1g.12gb","1g.12gb+me"]`, `deviceClasses.mig.config={"apiVersion":"gpu.gpudra.dev/v1alpha1","kind":"GpuConfig"}`)
	var mig []string
	for name := range extendedResourceNames(own) {
		if strings.HasPrefix(name, "mig-") {
			mig = append(mig, name)
		}
	}
	slices.Sort(mig)
	if want := []string{"mig-1g.12gb.gpudra.dev", "mig-1g.12gb.me.gpudra.dev"}; !slices.Equal(mig, want) {
		t.Errorf("migProfiles [1g.12gb, 1g.12gb+me]: MIG-profile classes %v, want %v", mig, want)
	}
	c := own.get("DeviceClass", "mig-1g.12gb.me.gpudra.dev").(*resourceapi.DeviceClass)
	if want := `device.attributes["gpu.gpudra.dev"].migProfile == "1g.12gb+me"`; len(c.Spec.Selectors) != 1 || !strings.HasSuffix(c.Spec.Selectors[0].CEL.Expression, want) {
		t.Errorf("mig-1g.12gb.me.gpudra.dev: selectors %+v, want one ending in %s", c.Spec.Selectors, want)
	}
	if len(c.Spec.Config) != 1 || c.Spec.Config[0].Opaque == nil || c.Spec.Config[0].Opaque.Driver != api.DriverName {
		t.Errorf("mig-1g.12gb.me.gpudra.dev: config %+v, want deviceClasses.mig.config", c.Spec.Config)
	}
}

// TestBadDevicePluginValuesAreRefused: values that would render broken or clashing
// DeviceClasses fail the install, naming the value.
func TestBadDevicePluginValuesAreRefused(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{`deviceClasses.devicePluginNames=yes`, `deviceClasses.devicePluginNames=yes: want true or false`},
		{`deviceClasses.migProfiles=["1G.10GB"]`, `deviceClasses.migProfiles: 1G.10GB is not a MIG profile name`},
		{`deviceClasses.migProfiles=["1g.10gb\"x"]`, `is not a MIG profile name`},
		{`deviceClasses.migProfiles=["1g.10gb.me","1g.10gb+me"]`, `deviceClasses.migProfiles: 1g.10gb.me and 1g.10gb+me are both DeviceClass mig-1g.10gb.me.gpudra.dev`},
	} {
		out, err := template(t, []string{tc.set})
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: err %v, output should name %s:\n%s", tc.set, err, tc.want, out)
		}
	}
}
