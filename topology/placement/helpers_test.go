package placement

// node builds a node with the given CPU left (of 96000) and per-GPU milli left.
func node(model string, cpuFree int64, gpuFree ...int64) *Node {
	n := NewNode(NodeSpec{Name: "n", CPU: 96000, Memory: 1 << 20, GPUs: len(gpuFree), Model: model}, 0)
	n.CPUFree = cpuFree
	copy(n.GPUFree, gpuFree)
	return n
}

// share is a pod asking for milli of one GPU; whole, for k whole GPUs.
func share(cpu, milli int64) *Pod { return &Pod{Name: "p", CPU: cpu, GPUs: 1, GPUMilli: milli} }
func whole(cpu int64, k int) *Pod { return &Pod{Name: "p", CPU: cpu, GPUs: k, GPUMilli: 1000} }
func cpuOnly(cpu int64) *Pod      { return &Pod{Name: "p", CPU: cpu} }
