package handler_test

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/adaptq/adaptq/handler"
)

func TestIsWorkerFault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("too many open files"), false}, // text is not enough: the errno decides
		{&os.PathError{Op: "open", Path: "/dev/null", Err: syscall.EMFILE}, true},
		{fmt.Errorf("exec: %w", os.NewSyscallError("pipe2", syscall.ENFILE)), true},
		{fmt.Errorf("fork/exec: %w", syscall.ENOMEM), true},
		{syscall.ECONNREFUSED, false},
		{handler.WorkerFault(errors.New("no thread")), true},
		{handler.Permanent(fmt.Errorf("x: %w", syscall.EMFILE)), true},
	} {
		if got := handler.IsWorkerFault(tc.err); got != tc.want {
			t.Errorf("IsWorkerFault(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if handler.WorkerFault(nil) != nil {
		t.Error("WorkerFault(nil) is not nil")
	}
}
