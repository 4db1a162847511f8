//go:build unix

package handler

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// execDrainMax bounds what Exec reads from one stream once the wait delay
// has passed: everything the command wrote before it exited is in the
// pipe by then (a pipe holds 64 KiB unless a program enlarges it), and a
// background process that keeps writing must not hold Exec forever.
const execDrainMax = 1 << 20

// execOutput carries a command's standard output and error to writers
// through pipes Exec owns, so that no line the command wrote before it
// exited is lost (issue 27). os/exec's own copying closes the pipes once
// its WaitDelay has passed after the exit, and drops what they still
// hold if its copying goroutine is late, as it is on a loaded machine.
// Here the delay is a read deadline instead: a copying goroutine that
// meets it reads what the pipe holds without waiting, then stops. Only a
// background process that writes after the delay loses output.
type execOutput struct {
	readers, writers []*os.File
	sinks            []io.Writer
	wg               sync.WaitGroup
}

// newExecOutput connects the command's stdout and stderr to the writers;
// a nil stdout is discarded (os/exec opens the null device).
func newExecOutput(cmd *exec.Cmd, stdout, stderr io.Writer, _ time.Duration) (*execOutput, error) {
	o := &execOutput{}
	for _, s := range []struct {
		w   io.Writer
		set *io.Writer
	}{{stdout, &cmd.Stdout}, {stderr, &cmd.Stderr}} {
		if s.w == nil {
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			o.closeAll()
			return nil, err
		}
		o.readers, o.writers, o.sinks = append(o.readers, r), append(o.writers, w), append(o.sinks, s.w)
		*s.set = w
	}
	return o, nil
}

// started closes the worker's copies of the pipes' write ends (the
// command holds its own) and starts copying. It is called whether or not
// the command started; if it did not, the copies see EOF at once.
func (o *execOutput) started() {
	for _, w := range o.writers {
		_ = w.Close()
	}
	for i, r := range o.readers {
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			copyOutput(r, o.sinks[i])
		}()
	}
}

// finish, called once the command has exited, waits for the copies to
// reach EOF, or for delay and then for the rest the pipes hold.
func (o *execOutput) finish(delay time.Duration) {
	deadline := time.Now().Add(delay)
	for _, r := range o.readers {
		if r.SetReadDeadline(deadline) != nil {
			// A pipe the poller cannot watch: close it after the delay,
			// dropping what it holds, as os/exec would.
			t := time.AfterFunc(delay, func() { _ = r.Close() })
			defer t.Stop()
		}
	}
	o.wg.Wait()
	o.closeAll()
}

func (o *execOutput) closeAll() {
	for _, f := range append(o.readers, o.writers...) {
		_ = f.Close()
	}
}

// copyOutput copies r to w until EOF, or until r's read deadline and then
// what r holds at that moment.
func copyOutput(r *os.File, w io.Writer) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			drainOutput(r, w, buf)
		}
		return
	}
}

// drainOutput copies what r holds now, without waiting for more.
func drainOutput(r *os.File, w io.Writer, buf []byte) {
	if r.SetReadDeadline(time.Time{}) != nil {
		return
	}
	rc, err := r.SyscallConn()
	if err != nil {
		return
	}
	for total := 0; total < execDrainMax; {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), buf)
			return true // never wait for more
		}); err != nil {
			return
		}
		switch {
		case rerr == syscall.EINTR:
			continue
		case rerr != nil || n <= 0:
			return // EAGAIN: the pipe is empty; 0: EOF
		}
		_, _ = w.Write(buf[:n])
		total += n
	}
}
