package azure_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
)

// Authorize with Microsoft Entra ID tokens instead of a key. In
// production the credential is azidentity's (or the URL says auth=entra,
// auth=managed_identity …) and the endpoints are Azure's; here Azurite
// runs over HTTPS with --oauth basic and a test credential mints the
// tokens it accepts.
func ExampleConfig_credential() {
	srv, err := azuritetest.SharedServerWith(azuritetest.Options{OAuth: true}) // TestEntra's
	if err != nil {
		log.Fatal(err)
	}

	acct, err := azure.NewAccount(azure.Config{
		Account:       azuritetest.Account,
		QueueEndpoint: srv.QueueEndpoint, // https://127.0.0.1:PORT/devstoreaccount1
		BlobEndpoint:  srv.BlobEndpoint,
		Credential:    &azuritetest.TokenCredential{}, // e.g. azidentity.NewManagedIdentityCredential(nil)
		HTTPClient:    srv.HTTPClient(),               // trusts the test certificate
	})
	if err != nil {
		log.Fatal(err)
	}
	defer acct.Close()
	ctx := context.Background()
	q, err := acct.Queue(ctx, "example-entra")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := q.Put(ctx, []byte("paid with a token"), queue.PutOptions{}); err != nil {
		log.Fatal(err)
	}
	ms, err := q.Get(ctx, 1, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(ms[0].Body))
	// Output: paid with a token
}
