package adaptqtest_test

import (
	"testing"

	"github.com/adaptq/adaptq/adaptqtest"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue/poison"
)

// BenchmarkPoisonTest is the ten-line test, once per op: a
// listener started, a message failing three times 30 s apart, poisoned,
// checked, the listener stopped. (The issue asks for under 10 ms of CPU.)
func BenchmarkPoisonTest(b *testing.B) {
	for b.Loop() {
		k, err := adaptqtest.NewListener("orders", failing, listener.Options{MaxDequeueCount: 3})
		if err != nil {
			b.Fatal(err)
		}
		id := k.Put("orders", []byte(`{"sku":"nope"}`))
		if err := k.Settle(); err != nil {
			b.Fatal(err)
		}
		k.RequirePoisoned(b, id, poison.RuleMaxDequeue)
		if err := k.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
