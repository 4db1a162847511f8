package tracing_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
	"github.com/adaptq/adaptq/queue/sqlite"
	"github.com/adaptq/adaptq/tracing"
)

// A put inside the caller's transaction is traced as Put is: a producer
// span, and the consumer span of its message is that span's child.
func TestPutInTransactionIsTraced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			sr := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
			tr := tracing.New(tracing.WithTracerProvider(tp), tracing.WithPropagator(propagation.TraceContext{}))
			var q *queue.Queue
			var put func() (string, error)
			switch engine {
			case "sqlite":
				db, err := sqlite.Open(filepath.Join(t.TempDir(), "q.db"))
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				if q, err = db.Queue("orders", tr.QueueOption()); err != nil {
					t.Fatal(err)
				}
				s, err := db.SQL(nil)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				put = func() (string, error) {
					tx, err := s.BeginTx(ctx, nil)
					if err != nil {
						return "", err
					}
					id, err := sqlite.PutTx(ctx, tx, q, []byte("A1"), queue.PutOptions{})
					if err != nil {
						_ = tx.Rollback()
						return "", err
					}
					return id, tx.Commit()
				}
			case "postgres":
				db, err := postgres.Open(ctx, pgtest.URL(t), postgres.WithSchema(pgtest.Schema(t)))
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				if q, err = db.Queue(ctx, "orders", tr.QueueOption()); err != nil {
					t.Fatal(err)
				}
				put = func() (string, error) {
					tx, err := db.Pool().Begin(ctx)
					if err != nil {
						return "", err
					}
					id, err := postgres.PutTx(ctx, tx, q, []byte("A1"), queue.PutOptions{})
					if err != nil {
						_ = tx.Rollback(ctx)
						return "", err
					}
					return id, tx.Commit(ctx)
				}
			}
			id, err := put()
			if err != nil {
				t.Fatal(err)
			}
			ms, err := q.Get(ctx, 1, time.Minute)
			if err != nil || len(ms) != 1 || ms[0].ID != id {
				t.Fatalf("get: %v, %v", ms, err)
			}
			_, span := tr.Listener(q).Start(ctx, ms[0])
			span.End(nil)
			send, process := spans(sr, "send orders"), spans(sr, "process orders")
			if len(send) != 1 || len(process) != 1 || process[0].Parent().SpanID() != send[0].SpanContext().SpanID() {
				t.Fatalf("%d send and %d process spans, want 1 and 1, the consumer the producer's child", len(send), len(process))
			}
			if v, _ := attr(send[0], "messaging.message.id"); v.AsString() != id {
				t.Errorf("producer span's message id %q, want %q", v.AsString(), id)
			}
		})
	}
}

// A batch put in the caller's transaction (postgres.PutBatchTx) is one
// producer span, as PutBatch is, whose trace context each message carries.
func TestPutBatchInTransactionIsOneSpan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	tr := tracing.New(tracing.WithTracerProvider(tp), tracing.WithPropagator(propagation.TraceContext{}))
	db, err := postgres.Open(ctx, pgtest.URL(t), postgres.WithSchema(pgtest.Schema(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q, err := db.Queue(ctx, "orders", tr.QueueOption())
	if err != nil {
		t.Fatal(err)
	}
	md := map[string]string{"tenant": "a"}
	tx, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.PutBatchTx(ctx, tx, q, [][]byte{[]byte("A1"), []byte("A2")}, queue.PutOptions{Metadata: md}); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if len(md) != 1 {
		t.Errorf("the caller's metadata was changed: %v", md)
	}
	send := spans(sr, "send orders")
	if len(send) != 1 {
		t.Fatalf("%d send spans, want 1", len(send))
	}
	if v, _ := attr(send[0], "messaging.batch.message_count"); v.AsInt64() != 2 {
		t.Errorf("batch message count %d, want 2", v.AsInt64())
	}
	sc := send[0].SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	ms, err := q.Peek(ctx, 2)
	if err != nil || len(ms) != 2 {
		t.Fatalf("peek: %d, %v", len(ms), err)
	}
	for _, m := range ms {
		if m.Metadata["traceparent"] != want || m.Metadata["tenant"] != "a" {
			t.Errorf("%s: metadata %v, want the tenant and the batch's traceparent %q", m.Body, m.Metadata, want)
		}
	}
}
