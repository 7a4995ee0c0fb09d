package nvmlsim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// DriverLibraries are the user-space driver libraries WriteDriverFiles lays out, each as
// lib<name>.so.<driver version> with its lib<name>.so.1 link, as the driver installs them.
var DriverLibraries = []string{"libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler"}

// LibDir is where WriteDriverFiles puts the libraries, relative to the root: the
// multiarch directory nvidia-container-toolkit searches on this architecture.
func LibDir() string {
	switch runtime.GOARCH {
	case "amd64":
		return "usr/lib/x86_64-linux-gnu"
	case "arm64":
		return "usr/lib/aarch64-linux-gnu"
	}
	return "usr/lib64"
}

// WriteDriverFiles lays out, under root, the user-space files of the NVIDIA driver that
// the simulated profile (a built-in name or a .yaml path, as for Open) reports: empty
// DriverLibraries named for its driver version in LibDir, and usr/bin/nvidia-smi, a
// script that says it is simulated and fails. With them, nvcdi finds a driver in a lab's
// fake driver root and the CDI specs mount these files into containers as on a GPU node.
// Existing files are kept. It returns the driver version.
func WriteDriverFiles(root, profile string) (string, error) {
	server, _, err := Open(profile, "driver-files")
	if err != nil {
		return "", err
	}
	version, ret := server.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("simulated profile %s: driver version: %v", profile, ret)
	}
	libs := filepath.Join(root, LibDir())
	bin := filepath.Join(root, "usr/bin")
	for _, dir := range []string{libs, bin} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
	}
	for _, lib := range DriverLibraries {
		file := lib + ".so." + version
		if err := writeNew(filepath.Join(libs, file), nil, 0o644); err != nil {
			return "", err
		}
		if err := os.Symlink(file, filepath.Join(libs, lib+".so.1")); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	smi := fmt.Sprintf("#!/bin/sh\necho \"nvidia-smi: simulated NVIDIA driver %s (gpudra profile %s): no GPU to manage\" >&2\nexit 1\n", version, profile)
	if err := writeNew(filepath.Join(bin, "nvidia-smi"), []byte(smi), 0o755); err != nil {
		return "", err
	}
	return version, nil
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
