package tracing_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	_ "github.com/adaptq/adaptq/queue/all"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
	"github.com/adaptq/adaptq/tracing"
)

func TestMain(m *testing.M) {
	sqstest.UseDummyCredentials() // the emulator checks none; nothing reaches for a real account
	os.Exit(m.Run())
}

// driverURLs are a fresh queue's URL on each engine, each queue's name
// its own (the tests tell spans apart by it), each queue's name
// its own (the tests tell spans apart by it): the machine's
// PostgreSQL (a schema of the test's own) and Redis (a key prefix of its
// own), Azurite and the SQS emulator started for the test, all on
// loopback.
func driverURLs(t *testing.T) map[string]string {
	t.Helper()
	suffix := time.Now().Format("150405.000000000")
	suffix = suffix[:6] + suffix[7:]
	return map[string]string{
		"memory":   "memory://trace" + suffix,
		"sqlite":   "sqlite://" + filepath.Join(t.TempDir(), "q.db") + "?queue=orders-sqlite",
		"postgres": pgtest.URL(t) + "&queue=orders-postgres&schema=" + pgtest.Schema(t),
		"redis":    "redis://127.0.0.1:6379/0?queue=orders-redis&prefix=adaptq-tracing-" + suffix + ":",
		"azure":    azuritetest.Start(t).URL("orders-azure" + suffix),
		"sqs":      sqstest.Start(t).URL(sqstest.NewRegion(), "orders-sqs"),
	}
}

// On every engine, a message put with tracing carries its trace context
// to the listener: the consumer span's parent is the producer span. With
// no-op tracing, the message has no metadata.
func TestPutThenHandleOnEveryDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Azurite and the SQS emulator")
	}
	sr := recorded(t)
	ctx := context.Background()
	for name, u := range driverURLs(t) {
		t.Run(name, func(t *testing.T) {
			q, err := queue.Open(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if err := q.Clear(ctx); err != nil {
				t.Fatal(err)
			}
			id, err := q.Put(ctx, []byte("A1"), queue.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			handled := make(chan string, 4)
			l, err := listener.New(q, func(ctx context.Context, m *queue.Message) error {
				handled <- m.ID
				return nil
			}, listener.Options{})
			if err != nil {
				t.Fatal(err)
			}
			lctx, cancel := context.WithCancel(ctx)
			if err := l.Start(lctx, 1); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-handled:
				if got != id {
					t.Errorf("handled %q, want %q", got, id)
				}
			case <-time.After(testutil.HangGuard):
				t.Error("the message was not handled")
			}
			cancel()
			if err := l.Wait(); err != nil {
				t.Fatal(err)
			}
			var send, process []string
			for _, s := range sr.Ended() {
				if v, _ := attr(s, "messaging.message.id"); v.AsString() != id {
					continue
				}
				if v, _ := attr(s, "messaging.destination.name"); v.AsString() != q.Name() {
					continue
				}
				switch s.Name() {
				case "send " + q.Name():
					send = append(send, s.SpanContext().SpanID().String())
				case "process " + q.Name():
					process = append(process, s.Parent().SpanID().String())
				}
			}
			if len(send) != 1 || len(process) != 1 || process[0] != send[0] {
				t.Errorf("producer spans %v, consumer spans' parents %v: want one each, the same", send, process)
			}

			// No-op tracing adds no metadata.
			quiet, err := queue.Open(ctx, u, queue.WithTracer(tracing.New(
				tracing.WithTracerProvider(noop.NewTracerProvider()),
				tracing.WithPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{})))))
			if err != nil {
				t.Fatal(err)
			}
			defer quiet.Close()
			if _, err := quiet.Put(ctx, []byte("A2"), queue.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			ms, err := quiet.Get(ctx, 1, time.Minute)
			if err != nil || len(ms) != 1 {
				t.Fatalf("get: %d messages, %v", len(ms), err)
			}
			if string(ms[0].Body) != "A2" || ms[0].Metadata != nil {
				t.Errorf("body %q, metadata %v: want A2 and none", ms[0].Body, ms[0].Metadata)
			}
			if err := quiet.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
				t.Error(err)
			}
		})
	}
}
