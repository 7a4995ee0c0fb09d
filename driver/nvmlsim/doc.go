// Package nvmlsim builds simulated NVML servers: go-nvml's nvml.Interface backed by
// go-nvml's mocks plus what they lack (NVLink, PCIe and NUMA topology, stable
// identities), together with a matching /sys view, described by a YAML Profile.
// Simulated servers are test doubles and demo aids, selected explicitly (for example
// --nvml=sim:dgx-v100); they are never a silent fallback for a host whose NVML fails.
//
// # Profile YAML
//
// A profile describes one node. Built-in profiles live in profiles/*.yaml; example.yaml
// documents every field. In short:
//
//	name: my-node                 # required, [a-z0-9-]
//	description: free text
//	base: dgxh100                 # optional: a go-nvml mock server (dgxa100, dgxh100, dgxh200, dgxb200)
//	model: H100_SXM5_80GB         # optional (instead of base): GPU from a go-nvml gpus.Config
//	count: 8                      # GPUs; defaults to 8 with base, required otherwise
//	driver:
//	  version: 535.161.08         # required without base
//	  cudaVersion: "12.2"         # required without base; NVML reports it as 12020
//	  nvmlVersion: 12.535.161.08  # default "<cuda major>.<version>"
//	gpu:                          # every field overrides base/model; required where neither gives it
//	  name: Tesla V100-SXM2-32GB
//	  brand: tesla                # nvidia, tesla, quadro, geforce, titan, nvidia-rtx, quadro-rtx, geforce-rtx, titan-rtx, grid, nvs
//	  architecture: volta         # volta, turing, ampere, ada, hopper, blackwell
//	  computeCapability: "7.0"
//	  memoryMiB: 32768
//	  multiprocessors: 80
//	  pciDeviceId: 0x1DB510DE
//	  mig: H100_SXM5_80GB         # MIG profile/placement tables of a gpus.Config, or "none"; with MIG
//	                              # tables memoryMiB must be their GPU's (NVML names MIG profiles from it)
//	  migEnabled: false           # MIG mode at start
//	pcie:
//	  roots:                      # every GPU in exactly one root, directly or behind a switch
//	  - name: pci0000:17          # root complex, "pci<domain>:<bus>" in hex
//	    numaNode: 0
//	    gpus: [0]                 # GPUs directly below a root port
//	    switches: [[1, 2]]        # GPUs sharing a PCIe switch
//	nvlink:                       # omit for PCIe-only GPUs
//	  linksPerGPU: 6              # default: the largest matrix row sum
//	  matrix: |                   # either a link-count matrix (square, symmetric, X diagonal, - = none)
//	    X 2 ...
//	  nvswitch:                   # or an NVSwitch fabric: every link goes to a switch
//	    count: 6
//	    pciDeviceId: 0x1AF110DE   # default by architecture
//
// Bus ids are assigned from the layout: below root pciDDDD:BB, in order of their first
// GPU, each switch or directly attached GPU takes a root port and the next free buses.
// UUIDs derive from the seed (the node name), the profile name and the GPU index.
//
// Simulated servers support NVML event sets (EventSetCreate, RegisterEvents, Wait,
// Free); Inject makes a GPU raise an XID, ECC, unavailable or lost event, and
// ParseEvent reads the "gpu=3 xid=79" lines labs use to ask for one.
package nvmlsim
