package sqs_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

func TestConfigFromURL(t *testing.T) {
	cases := []struct {
		url     string
		cfg     sqs.Config
		name    string
		wantErr string
	}{
		{url: "sqs://eu-west-1/123456789012/orders", cfg: sqs.Config{Region: "eu-west-1", Account: "123456789012"}, name: "orders"},
		{url: "sqs://eu-west-1/orders", cfg: sqs.Config{Region: "eu-west-1"}, name: "orders"},
		{url: "sqs://us-east-1/000000000000/orders?endpoint=http://127.0.0.1:4566&anonymous=true&create=false&timeout=5s&profile=dev",
			cfg:  sqs.Config{Region: "us-east-1", Account: "000000000000", Endpoint: "http://127.0.0.1:4566", Anonymous: true, NoCreate: true, Timeout: 5 * time.Second, Profile: "dev"},
			name: "orders"},
		{url: "sqs:///123456789012/orders", wantErr: "missing the region"},
		{url: "sqs://eu-west-1/123456789012/", wantErr: "missing the queue name"},
		{url: "sqs://eu-west-1/1/2/orders", wantErr: "is not ACCOUNT/QUEUE"},
		{url: "sqs://eu-west-1/12345/orders", wantErr: "want 12 digits"},
		{url: "sqs://eu-west-1:443/orders", wantErr: "give the server as endpoint="},
		{url: "sqs://AKIA:secret@eu-west-1/orders", wantErr: "credentials do not go in the URL"},
		{url: "sqs://eu-west-1/orders?key=abc", wantErr: `unknown parameter "key"`},
		{url: "sqs://eu-west-1/orders?create=maybe", wantErr: "not true or false"},
		{url: "sqs://eu-west-1/orders?timeout=5", wantErr: "Go duration"},
		{url: "sqs://eu-west-1/orders?endpoint=ftp://x", wantErr: "not an http(s) URL"},
		{url: "sqs://eu-west-1/Orders_1", wantErr: "invalid queue name"},
	}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		cfg, name, err := sqs.ConfigFromURL(u)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: error %v, want one saying %q", c.url, err, c.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: the error shows the secret: %v", c.url, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if cfg != c.cfg || name != c.name {
			t.Errorf("%s: %+v %q, want %+v %q", c.url, cfg, name, c.cfg, c.name)
		}
	}
}

// queue.Open opens an sqs:// URL; create=false refuses a missing queue.
func TestOpenURL(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	ctx := context.Background()
	region := sqstest.NewRegion()
	_, err := queue.Open(ctx, srv.URL(region, "absent", "create", "false"))
	if !errors.Is(err, sqs.ErrQueueNotFound) {
		t.Fatalf("create=false on a missing queue: %v, want ErrQueueNotFound", err)
	}
	q, err := queue.Open(ctx, srv.URL(region, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	again, err := queue.Open(ctx, srv.URL(region, "orders", "create", "false"))
	if err != nil {
		t.Fatalf("create=false on an existing queue: %v", err)
	}
	defer again.Close()
	if n, err := again.Count(ctx); err != nil || n != 1 {
		t.Fatalf("Count = %d, %v; want 1", n, err)
	}
	var d *sqs.Queue
	if !q.As(&d) || !strings.Contains(d.URL(), "/orders") {
		t.Fatalf("As(*sqs.Queue) = %v", d)
	}
	// A text body goes as it is, for consumers in other languages; any
	// other in base64, marked; a body past the limit is refused unsent.
	if f := q.Features(); f.MaxBody != 786240 || f.MaxBatch != 10 || f.MaxPeek != 0 || f.PricePer10k != sqs.PricePer10k {
		t.Fatalf("Features = %+v", f)
	}
}
