package driver_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/queue/driver"
)

func TestValidMetadataKey(t *testing.T) {
	t.Parallel()
	for k, want := range map[string]bool{
		"traceparent": true, "tenant_id": true, "a-b.c": true, "X": true, strings.Repeat("k", 256): true,
		"": false, strings.Repeat("k", 257): false, ".a": false, "a.": false, "a..b": false, "a b": false,
		"é": false, "aws.x": false, "AMAZON.x": false, "Adaptq-ttl": false, "awsx": true, "adaptq_x": true,
	} {
		if got := driver.ValidMetadataKey(k); got != want {
			t.Errorf("ValidMetadataKey(%q) = %v, want %v", k, got, want)
		}
	}
}

// Of several offending keys the least is named, whatever the map's order;
// with InBody, body and metadata share the body limit.
func TestCheckMetadata(t *testing.T) {
	t.Parallel()
	lim := driver.DefaultMetadataLimits
	md := map[string]string{"z z": "v", "b b": "v", "m m": "v", "ok": "v"}
	for range 20 {
		var me *driver.MetadataError
		if err := driver.CheckMetadata(md, lim, 0, 100); !errors.As(err, &me) || me.Key != "b b" {
			t.Fatalf("CheckMetadata = %v, want key %q named", err, "b b")
		}
	}
	in := driver.MetadataLimits{MaxPairs: 8, MaxKey: 256, MaxValue: 100, InBody: true, PairOverhead: 6}
	small := map[string]string{"k": "vv"} // 1 + 2 + 6 bytes
	if err := driver.CheckMetadata(small, in, 91, 100); err != nil {
		t.Fatalf("body and metadata at the limit: %v", err)
	}
	err := driver.CheckMetadata(small, in, 92, 100)
	var me *driver.MetadataError
	if !errors.As(err, &me) || me.Limit != "body size" || me.Got != 101 || !errors.Is(err, driver.ErrTooLarge) {
		t.Fatalf("one byte over: %v", err)
	}
	if err := driver.CheckMetadata(small, driver.MetadataLimits{}, 0, 100); !errors.Is(err, driver.ErrInvalidMetadata) || errors.Is(err, driver.ErrTooLarge) {
		t.Fatalf("a driver without metadata: %v", err)
	}
	if err := driver.CheckMetadata(nil, driver.MetadataLimits{}, 0, 100); err != nil {
		t.Fatalf("no metadata on a driver without it: %v", err)
	}
}
