package main

import (
	"bytes"
	"log"
	"os"
	"testing"

	"github.com/adaptq/adaptq/adaptqtest"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue/poison"
)

// The example's own config file and handler, on the test kit: no SQLite
// file, no process, no sleep. A good order is handled once; a bad body and
// an order of nothing are poisoned at once, not retried.
func TestOrdersWithTheKit(t *testing.T) {
	var out bytes.Buffer
	log.SetOutput(&out)
	defer log.SetOutput(os.Stderr)
	cfg, err := adaptqtest.LoadConfig("adaptq.yaml") // its sqlite:// queue swapped for a memory one
	if err != nil {
		t.Fatal(err)
	}
	k, err := adaptqtest.NewWorker(cfg, map[string]handler.Func{"orders": handler.JSON(handleOrder)})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	good := k.Put("orders", []byte(`{"id":"A1","sku":"pen","qty":3}`))
	bad := k.Put("orders", []byte(`{"id":"A2",`))
	none := k.Put("orders", []byte(`{"id":"A3","sku":"ink","qty":0}`))
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	k.RequireHandled(t, good)
	k.RequirePoisoned(t, bad, poison.RulePermanent)
	k.RequirePoisoned(t, none, poison.RulePermanent)
	if m := k.Message(none); len(m.Runs) != 1 || m.Reason != "order A3: quantity 0 is below 1" {
		t.Errorf("%v: want one run, the handler's reason", m)
	}
	if got := out.String(); !bytes.Contains([]byte(got), []byte("order A1: 3 × pen")) {
		t.Errorf("log: %q", got)
	}
}
