package handler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

func msgs(bodies ...string) []*queue.Message {
	ms := make([]*queue.Message, len(bodies))
	for i, b := range bodies {
		ms[i] = &queue.Message{ID: fmt.Sprintf("m%d", i), Body: []byte(b)}
	}
	return ms
}

func TestBatchResultsOnePerMessage(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name string
		res  []error
		want []bool // failed
		bad  bool   // ErrBatchResults
	}{
		{"nil: all succeeded", nil, []bool{false, false, false}, false},
		{"one each", []error{nil, boom, nil}, []bool{false, true, false}, false},
		{"too few: all fail", []error{nil}, []bool{true, true, true}, true},
		{"too many: all fail", []error{nil, nil, nil, nil}, []bool{true, true, true}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := handler.BatchResults(tc.res, 3)
			if len(got) != 3 {
				t.Fatalf("%d results, want 3", len(got))
			}
			for i, err := range got {
				if (err != nil) != tc.want[i] {
					t.Errorf("result %d: %v, want failed=%v", i, err, tc.want[i])
				}
				if err != nil && errors.Is(err, handler.ErrBatchResults) != tc.bad {
					t.Errorf("result %d: %v, want ErrBatchResults=%v", i, err, tc.bad)
				}
				if handler.IsPermanent(err) {
					t.Errorf("result %d: %v is permanent", i, err)
				}
			}
		})
	}
}

func TestRecoverBatchFailsEveryMessage(t *testing.T) {
	t.Parallel()
	h := handler.ChainBatch(func(ctx context.Context, ms []*queue.Message) []error {
		panic("bulk insert exploded")
	}, handler.RecoverBatch())
	res := h(context.Background(), msgs("a", "b", "c"))
	if len(res) != 3 {
		t.Fatalf("%d results, want 3", len(res))
	}
	for i, err := range res {
		var pe *handler.PanicError
		if !errors.As(err, &pe) || pe.Value != "bulk insert exploded" || len(pe.Stack) == 0 {
			t.Errorf("result %d: %v, want a *PanicError with the value and a stack", i, err)
		}
		if handler.IsPermanent(err) {
			t.Errorf("result %d is permanent", i)
		}
	}
}

func TestTimeoutBatchWrapsErrorsAfterTheDeadline(t *testing.T) {
	t.Parallel()
	own := errors.New("db: canceled")
	h := handler.ChainBatch(func(ctx context.Context, ms []*queue.Message) []error {
		<-ctx.Done()
		return []error{nil, own}
	}, handler.TimeoutBatch(time.Millisecond))
	res := h(context.Background(), msgs("a", "b"))
	if res[0] != nil {
		t.Errorf("a success after the deadline became %v", res[0])
	}
	if !errors.Is(res[1], context.DeadlineExceeded) || !errors.Is(res[1], own) {
		t.Errorf("failure after the deadline: %v, want DeadlineExceeded wrapping the handler's error", res[1])
	}
	if h := handler.ChainBatch(nil, handler.TimeoutBatch(0)); h != nil {
		t.Error("TimeoutBatch(0) wrapped the handler")
	}
}

type row struct {
	N int `json:"n"`
}

func TestJSONBatchFailsUndecodableAlonePermanently(t *testing.T) {
	t.Parallel()
	var got []row
	failSecond := errors.New("row 2 refused")
	h := handler.JSONBatch(func(ctx context.Context, vs []row) []error {
		got = vs
		return []error{nil, failSecond}
	})
	ms := msgs(`{"n":1}`, `not json`, `{"n":2}`, `{"n":"three"}`)
	res := h(context.Background(), ms)
	if want := []row{{1}, {2}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("fn got %v, want %v", got, want)
	}
	if res[0] != nil {
		t.Errorf("decoded and succeeded: %v", res[0])
	}
	var syn *json.SyntaxError
	if !handler.IsPermanent(res[1]) || !errors.As(res[1], &syn) {
		t.Errorf("bad JSON: %v, want permanent with *json.SyntaxError", res[1])
	}
	if !errors.Is(res[2], failSecond) || handler.IsPermanent(res[2]) {
		t.Errorf("fn's second result went to %v, want the third message's", res[2])
	}
	var ute *json.UnmarshalTypeError
	if !handler.IsPermanent(res[3]) || !errors.As(res[3], &ute) {
		t.Errorf("wrong type: %v, want permanent with *json.UnmarshalTypeError", res[3])
	}
}

func TestJSONBatchPanicKeepsDecodeFailuresPermanent(t *testing.T) {
	t.Parallel()
	calls := 0
	h := handler.ChainBatch(handler.JSONBatch(func(ctx context.Context, vs []row) []error {
		calls++
		panic("boom")
	}), handler.RecoverBatch())
	res := h(context.Background(), msgs(`{"n":1}`, `{`))
	if _, ok := errors.AsType[*handler.PanicError](res[0]); !ok {
		t.Errorf("decoded message: %v, want a panic", res[0])
	}
	if !handler.IsPermanent(res[1]) {
		t.Errorf("undecodable message: %v, want permanent", res[1])
	}
	// None decodes: fn is not called.
	calls = 0
	res = h(context.Background(), msgs(`{`, `]`))
	if calls != 0 || !handler.IsPermanent(res[0]) || !handler.IsPermanent(res[1]) {
		t.Errorf("no body decodes: %d calls, results %v", calls, res)
	}
}
