package azure

import (
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/adaptq/adaptq/queue"
)

// ParseConnectionString reads an Azure Storage connection string into the
// account, credential and endpoint fields of a Config:
//
//	DefaultEndpointsProtocol=https;AccountName=NAME;AccountKey=KEY;EndpointSuffix=core.windows.net
//	QueueEndpoint=https://…;BlobEndpoint=https://…;SharedAccessSignature=sv=…
//	UseDevelopmentStorage=true[;DevelopmentStorageProxyUri=http://HOST]
//
// Errors name the offending key, never a value (values hold secrets).
func ParseConnectionString(s string) (Config, error) {
	var c Config
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: connection string: %s", queue.ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	kv := map[string]string{}
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return bad("a part without '=' (want Key=Value;…)")
		}
		k = strings.ToLower(strings.TrimSpace(k))
		if _, dup := kv[k]; dup {
			return bad("key %q given twice", k)
		}
		kv[k] = strings.TrimSpace(v)
	}
	known := map[string]bool{
		"usedevelopmentstorage": true, "developmentstorageproxyuri": true, "defaultendpointsprotocol": true,
		"accountname": true, "accountkey": true, "sharedaccesssignature": true, "endpointsuffix": true,
		"queueendpoint": true, "blobendpoint": true, "tableendpoint": true, "fileendpoint": true,
		"queuesecondaryendpoint": true, "blobsecondaryendpoint": true,
	}
	var unknown []string
	for k := range kv {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return bad("unknown key %q", unknown[0])
	}
	if v, ok := kv["usedevelopmentstorage"]; ok {
		if !strings.EqualFold(v, "true") {
			return bad("UseDevelopmentStorage must be true if given")
		}
		c.Account, c.Key = DevAccount, DevKey
		c.QueueEndpoint, c.BlobEndpoint = DevQueueEndpoint, DevBlobEndpoint
		if p := kv["developmentstorageproxyuri"]; p != "" {
			u, err := url.Parse(p)
			if err != nil || u.Hostname() == "" {
				return bad("DevelopmentStorageProxyUri is not a URL")
			}
			scheme := u.Scheme
			if scheme == "" {
				scheme = "http"
			}
			c.QueueEndpoint = scheme + "://" + u.Hostname() + ":10001/" + DevAccount
			c.BlobEndpoint = scheme + "://" + u.Hostname() + ":10000/" + DevAccount
		}
		return c, nil
	}
	c.Account = kv["accountname"]
	c.Key = kv["accountkey"]
	c.SAS = strings.TrimPrefix(kv["sharedaccesssignature"], "?")
	if c.Key != "" && c.SAS != "" {
		return bad("both AccountKey and SharedAccessSignature given")
	}
	if c.Key == "" && c.SAS == "" {
		return bad("neither AccountKey nor SharedAccessSignature given")
	}
	c.QueueEndpoint = kv["queueendpoint"]
	c.BlobEndpoint = kv["blobendpoint"]
	proto := strings.ToLower(kv["defaultendpointsprotocol"])
	switch proto {
	case "":
		proto = "https"
	case "http", "https":
	default:
		return bad("DefaultEndpointsProtocol must be http or https")
	}
	suffix := kv["endpointsuffix"]
	if suffix == "" {
		suffix = DefaultEndpointSuffix
	}
	if c.QueueEndpoint == "" {
		if c.Account == "" {
			return bad("no AccountName and no QueueEndpoint")
		}
		c.QueueEndpoint = proto + "://" + c.Account + ".queue." + suffix
		if c.BlobEndpoint == "" {
			c.BlobEndpoint = proto + "://" + c.Account + ".blob." + suffix
		}
	}
	if c.Account == "" {
		c.Account = accountFromEndpoint(c.QueueEndpoint)
	}
	return c, nil
}

// accountFromEndpoint guesses the account from a queue endpoint:
// https://NAME.queue.… or an emulator's http://host:port/NAME.
func accountFromEndpoint(e string) string {
	u, err := url.Parse(e)
	if err != nil {
		return ""
	}
	if parts := strings.SplitN(u.Hostname(), ".", 3); len(parts) == 3 && parts[1] == "queue" {
		return parts[0]
	}
	return strings.Trim(u.Path, "/")
}
