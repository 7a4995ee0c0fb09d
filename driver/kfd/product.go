package kfd

import "fmt"

// amdProducts names AMD Instinct GPUs by PCI device id, for kernels whose amdgpu does
// not print product_name.
var amdProducts = map[uint64]string{
	0x738c: "AMD Instinct MI100",
	0x740f: "AMD Instinct MI210",
	0x7408: "AMD Instinct MI250X",
	0x740c: "AMD Instinct MI250X / MI250",
	0x74a0: "AMD Instinct MI300A",
	0x74a1: "AMD Instinct MI300X",
	0x74a5: "AMD Instinct MI325X",
	0x74b5: "AMD Instinct MI300X VF",
}

// productName is the GPU's marketing name: amdgpu's product_name where it prints one,
// else a known AMD device id's name, else vendor and ISA ("Hygon DCU gfx906").
func productName(vendor string, deviceID uint64, gfx, sysfsName string) string {
	if sysfsName != "" && len(sysfsName) <= 64 {
		return sysfsName
	}
	switch vendor {
	case "hygon":
		return fmt.Sprintf("Hygon DCU %s", gfx)
	default:
		if n, ok := amdProducts[deviceID]; ok {
			return n
		}
		return fmt.Sprintf("AMD %s", gfx)
	}
}
