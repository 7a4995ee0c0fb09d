// Package nvmlbackend is where a gpudra binary chooses what discovery reads: the real NVML
// library or, only when asked for by name, a simulated node.
package nvmlbackend

import (
	"fmt"
	"strings"

	"github.com/gpudra/gpudra/driver/discover"
	"github.com/gpudra/gpudra/driver/nvmlsim"
	"github.com/gpudra/gpudra/driver/simulated"
)

// Open opens the backend named by spec (the --nvml flag):
//
//	"" or "nvml"        the real NVML library (libnvidia-ml.so.1), the default
//	"sim:<profile>"     a built-in simulated node (see nvmlsim.BuiltinNames)
//	"sim:<file.yaml>"   a simulated node described by a profile file
//
// seed makes simulated identities stable and distinct per node; real NVML ignores it. A
// real library that cannot be loaded is an error, never a silent switch to a simulated
// node. The returned backend is initialised; call Close.
func Open(spec, seed string) (*discover.Backend, error) {
	switch {
	case spec == "" || spec == "nvml":
		b, err := discover.OpenNVML()
		if err != nil {
			return nil, fmt.Errorf("%w; to try gpudra without a GPU, pass --nvml=sim:<profile> (built-in: %s)", err, strings.Join(nvmlsim.BuiltinNames(), ", "))
		}
		return b, nil
	case strings.HasPrefix(spec, "sim:"):
		b, err := simulated.Open(strings.TrimPrefix(spec, "sim:"), seed)
		if err != nil {
			return nil, fmt.Errorf("--nvml=%s: %w", spec, err)
		}
		return b, nil
	default:
		return nil, fmt.Errorf("--nvml=%q: accepted values are \"nvml\" (the real library, default), \"sim:<profile>\" with a built-in profile (%s) or \"sim:<path to a profile .yaml>\"",
			spec, strings.Join(nvmlsim.BuiltinNames(), ", "))
	}
}
