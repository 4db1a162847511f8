package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// hang guards a wait that should end soon; it is not a timing assertion.
const hang = 30 * time.Second

func openDB(t *testing.T, schema string, opts ...postgres.Option) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), pgtest.URL(t), append([]postgres.Option{postgres.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func wantSignal(t *testing.T, sig <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-sig:
	case <-time.After(hang):
		t.Fatalf("%s: no signal", what)
	}
}

// drain empties a signal channel of what is pending.
func drain(sig <-chan struct{}) {
	for {
		select {
		case <-sig:
		default:
			return
		}
	}
}

// TestNotifyAcrossDBs: a Put through one DB (one pool, as another process
// has) wakes a subscriber of another, and only the subscribers of that
// queue; every Put in a burst within the notify interval is followed by a
// signal (the trailing notification).
func TestNotifyAcrossDBs(t *testing.T) {
	schema := pgtest.Schema(t)
	consumer := openDB(t, schema)
	producer := openDB(t, schema, postgres.WithNotifyInterval(time.Hour))
	ctx := context.Background()
	cq, err := consumer.Queue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	other, err := consumer.Queue(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	pq, err := producer.Queue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sig, err := cq.Subscribe(sctx)
	if err != nil {
		t.Fatal(err)
	}
	otherSig, err := other.Subscribe(sctx)
	if err != nil {
		t.Fatal(err)
	}
	// The first LISTEN wakes every subscriber once (puts made before it
	// were not heard): wait for it and drop those signals.
	waitFor(t, hang, "the LISTEN connection", func() bool { return postgres.Listens(consumer) >= 1 })
	time.Sleep(50 * time.Millisecond)
	drain(sig)
	drain(otherSig)

	if _, err := pq.Put(ctx, []byte("a"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	wantSignal(t, sig, "the first put")
	select {
	case <-otherSig:
		t.Fatal("a put to orders woke the subscriber of other")
	default:
	}
	// A burst from a producer with a short interval: the puts within an
	// interval of a notifying one do not notify in their own statements,
	// and a trailing notification follows them.
	burst := openDB(t, schema, postgres.WithNotifyInterval(20*time.Millisecond))
	bq, err := burst.Queue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if _, err := bq.Put(ctx, []byte(fmt.Sprint(i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	drain(sig)
	// The last put of the burst came within the interval of a notifying
	// one: a trailing notification follows it.
	if _, err := bq.Put(ctx, []byte("last"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	wantSignal(t, sig, "the put after a burst")
}

// TestListenReconnects: when the server ends the LISTEN connection (an
// administrator's pg_terminate_backend, 57P01), the hub reconnects and
// Puts wake the subscriber again.
func TestListenReconnects(t *testing.T) {
	schema := pgtest.Schema(t)
	db := openDB(t, schema, postgres.WithNotifyInterval(0))
	ctx := context.Background()
	q, err := db.Queue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sig, err := q.Subscribe(sctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, hang, "the LISTEN connection", func() bool { return postgres.Listens(db) >= 1 })
	admin, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for round := 1; round <= 2; round++ {
		var killed int
		err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE '%' || $2 || '%'`, postgres.ListenApplicationName, schema).Scan(&killed)
		if err != nil {
			t.Fatal(err)
		}
		if killed != 1 {
			t.Fatalf("round %d: terminated %d LISTEN connections, want 1", round, killed)
		}
		waitFor(t, hang, "the LISTEN connection to come back", func() bool { return postgres.Listens(db) >= round+1 })
		drain(sig)
		if _, err := q.Put(ctx, []byte("after"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		wantSignal(t, sig, fmt.Sprintf("a put after reconnect %d", round))
	}
}

// TestSubscribeStopsListening: the LISTEN connection closes when the last
// subscriber leaves and opens again for the next.
func TestSubscribeStopsListening(t *testing.T) {
	schema := pgtest.Schema(t)
	db := openDB(t, schema)
	ctx := context.Background()
	q, err := db.Queue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	listening := func() int {
		var n int
		_ = admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%' || $2 || '%'`,
			postgres.ListenApplicationName, schema).Scan(&n)
		return n
	}
	for round := 1; round <= 2; round++ {
		sctx, cancel := context.WithCancel(ctx)
		sig, err := q.Subscribe(sctx)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, hang, "a LISTEN connection", func() bool { return listening() == 1 })
		if _, err := q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		wantSignal(t, sig, "a put")
		cancel()
		waitFor(t, hang, "the LISTEN connection to close", func() bool { return listening() == 0 })
	}
}

// TestWorkerWokenByNotify: a worker whose queue has a push trigger and a
// ten-minute safety interval handles a message put through another DB, with
// no HTTP call: the driver's native notify pulled the trigger.
func TestWorkerWokenByNotify(t *testing.T) {
	schema := pgtest.Schema(t)
	u := pgtest.QueueURL(t, schema, "orders", "")
	cfg, err := adaptq.ParseConfig("w.yaml", []byte(fmt.Sprintf(`
log: {level: error}
admin: {address: ""}
queues:
  - url: %q
    handler: h
    idle: {max: 1s}
    trigger: {enabled: true, safety_interval: 10m}
`, u)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := adaptq.New(cfg, adaptq.WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	if err := w.Handle("h", func(context.Context, *queue.Message) error { handled.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-w.Ready()
	// Idle long enough for the backoff to pass idle.max, so that only a
	// notification can wake it before the safety interval.
	time.Sleep(3 * time.Second)
	producer := openDB(t, schema)
	pq, err := producer.Queue(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := pq.Put(context.Background(), []byte("x"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, hang, fmt.Sprintf("message %d to be handled", i), func() bool { return handled.Load() >= int64(i) })
		time.Sleep(1500 * time.Millisecond)
	}
}
