package adaptq

import (
	"net/url"
	"os"
	"testing"

	"github.com/adaptq/adaptq/queue/azure"
)

// configs/azure-entra.yaml loads, and its URL asks for a Microsoft Entra ID
// credential and no key (it opens nothing: there is no Azure here).
func TestAzureEntraConfig(t *testing.T) {
	for _, k := range []string{"AZURE_TOKEN_CREDENTIALS", "AZURE_STORAGE_CONNECTION_STRING"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	cfg, err := LoadConfig("configs/azure-entra.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Queues) != 1 {
		t.Fatalf("%d queues, want 1", len(cfg.Queues))
	}
	u, err := url.Parse(cfg.Queues[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	acfg, name, err := azure.ConfigFromURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if name != "orders" || acfg.Credential == nil || acfg.Key != "" || acfg.SAS != "" {
		t.Fatalf("queue %q, credential %v, key or SAS set %v: want orders with a token credential alone", name, acfg.Credential, acfg.Key+acfg.SAS != "")
	}
}
