package handler

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/adaptq/adaptq/queue"
)

// Func handles one delivered message. It returns nil when the message was
// processed (the listener then deletes it) and an error to leave it in the
// queue, where it reappears after its visibility timeout. An error marked
// with Permanent tells the listener that retrying cannot help.
//
// A Func must honour ctx, and must be idempotent: a message can be
// delivered more than once (see the package documentation).
type Func func(ctx context.Context, m *queue.Message) error

// Middleware wraps a Func with behaviour of its own (recovery, timeouts,
// logging, metrics) and returns the wrapped Func.
type Middleware func(Func) Func

// Chain wraps h in mws. The first middleware is the outermost: Chain(h, a, b)
// is a(b(h)), so a sees the message first and the result last, as with
// net/http middleware. Nil middlewares are skipped.
func Chain(h Func, mws ...Middleware) Func {
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			h = mws[i](h)
		}
	}
	return h
}

// JSON adapts fn, a handler of decoded values, into a Func. The body is
// decoded into a fresh T with json.Unmarshal and its plain semantics:
// unknown fields are ignored and a JSON null leaves the zero value. This
// keeps producers free to add fields before consumers know them.
//
// A body that does not decode is returned as a Permanent error, since no
// retry can change it; its text names the message id, the target type and
// the decoding problem, never the body (encoding/json's own text quotes at
// most the one offending character), and errors.As still finds
// *json.SyntaxError or *json.UnmarshalTypeError. Errors returned by fn are
// passed through unchanged (permanent only if fn marked them).
//
// JSON panics if fn is nil.
func JSON[T any](fn func(ctx context.Context, v T) error) Func {
	if fn == nil {
		panic("handler: JSON of a nil func")
	}
	return func(ctx context.Context, m *queue.Message) error {
		var v T
		if err := json.Unmarshal(m.Body, &v); err != nil {
			return Permanent(fmt.Errorf("handler: message %q: decode JSON body into %s: %w",
				m.ID, reflect.TypeFor[T](), err))
		}
		return fn(ctx, v)
	}
}

// Bytes adapts fn, a handler of raw bodies, into a Func. fn receives
// Message.Body itself, not a copy. Bytes panics if fn is nil.
func Bytes(fn func(ctx context.Context, body []byte) error) Func {
	if fn == nil {
		panic("handler: Bytes of a nil func")
	}
	return func(ctx context.Context, m *queue.Message) error {
		return fn(ctx, m.Body)
	}
}

// String adapts fn, a handler of text bodies, into a Func. The body is
// converted as is; it is not checked to be valid UTF-8. String panics if fn
// is nil.
func String(fn func(ctx context.Context, body string) error) Func {
	if fn == nil {
		panic("handler: String of a nil func")
	}
	return func(ctx context.Context, m *queue.Message) error {
		return fn(ctx, string(m.Body))
	}
}
