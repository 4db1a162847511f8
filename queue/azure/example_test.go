package azure_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/url"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
)

// Open a queue by URL. Here it is Azurite's development account, which
// needs no credential; for a real account the URL names where the
// credential is, e.g. azure://myaccount/orders?key_env=STORAGE_KEY.
func Example() {
	srv, err := azuritetest.SharedServer() // a local Azurite; in production, Azure
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	q, err := queue.Open(ctx, "azure://devstoreaccount1/example-orders?endpoint="+url.QueryEscape(srv.QueueEndpoint)+
		"&blob_endpoint="+url.QueryEscape(srv.BlobEndpoint))
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	small := []byte("order-1")
	large := bytes.Repeat([]byte{0xAB}, 1<<20) // 1 MiB: stored as a blob, the message holds a reference
	for _, body := range [][]byte{small, large} {
		if _, err := q.Put(ctx, body, queue.PutOptions{TTL: time.Hour}); err != nil {
			log.Fatal(err)
		}
	}
	ms, err := q.Get(ctx, queue.MaxBatchSize, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range ms {
		fmt.Printf("%d bytes, dequeue count %d\n", len(m.Body), m.DequeueCount)
		if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil { // deletes the blob too
			log.Fatal(err)
		}
	}
	fmt.Println("body limit:", q.MaxBodySize()>>20, "MiB")
	// Output:
	// 7 bytes, dequeue count 1
	// 1048576 bytes, dequeue count 1
	// body limit: 64 MiB
}

// Unknown parameters are errors that name them; secrets in the URL are
// redacted from every error.
func ExampleOpenURL_errors() {
	_, err := queue.Open(context.Background(), "azure://myaccount/orders?key=c2VjcmV0&visibility=30s")
	fmt.Println(err)
	// Output:
	// azure: open: queue: invalid queue URL "azure://myaccount/orders?key=REDACTED&visibility=30s": unknown parameter "visibility" (allowed: endpoint, blob_endpoint, connection_string_env, key, key_env, sas, sas_env, dev, create, encoding, container, claim_check, max_body_size, timeout, sweep_interval, payload_grace, auth, client_id, tenant_id)
}
