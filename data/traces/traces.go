// Package traces ships the public GPU cluster traces that `gpudra sim` replays: Alibaba's
// cluster-trace-gpu-v2023 ("openb", CC BY 4.0; see alibaba-gpu-v2023/README.md), embedded so
// that the simulator runs from any directory and from an installed binary.
package traces

import (
	"embed"
	"io/fs"
)

//go:embed alibaba-gpu-v2023/*.csv
var files embed.FS

// AlibabaGPU2023Dir is the folder of the Alibaba traces in this package, and so in the
// repository: data/traces/alibaba-gpu-v2023.
const AlibabaGPU2023Dir = "alibaba-gpu-v2023"

// AlibabaGPU2023 is the Alibaba openb traces: openb_node_list_gpu_node.csv,
// openb_pod_list_default.csv and the other pod lists, at its root.
func AlibabaGPU2023() fs.FS {
	sub, err := fs.Sub(files, AlibabaGPU2023Dir)
	if err != nil {
		panic(err) // fs.Sub fails only on an invalid name, and this one is a constant
	}
	return sub
}
