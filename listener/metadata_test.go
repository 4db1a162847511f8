package listener_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// A poisoned message's metadata goes into the poison envelope, and the
// handler saw it on the message.
func TestPoisonKeepsTheMessagesMetadata(t *testing.T) {
	md := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	seen := make(chan map[string]string, 1)
	h := func(_ context.Context, m *queue.Message) error {
		seen <- m.Metadata
		return handler.Permanent(context.DeadlineExceeded)
	}
	f, pq := poisonFixture(t, h, listener.Options{VisibilityTimeout: 10 * time.Second, Idle: poisonIdle}, nil)
	id, err := f.raw.Put(context.Background(), []byte("m"), queue.PutOptions{Metadata: md})
	if err != nil {
		t.Fatal(err)
	}
	f.start()
	eventually(t, "the message is poisoned", func() bool { return f.l.Stats().Poisoned == 1 })
	if got := <-seen; !maps.Equal(got, md) {
		t.Errorf("the handler saw metadata %q, want %q", got, md)
	}
	pm := onlyPoison(t, pq)
	if pm.ID != id || pm.Rule != poison.RulePermanent || !maps.Equal(pm.Metadata, md) {
		t.Fatalf("poisoned %+v: want its metadata %q kept", pm, md)
	}
}
