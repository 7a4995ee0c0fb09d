package placement

import (
	"fmt"
	"slices"
	"strings"
)

// GPUModel is what gpudra's device model needs to simulate a GPU that a trace names
// only by a short code.
type GPUModel struct {
	// Code is the trace's name, e.g. "V100M32".
	Code string
	// ProductName is the name NVML reports, published as the productName attribute.
	ProductName  string
	Architecture string
	MemoryMiB    int64
	// Multiprocessors is the SM count.
	Multiprocessors int
}

// Models are the GPU models of the Alibaba GPU traces. G1, G2 and G3 are undisclosed
// internal codes: their product names say so, and their memory and SM counts are
// placeholders (share claims ask for memory in proportion to compute, so the value
// does not change any placement).
var Models = []GPUModel{
	{"G1", "Alibaba G1 (undisclosed)", "unknown", 16384, 80},
	{"G2", "Alibaba G2 (undisclosed)", "unknown", 16384, 80},
	{"G3", "Alibaba G3 (undisclosed)", "unknown", 16384, 80},
	{"T4", "Tesla T4", "Turing", 15360, 40},
	{"P100", "Tesla P100-PCIE-16GB", "Pascal", 16384, 56},
	{"V100M16", "Tesla V100-SXM2-16GB", "Volta", 16384, 80},
	{"V100M32", "Tesla V100-SXM2-32GB", "Volta", 32768, 80},
	{"A10", "NVIDIA A10", "Ampere", 24576, 72},
}

// ModelByCode returns the model a trace code names, or an error naming the known codes.
func ModelByCode(code string) (GPUModel, error) {
	for _, m := range Models {
		if m.Code == code {
			return m, nil
		}
	}
	codes := make([]string, 0, len(Models))
	for _, m := range Models {
		codes = append(codes, m.Code)
	}
	return GPUModel{}, fmt.Errorf("unknown GPU model %q: known models are %s", code, strings.Join(codes, ", "))
}

// KnownModel reports whether code is a known model.
func KnownModel(code string) bool {
	return slices.ContainsFunc(Models, func(m GPUModel) bool { return m.Code == code })
}
