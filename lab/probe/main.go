// gpudra-lab-probe is the program of the lab's two local container images (no registry is
// reachable from a lab): "pause" is the pod sandbox, which waits for SIGTERM; "report" (the
// default) prints what the container received from gpudra's CDI spec — GPU device nodes
// (NVIDIA's, and AMD's /dev/kfd and /dev/dri/*), the environment that sets sharing limits
// and visible devices, extra mounts — and then waits, so that a test can read the report
// from the container's log while the pod runs.
//
// Report lines, one fact each:
//
//	device /dev/nvidia0 char 195:0
//	env NVIDIA_VISIBLE_DEVICES=0
//	mount /tmp/nvidia-mps
//	probe-report-done
package main

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// envPrefixes are the variables the report prints: what NVIDIA's container stack, CUDA, MPS,
// HAMi-core, ROCm and gpudra set.
var envPrefixes = []string{"NVIDIA_", "CUDA_", "GPUDRA_", "LD_PRELOAD", "ROCR_", "HIP_"}

// standardMounts are the mount points every container has; the report leaves them out.
var standardMounts = []string{"/", "/proc", "/dev", "/sys", "/dev/pts", "/dev/mqueue", "/dev/shm",
	"/sys/fs/cgroup", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/dev/termination-log"}

func main() {
	mode := "report"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch mode {
	case "pause":
	case "report":
		report(os.Stdout)
	default:
		fmt.Fprintf(os.Stderr, "usage: %s [report|pause]\n", os.Args[0])
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
}

func report(w io.Writer) {
	_ = filepath.WalkDir("/dev", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if path != "/dev" && path != "/dev/nvidia-caps" && path != "/dev/dri" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(filepath.Base(path), "nvidia") && path != "/dev/kfd" && filepath.Dir(path) != "/dev/dri" {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			fmt.Fprintf(w, "device %s error %v\n", path, err)
			return nil
		}
		kind := "other"
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR:
			kind = "char"
		case unix.S_IFBLK:
			kind = "block"
		}
		fmt.Fprintf(w, "device %s %s %d:%d\n", path, kind, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		return nil
	})
	env := os.Environ()
	slices.Sort(env)
	for _, kv := range env {
		for _, p := range envPrefixes {
			if strings.HasPrefix(kv, p) {
				fmt.Fprintf(w, "env %s\n", kv)
				break
			}
		}
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// mountinfo: id parent major:minor root mount-point options ...
			fields := strings.Fields(sc.Text())
			if len(fields) < 5 {
				continue
			}
			mp := fields[4]
			if mp == "/dev/shm" {
				// Where the container's /dev/shm comes from (the mount's root in its
				// filesystem): an MPS claim's containers share the claim's shm directory.
				mode := "?"
				if st, err := os.Stat(mp); err == nil {
					mode = fmt.Sprintf("%o", st.Mode()&(fs.ModePerm|fs.ModeSticky))
					if st.Mode()&fs.ModeSticky != 0 {
						mode = "sticky-" + fmt.Sprintf("%o", st.Mode()&fs.ModePerm)
					}
				}
				fmt.Fprintf(w, "shm %s %s\n", fields[3], mode)
			}
			if slices.Contains(standardMounts, mp) || strings.HasPrefix(mp, "/proc/") || strings.HasPrefix(mp, "/sys/") ||
				strings.HasPrefix(mp, "/dev/nvidia") {
				continue
			}
			fmt.Fprintf(w, "mount %s\n", mp)
		}
		f.Close()
	}
	// The libraries the dynamic loader preloads in every process (HAMi-core's shares).
	if b, err := os.ReadFile("/etc/ld.so.preload"); err == nil {
		fmt.Fprintf(w, "preload %s\n", strings.Join(strings.Fields(string(b)), " "))
	}
	// What the CDI specs' nvidia-cdi-hook hooks leave in the container's root: the linker
	// cache update-ldcache writes and the links create-symlinks makes in the library folders.
	if st, err := os.Stat("/etc/ld.so.cache"); err == nil {
		fmt.Fprintf(w, "file /etc/ld.so.cache %d\n", st.Size())
	}
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.Type()&fs.ModeSymlink != 0 {
				if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
					fmt.Fprintf(w, "link %s -> %s\n", filepath.Join(dir, e.Name()), target)
				}
			}
		}
	}
	// An MPS claim's pipe directory: what its control daemon left there.
	if entries, err := os.ReadDir("/tmp/nvidia-mps"); err == nil {
		for _, e := range entries {
			fmt.Fprintf(w, "file %s\n", filepath.Join("/tmp/nvidia-mps", e.Name()))
		}
	}
	fmt.Fprintln(w, "probe-report-done")
}
