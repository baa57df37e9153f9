package jepsen

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// CrashFS is a crash file system (crates/mmapkit-crashfs, driven by its
// `crashfs-mount` binary) under a node's data directory: it forgets what
// the node did not sync when the node loses power.
type CrashFS struct {
	Path    string // the mount point
	backing string
	cmd     *exec.Cmd
	in      io.WriteCloser
	lines   chan string
}

// crashfsPatience bounds every answer of crashfs-mount (a crash writes
// the survivor of the whole file system to its backing directory).
const crashfsPatience = 60 * time.Second

// MountCrashFS mounts a crash file system over backing (what it holds is
// what the disk holds now).
func MountCrashFS(bin, backing string) (*CrashFS, error) {
	cmd := exec.Command(bin, backing)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	// The mount goes with the test process, even when that is killed
	// (crashfs-mount unmounts cleanly at the end of its stdin).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	f := &CrashFS{backing: backing, cmd: cmd, in: in, lines: make(chan string, 4)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f.lines <- sc.Text()
		}
		close(f.lines)
	}()
	line, err := f.answer()
	if err != nil || !strings.HasPrefix(line, "mounted ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("crashfs-mount %s: %q, %v: %s", backing, line, err, stderr.String())
	}
	f.Path = strings.TrimPrefix(line, "mounted ")
	return f, nil
}

func (f *CrashFS) answer() (string, error) {
	select {
	case line, ok := <-f.lines:
		if !ok {
			return "", fmt.Errorf("crashfs-mount %s exited", f.backing)
		}
		return line, nil
	case <-time.After(crashfsPatience):
		return "", fmt.Errorf("crashfs-mount %s: no answer within %v", f.backing, crashfsPatience)
	}
}

func (f *CrashFS) do(command, want string) error {
	if _, err := fmt.Fprintln(f.in, command); err != nil {
		return fmt.Errorf("crashfs-mount %s: %s: %w", f.backing, command, err)
	}
	got, err := f.answer()
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("crashfs-mount %s: %s answered %q", f.backing, command, got)
	}
	return nil
}

// Freeze cuts the power: every later request of the node hangs (kill it
// next, then Crash).
func (f *CrashFS) Freeze() error { return f.do("freeze", "frozen") }

// Crash leaves in the backing directory what a power loss would have
// (a seeded random subset of what was not synced) and unmounts.
func (f *CrashFS) Crash(seed int64) error {
	err := f.do(fmt.Sprintf("crash %d", uint64(seed)), "crashed")
	_ = f.cmd.Wait()
	return err
}

// Unmount writes everything to the backing directory (a clean shutdown).
func (f *CrashFS) Unmount() {
	_ = f.in.Close()
	done := make(chan struct{})
	go func() { _ = f.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(crashfsPatience):
		_ = f.cmd.Process.Kill()
		<-done
	}
}
