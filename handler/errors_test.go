package handler_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/adaptq/adaptq/handler"
)

type permErr struct{ perm bool }

func (e permErr) Error() string   { return fmt.Sprintf("perm=%v", e.perm) }
func (e permErr) Permanent() bool { return e.perm }

func TestPermanentNil(t *testing.T) {
	if err := handler.Permanent(nil); err != nil {
		t.Fatalf("Permanent(nil) = %v, want nil", err)
	}
	if handler.IsPermanent(nil) {
		t.Fatal("IsPermanent(nil) = true")
	}
}

func TestIsPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("bad input")
	pathErr := &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}
	tests := []struct {
		name      string
		err       error
		permanent bool
		is        error // must still be reachable with errors.Is, if set
	}{
		{"plain error", base, false, base},
		{"marked", handler.Permanent(base), true, base},
		{"marked twice", handler.Permanent(handler.Permanent(base)), true, base},
		{"wrapped once", fmt.Errorf("step: %w", handler.Permanent(base)), true, base},
		{"wrapped twice", fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", handler.Permanent(base))), true, base},
		{"marked around wrapping", handler.Permanent(fmt.Errorf("ctx: %w", base)), true, base},
		{"in a join", errors.Join(errors.New("other"), handler.Permanent(base)), true, base},
		{"typed error kept", fmt.Errorf("x: %w", handler.Permanent(pathErr)), true, fs.ErrNotExist},
		{"own type, true", fmt.Errorf("x: %w", permErr{true}), true, nil},
		{"own type, false", fmt.Errorf("x: %w", permErr{false}), false, nil},
		{"panic error is never permanent", &handler.PanicError{Value: handler.Permanent(base)}, false, base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := handler.IsPermanent(tt.err); got != tt.permanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", tt.err, got, tt.permanent)
			}
			if tt.is != nil && !errors.Is(tt.err, tt.is) {
				t.Errorf("errors.Is(%v, %v) = false", tt.err, tt.is)
			}
		})
	}
}

func TestPermanentKeepsTextAndAs(t *testing.T) {
	t.Parallel()
	pathErr := &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}
	err := fmt.Errorf("load: %w", handler.Permanent(pathErr))
	if got, want := err.Error(), "load: "+pathErr.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe != pathErr {
		t.Errorf("errors.As did not reach the *fs.PathError: %v", pe)
	}
}
