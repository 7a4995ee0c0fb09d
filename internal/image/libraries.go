package image

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// extraLibraries are the C libraries an image of a cgo binary carries besides the binary's
// own (ldd): the glibc parts NVIDIA's libnvidia-ml.so, which go-nvml loads with dlopen from
// the host's driver root, links against.
var extraLibraries = []string{"libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"}

// Libraries are the absolute paths on this machine of the C libraries binaries need in an
// image: those ldd says they load (the dynamic loader included) and, beside them, the glibc
// libraries libnvidia-ml.so loads. Sorted; none for static binaries.
func Libraries(binaries ...string) ([]string, error) {
	libs := map[string]bool{}
	for _, bin := range binaries {
		deps, err := sharedLibraries(bin)
		if err != nil {
			return nil, err
		}
		for _, l := range deps {
			libs[l] = true
		}
	}
	for l := range libs {
		for _, extra := range extraLibraries {
			if p := filepath.Join(filepath.Dir(l), extra); exists(p) {
				libs[p] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(libs)), nil
}

// HostFiles are the files at paths on this machine (links followed) as image files at the
// same paths.
func HostFiles(paths []string) ([]File, error) {
	var files []File
	for _, p := range paths {
		data, err := os.ReadFile(p) // follows the link to the library itself
		if err != nil {
			return nil, fmt.Errorf("image file: %w", err)
		}
		files = append(files, File{Path: strings.TrimPrefix(p, "/"), Mode: 0o755, Data: data})
	}
	return files, nil
}

// sharedLibraries lists the absolute paths of the shared libraries ldd says bin loads; a
// static binary loads none.
func sharedLibraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w\n%s", bin, err, out)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0]) // the dynamic loader
		}
	}
	return libs, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
