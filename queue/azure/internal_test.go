package azure

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
)

// TestServerTooLarge sends Azurite a message over 64 KiB, past the
// driver's own check, to see the server's answer mapped to ErrTooLarge.
func TestServerTooLarge(t *testing.T) {
	srv := azuritetest.Shared(t)
	a, err := NewAccount(Config{Account: azuritetest.Account, QueueEndpoint: srv.QueueEndpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	// A name of its own: the shared Azurite outlives a run of this test.
	q, err := a.open(ctx, fmt.Sprintf("server-too-large-%d", time.Now().UnixNano()%1e9))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	_, err = q.qc.EnqueueMessage(ctx, strings.Repeat("x", MaxMessageSize+1), nil)
	err = classify(ctx, "put", q.name, err)
	if !errors.Is(err, queue.ErrTooLarge) || queue.IsTransient(err) {
		t.Fatalf("a message over 64 KiB: %v, want ErrTooLarge", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.StatusCode != 413 {
		t.Fatalf("status %v, want 413", e)
	}
	t.Logf("Azurite answers %d %s", e.StatusCode, e.Code)
}
