package handler_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

func nop(context.Context, *queue.Message) error { return nil }

func TestRegistryHandleErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		queue   string
		h       handler.Func
		wantIs  error
		wantMsg string // the error must name this
	}{
		{"empty name", "", nop, queue.ErrInvalidName, `""`},
		{"too short", "ab", nop, queue.ErrInvalidName, `"ab"`},
		{"uppercase", "Orders", nop, queue.ErrInvalidName, `"Orders"`},
		{"underscore", "my_orders", nop, queue.ErrInvalidName, `"my_orders"`},
		{"nil func", "orders", nil, nil, `"orders"`},
		{"duplicate", "existing", nop, handler.ErrDuplicate, `"existing"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var r handler.Registry
			r.MustHandle("existing", nop)

			err := r.Handle(tt.queue, tt.h)
			if err == nil {
				t.Fatal("Handle succeeded")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not name %s", err, tt.wantMsg)
			}
			if got := r.Names(); !reflect.DeepEqual(got, []string{"existing"}) {
				t.Errorf("Names() = %v after a failed Handle, want [existing]", got)
			}
		})
	}
}

func TestRegistryLookupAndNames(t *testing.T) {
	t.Parallel()
	var r handler.Registry // the zero value is usable
	if got := r.Names(); len(got) != 0 {
		t.Errorf("empty Names() = %v", got)
	}
	if _, ok := r.Lookup("orders"); ok {
		t.Error("Lookup on an empty registry found a handler")
	}

	called := ""
	for _, name := range []string{"orders", "emails", "thumbnails-2"} {
		r.MustHandle(name, func(context.Context, *queue.Message) error { called = name; return nil })
	}
	if got, want := r.Names(), []string{"emails", "orders", "thumbnails-2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	h, ok := r.Lookup("orders")
	if !ok {
		t.Fatal("Lookup(orders) found nothing")
	}
	if err := h(context.Background(), &queue.Message{ID: "m"}); err != nil || called != "orders" {
		t.Errorf("Lookup(orders) returned the handler of %q (err %v)", called, err)
	}
	if _, ok := r.Lookup("missing"); ok {
		t.Error("Lookup(missing) found a handler")
	}
}

func TestRegistryMustHandlePanics(t *testing.T) {
	t.Parallel()
	var r handler.Registry
	r.MustHandle("orders", nop)
	defer func() {
		err, _ := recover().(error)
		if !errors.Is(err, handler.ErrDuplicate) {
			t.Errorf("recovered %v, want ErrDuplicate", err)
		}
	}()
	r.MustHandle("orders", nop)
}

func TestRegistryConcurrent(t *testing.T) {
	t.Parallel()
	var r handler.Registry
	const n = 50
	var (
		wg   sync.WaitGroup
		wins atomic.Int32
	)
	for i := range n {
		wg.Go(func() {
			name := fmt.Sprintf("queue-%d", i)
			if err := r.Handle(name, nop); err != nil {
				t.Error(err)
			}
			r.Lookup(name)
			r.Names()
		})
		// Everyone also races to register the same name; exactly one wins.
		wg.Go(func() {
			if r.Handle("shared", nop) == nil {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if got := wins.Load(); got != 1 {
		t.Errorf("%d goroutines registered \"shared\", want 1", got)
	}
	if got := len(r.Names()); got != n+1 {
		t.Errorf("%d names registered, want %d", got, n+1)
	}
}
