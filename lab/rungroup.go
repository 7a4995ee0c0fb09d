package lab

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// runGroup runs cmd (made by exec.CommandContext with ctx) in a process group of its own, copying its stdout and stderr to the given
// writers, and returns once cmd's own process has exited. Whatever it left running in its group
// is killed then: a child that outlives its parent (a sleep behind a progress ticker) would
// otherwise hold the output pipes open and keep the caller waiting for output that never comes.
// When ctx ends, the whole group gets SIGTERM, and SIGKILL 10 s later.
func runGroup(ctx context.Context, cmd *exec.Cmd, stdout, stderr io.Writer) error {
	var (
		copies  sync.WaitGroup
		readers []*os.File
	)
	// The child writes into pipes of our own (*os.File: exec starts no copying goroutine and
	// Wait does not wait for the pipes to close); we copy from them.
	pipe := func(dst io.Writer) (*os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		readers = append(readers, r)
		copies.Go(func() { _, _ = io.Copy(dst, r) })
		return w, nil
	}
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	outW, err := pipe(stdout)
	if err != nil {
		return err
	}
	errW, err := pipe(stderr)
	if err != nil {
		closeAll(outW)
		closeAll(readers...)
		return err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Start()
	closeAll(outW, errW) // the child has its own copies
	if err != nil {
		closeAll(readers...)
		copies.Wait()
		return err
	}
	err = cmd.Wait()
	if kerr := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
		err = errors.Join(err, kerr)
	}
	// A process that left the group (setsid) may still hold a pipe: give the copies a moment
	// to drain what was written, then stop reading.
	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
	}
	closeAll(readers...) // ends the copies still reading
	<-drained
	return err
}

// tailWriter keeps the last bytes written to it, for an error that quotes a command's last
// lines of output.
type tailWriter struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// lines returns the last n lines written.
func (t *tailWriter) lines(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return lastLines(string(t.buf), n)
}
