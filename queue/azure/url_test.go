package azure_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
)

// A key that looks real; no test may ever see it in an error.
const secretKey = "c2VjcmV0LWtleS1kby1ub3QtbG9nLW1lLWV2ZXI0Mg=="

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestConfigFromURL(t *testing.T) {
	t.Setenv("ADAPTQ_TEST_KEY", secretKey)
	t.Setenv("ADAPTQ_TEST_SAS", "sv=2024-08-04&sig=SECRETSIG")
	t.Setenv("ADAPTQ_TEST_CONN", "DefaultEndpointsProtocol=https;AccountName=prodacct;AccountKey="+secretKey+";EndpointSuffix=core.chinacloudapi.cn")
	t.Setenv(azure.DefaultConnectionStringEnv, "")
	cases := []struct {
		url  string
		name string
		want func(c azure.Config) string // "" when right
	}{
		{"azure://devstoreaccount1/orders", "orders", func(c azure.Config) string {
			if c.Account != azure.DevAccount || c.Key != azure.DevKey || c.QueueEndpoint != "" {
				return "want the development account's key and default endpoints"
			}
			return ""
		}},
		{"azure:///orders?dev=true", "orders", func(c azure.Config) string {
			if c.Account != azure.DevAccount || c.Key != azure.DevKey {
				return "dev=true is the development account"
			}
			return ""
		}},
		{"azure://devstoreaccount1/orders?endpoint=http://127.0.0.1:1234/devstoreaccount1&blob_endpoint=http://127.0.0.1:1235/devstoreaccount1",
			"orders", func(c azure.Config) string {
				if c.QueueEndpoint != "http://127.0.0.1:1234/devstoreaccount1" || c.BlobEndpoint != "http://127.0.0.1:1235/devstoreaccount1" {
					return "endpoints not taken"
				}
				return ""
			}},
		{"azure://myacct/jobs?key_env=ADAPTQ_TEST_KEY&create=false&encoding=text&container=blobs-x&claim_check=false&max_body_size=1MiB&timeout=5s&sweep_interval=0&payload_grace=10m",
			"jobs", func(c azure.Config) string {
				switch {
				case c.Key != secretKey:
					return "key_env not read"
				case !c.NoCreate || c.Encoding != azure.Text || c.Container != "blobs-x" || !c.NoClaimCheck:
					return "flags not taken"
				case c.MaxBodySize != 1<<20 || c.Timeout != 5*time.Second || c.SweepInterval >= 0 || c.PayloadGrace != 10*time.Minute:
					return "sizes and durations not taken"
				}
				return ""
			}},
		{"azure://myacct/jobs?sas_env=ADAPTQ_TEST_SAS", "jobs", func(c azure.Config) string {
			if c.SAS != "sv=2024-08-04&sig=SECRETSIG" || c.Key != "" {
				return "sas_env not read"
			}
			return ""
		}},
		{"azure://prodacct/jobs?connection_string_env=ADAPTQ_TEST_CONN", "jobs", func(c azure.Config) string {
			if c.Key != secretKey || c.QueueEndpoint != "https://prodacct.queue.core.chinacloudapi.cn" ||
				c.BlobEndpoint != "https://prodacct.blob.core.chinacloudapi.cn" {
				return "connection string not applied"
			}
			return ""
		}},
	}
	for _, c := range cases {
		cfg, name, err := azure.ConfigFromURL(mustParse(t, c.url))
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if name != c.name {
			t.Errorf("%s: queue name %q, want %q", c.url, name, c.name)
		}
		if why := c.want(cfg); why != "" {
			t.Errorf("%s: %s (got %+v)", c.url, why, cfg)
		}
	}
}

func TestConfigFromURLErrors(t *testing.T) {
	t.Setenv(azure.DefaultConnectionStringEnv, "")
	t.Setenv("ADAPTQ_TEST_CONN", "AccountName=otheracct;AccountKey="+secretKey)
	t.Setenv("ADAPTQ_TEST_UNSET", "")
	cases := []struct {
		url      string
		want     error
		mentions string
	}{
		{"azure://myacct/orders?colour=blue", queue.ErrInvalidURL, `unknown parameter "colour"`},
		{"azure://myacct/orders?key=" + url.QueryEscape(secretKey) + "&tll=1h", queue.ErrInvalidURL, `unknown parameter "tll"`},
		{"azure://myacct/", queue.ErrInvalidURL, "missing the queue name"},
		{"azure://myacct/a/b", queue.ErrInvalidURL, "more than the queue name"},
		{"azure:///orders", queue.ErrInvalidURL, "missing the account name"},
		{"azure://myacct/Orders", queue.ErrInvalidName, `"Orders"`},
		{"azure://myacct:443/orders?key_env=X", queue.ErrInvalidURL, "endpoint="},
		{"azure://myacct/orders", queue.ErrInvalidURL, "no credential"},
		{"azure://myacct/orders?key_env=ADAPTQ_TEST_UNSET", queue.ErrInvalidURL, "$ADAPTQ_TEST_UNSET is not set"},
		{"azure://myacct/orders?key=" + url.QueryEscape(secretKey) + "&sas=sig%3DSECRETSIG", queue.ErrInvalidURL, "give one credential"},
		{"azure://myacct/orders?connection_string_env=ADAPTQ_TEST_CONN", queue.ErrInvalidURL, `for account "otheracct"`},
		{"azure://myacct/orders?dev=true", queue.ErrInvalidURL, "dev=true"},
		{"azure://devstoreaccount1/orders?encoding=utf16", queue.ErrInvalidURL, "unknown encoding"},
		{"azure://devstoreaccount1/orders?create=maybe", queue.ErrInvalidURL, "create"},
		{"azure://devstoreaccount1/orders?timeout=30", queue.ErrInvalidURL, "timeout"},
		{"azure://devstoreaccount1/orders?max_body_size=-1", queue.ErrInvalidURL, "max_body_size"},
		{"azure://devstoreaccount1/orders?encoding=text&encoding=base64", queue.ErrInvalidURL, "given 2 times"},
		{"azure://devstoreaccount1/orders?endpoint=ftp://x", queue.ErrInvalidURL, "not an http(s) URL"},
		{"azure://devstoreaccount1/orders?container=Bad_Container", queue.ErrInvalidURL, "container name"},
		{"azure://user:" + secretKey + "@myacct/orders", queue.ErrInvalidURL, "user part"},
	}
	for _, c := range cases {
		_, err := queue.Open(context.Background(), c.url)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.url, err, c.want)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.mentions) {
			t.Errorf("%s: error %q does not mention %q", c.url, msg, c.mentions)
		}
		for _, secret := range []string{secretKey, url.QueryEscape(secretKey), "SECRETSIG"} {
			if strings.Contains(msg, secret) {
				t.Errorf("%s: error %q shows a secret", c.url, msg)
			}
		}
	}
}

func TestParseConnectionString(t *testing.T) {
	c, err := azure.ParseConnectionString("UseDevelopmentStorage=true")
	if err != nil || c.Account != azure.DevAccount || c.Key != azure.DevKey ||
		c.QueueEndpoint != azure.DevQueueEndpoint || c.BlobEndpoint != azure.DevBlobEndpoint {
		t.Fatalf("UseDevelopmentStorage=true: %+v, %v", c, err)
	}
	c, err = azure.ParseConnectionString("UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://azurite")
	if err != nil || c.QueueEndpoint != "http://azurite:10001/devstoreaccount1" || c.BlobEndpoint != "http://azurite:10000/devstoreaccount1" {
		t.Fatalf("with a proxy URI: %+v, %v", c, err)
	}
	c, err = azure.ParseConnectionString("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" + azure.DevKey +
		";QueueEndpoint=http://127.0.0.1:5/devstoreaccount1;BlobEndpoint=http://127.0.0.1:6/devstoreaccount1;")
	if err != nil || c.QueueEndpoint != "http://127.0.0.1:5/devstoreaccount1" || c.BlobEndpoint != "http://127.0.0.1:6/devstoreaccount1" {
		t.Fatalf("Azurite style: %+v, %v", c, err)
	}
	c, err = azure.ParseConnectionString("QueueEndpoint=https://acct.queue.core.windows.net;SharedAccessSignature=?sv=1&sig=SECRETSIG")
	if err != nil || c.Account != "acct" || c.SAS != "sv=1&sig=SECRETSIG" {
		t.Fatalf("SAS: %+v, %v", c, err)
	}
	for _, bad := range []string{
		"AccountName=a",
		"AccountName=acct;AccountKey=" + secretKey + ";SharedAccessSignature=sig=SECRETSIG",
		"AccountName=acct;AccountKey=" + secretKey + ";Colour=blue",
		"AccountName=acct;AccountKey",
		"AccountName=acct;AccountKey=" + secretKey + ";DefaultEndpointsProtocol=ftp",
	} {
		_, err := azure.ParseConnectionString(bad)
		if !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("%q: error %v, want ErrInvalidArgument", bad, err)
			continue
		}
		if strings.Contains(err.Error(), secretKey) || strings.Contains(err.Error(), "SECRETSIG") {
			t.Errorf("%q: error %q shows a secret", bad, err)
		}
	}
}

func TestRedactHidesURLSecrets(t *testing.T) {
	raw := "azure://myacct/orders?key=" + url.QueryEscape(secretKey) + "&sas=sig%3DSECRETSIG&endpoint=https://x"
	r := queue.Redact(raw)
	if strings.Contains(r, "SECRETSIG") || strings.Contains(r, url.QueryEscape(secretKey)) {
		t.Fatalf("Redact(%q) = %q", raw, r)
	}
}
