package mps

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// An MPS client and the MPS server that the control daemon starts for it share POSIX
// shared memory in /dev/shm, besides the sockets and FIFOs of the pipe directory: a
// client that sees its pod's own /dev/shm cannot work with a daemon that sees another.
// So each claim under MPS has a shm directory (cdi.MPS.ShmDir, beside the pipe and log
// directories) that its containers mount at /dev/shm and that its daemon sees as /dev/shm
// in a mount namespace of its own (Exec). As NVIDIA's DRA driver makes its per-claim
// MPS shm directory (cmd/gpu-kubelet-plugin/sharing.go), it is a tmpfs with a size limit,
// mounted by the plugin, gone with the claim; where the plugin may not mount (an
// unprivileged plugin: a simulated node, unit tests as a non-root user) it is a plain
// directory, and the plugin says so in its log.

// Modes of a claim's MPS directories. Its containers may run as any uid, and the control
// daemon runs each client's MPS server with the client's uid: clients and servers must
// reach the sockets and FIFOs the daemon makes in the pipe directory (they carry their
// own permissions), so the pipe and log directories are searchable and readable by all
// (0755, as NVIDIA's DRA driver creates them) and the directories above them, which the
// daemon's servers pass through, searchable by all (0711: the claims' UIDs are not
// listed). The shm directory is every client's and server's /dev/shm, where each creates
// its shared memory objects: writable by all, with the sticky bit (1777), as /dev/shm
// and the root of a tmpfs are.
const (
	TreeMode fs.FileMode = 0o711
	PipeMode fs.FileMode = 0o755
	LogMode  fs.FileMode = 0o755
	ShmMode              = fs.ModeSticky | 0o777
)

// mpsShmSource names the tmpfs mounts of the claims' shm directories (in mountinfo).
const mpsShmSource = "gpudra-mps-shm"

// mpsShmFlags are the tmpfs's mount flags, those of a container's /dev/shm.
const mpsShmFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// mpsShmBytes is the size limit of a claim's shm tmpfs: half the node's memory, as
// NVIDIA's DRA driver sizes it (and as the kernel sizes a tmpfs without one); 64 MiB,
// a container runtime's /dev/shm, where the node's memory is unknown. Pages count
// against the memory cgroup of the process that touches them first.
func mpsShmBytes() uint64 {
	var info unix.Sysinfo_t
	if err := unix.Sysinfo(&info); err != nil || info.Totalram == 0 {
		return 64 << 20
	}
	return uint64(info.Totalram) * uint64(info.Unit) / 2
}

// MountShm mounts a claim's shm tmpfs on dir.
func MountShm(dir string) error {
	opts := fmt.Sprintf("size=%d,mode=1777", mpsShmBytes()) // ShmMode
	return unix.Mount(mpsShmSource, dir, "tmpfs", mpsShmFlags, opts)
}

// MkdirMode makes dir with mode, or gives an existing dir that mode (a directory made
// by an earlier plugin, or under a umask that took some of it).
func MkdirMode(dir string, mode fs.FileMode) error {
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if info.Mode()&(fs.ModePerm|fs.ModeSticky) == mode {
		return nil
	}
	return os.Chmod(dir, mode)
}

// IsMountPoint reports whether something is mounted on dir: its device is not its
// parent's. false when dir does not exist.
func IsMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, &fs.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		return false, &fs.PathError{Op: "stat", Path: filepath.Dir(dir), Err: err}
	}
	return st.Dev != parent.Dev, nil
}

// UnmountShm unmounts whatever is mounted on a claim's shm directory (nothing for a
// plain directory, a missing one, or a claim recorded without one). A busy mount is
// detached: it goes when its last user does.
func UnmountShm(dir string) error {
	for range 8 { // stacked mounts, one at a time
		err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // not a mount point, or no directory
		case errors.Is(err, unix.EBUSY):
			if err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
				return fmt.Errorf("detaching the tmpfs on %s: %w", dir, err)
			}
			continue
		case errors.Is(err, unix.EPERM):
			// No privilege to unmount: fine when there is nothing to unmount.
			if mounted, merr := IsMountPoint(dir); merr == nil && !mounted {
				return nil
			}
			return fmt.Errorf("unmounting the tmpfs on %s: %w", dir, err)
		default:
			return fmt.Errorf("unmounting the tmpfs on %s: %w", dir, err)
		}
	}
	return fmt.Errorf("unmounting the tmpfs on %s: still mounted after 8 unmounts", dir)
}

// Mount is what the plugin needs of the mount that holds a path.
type Mount struct {
	MountPoint string
	Shared     bool // propagates mounts and unmounts to its peers ("shared:N")
	FSType     string
	Source     string
}

// MountOf finds, in /proc/self/mountinfo, the mount that holds path (the last one on
// the longest mount point above it).
func MountOf(path string) (Mount, error) {
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return !within(path, m.Mountpoint), false
	})
	if err != nil {
		return Mount{}, err
	}
	var best *mountinfo.Info
	for _, m := range mounts {
		if best == nil || len(m.Mountpoint) >= len(best.Mountpoint) {
			best = m
		}
	}
	if best == nil {
		return Mount{}, fmt.Errorf("no mount holds %s", path)
	}
	return Mount{
		MountPoint: best.Mountpoint,
		Shared:     slices.ContainsFunc(strings.Fields(best.Optional), func(f string) bool { return strings.HasPrefix(f, "shared:") }),
		FSType:     best.FSType,
		Source:     best.Source,
	}, nil
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// Unsearchable is the first directory from dir up to the root that users other than its
// owner cannot pass through (no search permission for others), "" when there is none.
func Unsearchable(dir string) (string, fs.FileMode) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if info, err := os.Stat(d); err == nil && info.Mode().Perm()&0o001 == 0 {
			return d, info.Mode().Perm()
		}
		if d == filepath.Dir(d) {
			return "", 0
		}
	}
}

// ExecCommand is the first argument with which Process runs the plugin's own
// program ("<program> mps-exec <shm dir> <binary> [args...]") in a mount namespace of its
// own, for Exec. The program's main must hand it to Exec.
const ExecCommand = "mps-exec"

// Exec binds args[0], a claim's shm directory, over /dev/shm and executes args[1] with
// args[1:] and this process's environment: how Process starts a claim's MPS control
// daemon, and talks to it, with the claim's shm directory as /dev/shm. It must run in a
// mount namespace of its own that does not propagate to its parent's (Process starts
// it with CLONE_NEWNS, which makes every mount private): it refuses to run in its
// parent's, where the bind would change the /dev/shm of the plugin and of every other
// claim's daemon. It returns only on failure.
func Exec(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: %s <shm dir> <program> [args...]", ExecCommand)
	}
	shm, bin := args[0], args[1]
	own, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("this process's mount namespace: %w", err)
	}
	parent, err := os.Readlink("/proc/" + strconv.Itoa(os.Getppid()) + "/ns/mnt")
	if err != nil {
		return fmt.Errorf("the parent's mount namespace: %w", err)
	}
	if own == parent {
		return fmt.Errorf("refusing to bind %s over /dev/shm in the parent's mount namespace (%s): run with a mount namespace of its own", shm, own)
	}
	if info, err := os.Stat(shm); err != nil || !info.IsDir() {
		return fmt.Errorf("the claim's shm directory %s: not a directory (%v)", shm, err)
	}
	if err := unix.Mount(shm, "/dev/shm", "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s over /dev/shm: %w", shm, err)
	}
	if err := unix.Exec(bin, args[1:], os.Environ()); err != nil {
		return fmt.Errorf("executing %s: %w", bin, err)
	}
	return nil
}
