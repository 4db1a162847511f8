package handler_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

func TestChainOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mws  []string // "" stands for a nil middleware
		want []string
	}{
		{"none", nil, []string{"h"}},
		{"one", []string{"a"}, []string{"a>", "h", "<a"}},
		{"three", []string{"a", "b", "c"}, []string{"a>", "b>", "c>", "h", "<c", "<b", "<a"}},
		{"nil skipped", []string{"a", "", "c"}, []string{"a>", "c>", "h", "<c", "<a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			mw := func(name string) handler.Middleware {
				if name == "" {
					return nil
				}
				return func(next handler.Func) handler.Func {
					return func(ctx context.Context, m *queue.Message) error {
						got = append(got, name+">")
						defer func() { got = append(got, "<"+name) }()
						return next(ctx, m)
					}
				}
			}
			var mws []handler.Middleware
			for _, n := range tt.mws {
				mws = append(mws, mw(n))
			}
			want := errors.New("result")
			h := handler.Chain(func(context.Context, *queue.Message) error {
				got = append(got, "h")
				return want
			}, mws...)
			if err := h(context.Background(), &queue.Message{ID: "m"}); err != want {
				t.Errorf("err = %v, want the handler's %v", err, want)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("order = %v, want %v", got, tt.want)
			}
		})
	}
}

type order struct {
	ID  string `json:"id"`
	Qty int    `json:"qty"`
}

func TestJSON(t *testing.T) {
	t.Parallel()
	handlerErr := errors.New("out of stock")
	tests := []struct {
		name      string
		body      string
		ret       error // what the typed handler returns
		wantCall  bool
		wantValue order
		wantErr   error // checked with errors.Is, if set
		permanent bool
		decode    bool // a decode error: names the msg id, not the body
	}{
		{name: "decodes", body: `{"id":"A-1","qty":2}`, wantCall: true, wantValue: order{"A-1", 2}},
		{name: "unknown fields ignored", body: `{"id":"A-1","colour":"red"}`, wantCall: true, wantValue: order{ID: "A-1"}},
		{name: "null is the zero value", body: `null`, wantCall: true},
		{name: "handler error passes through", body: `{"id":"A-1"}`, ret: handlerErr, wantCall: true,
			wantValue: order{ID: "A-1"}, wantErr: handlerErr},
		{name: "handler permanent error stays permanent", body: `{"id":"A-1"}`, ret: handler.Permanent(handlerErr),
			wantCall: true, wantValue: order{ID: "A-1"}, wantErr: handlerErr, permanent: true},
		{name: "truncated", body: `{"id":"SECRET-4111"`, permanent: true, decode: true},
		{name: "syntax", body: `{"id":SECRET-4111}`, permanent: true, decode: true},
		{name: "wrong type", body: `{"qty":"SECRET-4111"}`, permanent: true, decode: true},
		{name: "empty body", body: ``, permanent: true, decode: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var called bool
			var got order
			h := handler.JSON(func(_ context.Context, o order) error {
				called, got = true, o
				return tt.ret
			})
			m := &queue.Message{ID: "msg-42", Body: []byte(tt.body)}
			err := h(context.Background(), m)

			if called != tt.wantCall {
				t.Fatalf("handler called = %v, want %v", called, tt.wantCall)
			}
			if got != tt.wantValue {
				t.Errorf("decoded %+v, want %+v", got, tt.wantValue)
			}
			if handler.IsPermanent(err) != tt.permanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", err, !tt.permanent, tt.permanent)
			}
			switch {
			case tt.decode:
				if err == nil {
					t.Fatal("no error for a body that does not decode")
				}
				if !strings.Contains(err.Error(), "msg-42") {
					t.Errorf("error %q does not name the message id", err)
				}
				if strings.Contains(err.Error(), "SECRET") {
					t.Errorf("error %q leaks the body", err)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("err = %v, want %v", err, tt.wantErr)
				}
			case err != nil:
				t.Errorf("err = %v, want nil", err)
			}
		})
	}
}

func TestJSONDecodeErrorReachable(t *testing.T) {
	t.Parallel()
	h := handler.JSON(func(context.Context, order) error { return nil })
	err := h(context.Background(), &queue.Message{ID: "m", Body: []byte(`{x}`)})
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("errors.As(%v, *json.SyntaxError) = false", err)
	}
}

func TestBytesAndString(t *testing.T) {
	t.Parallel()
	want := errors.New("result")
	m := &queue.Message{ID: "m", Body: []byte("hello")}

	var gotBytes []byte
	err := handler.Bytes(func(_ context.Context, b []byte) error { gotBytes = b; return want })(context.Background(), m)
	if err != want || string(gotBytes) != "hello" {
		t.Errorf("Bytes: got (%q, %v), want (%q, %v)", gotBytes, err, "hello", want)
	}

	var gotString string
	err = handler.String(func(_ context.Context, s string) error { gotString = s; return want })(context.Background(), m)
	if err != want || gotString != "hello" {
		t.Errorf("String: got (%q, %v), want (%q, %v)", gotString, err, "hello", want)
	}
}

func TestAdaptersPanicOnNil(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"JSON":   func() { handler.JSON[order](nil) },
		"Bytes":  func() { handler.Bytes(nil) },
		"String": func() { handler.String(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic for a nil func")
				}
			}()
			f()
		})
	}
}
