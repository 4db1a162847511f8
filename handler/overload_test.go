package handler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/adaptq/adaptq/handler"
)

func TestIsOverloaded(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{handler.Overloaded(errors.New("pool exhausted")), true},
		{fmt.Errorf("wrapped: %w", handler.Overloaded(errors.New("busy"))), true},
		{&handler.StatusError{StatusCode: 429}, true},
		{&handler.StatusError{StatusCode: 503}, true},
		{&handler.StatusError{StatusCode: 500}, false},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), true},
		{context.Canceled, false},
		// A panic is a bug, whatever its value: as it is never permanent,
		// it is never overload (under auto it would be excused from
		// poisoning, and a crashing message retried until it expires).
		{&handler.PanicError{Value: fmt.Errorf("call: %w", context.DeadlineExceeded)}, false},
		{&handler.PanicError{Value: handler.Overloaded(errors.New("busy"))}, false},
		{fmt.Errorf("run: %w", &handler.PanicError{Value: &handler.StatusError{StatusCode: 503}}), false},
	} {
		if got := handler.IsOverloaded(c.err); got != c.want {
			t.Errorf("IsOverloaded(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if handler.Overloaded(nil) != nil {
		t.Error("Overloaded(nil) is not nil")
	}
	base := errors.New("busy")
	if err := handler.Overloaded(base); !errors.Is(err, base) || err.Error() != "busy" {
		t.Errorf("Overloaded changed the error: %v", err)
	}
}
