// Command embed is the shortest useful adaptq program: a worker that
// handles JSON orders from a queue configured in YAML.
//
//	go run ./examples/embed &
//	go run ./cmd/adaptq enqueue --config examples/embed/adaptq.yaml --queue orders '{"id":"A1","sku":"pen","qty":3}'
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/handler"
	_ "github.com/adaptq/adaptq/queue/sqlite" // the driver of adaptq.yaml's sqlite:// URL
)

type Order struct {
	ID  string `json:"id"`
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := adaptq.LoadConfig("examples/embed/adaptq.yaml")
	if err != nil {
		log.Fatal(err) // names the bad field: queues[0].batch_size: 40 is above 32
	}
	w, err := adaptq.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	w.MustHandle("orders", handler.JSON(handleOrder))
	if err := w.Run(ctx); err != nil { // returns after a graceful drain
		log.Fatal(err)
	}
}

// handleOrder runs at least once per message: make it idempotent (key on
// the order id). main_test.go tests it with package adaptqtest.
func handleOrder(ctx context.Context, o Order) error {
	if o.Qty < 1 {
		return handler.Permanent(fmt.Errorf("order %s: quantity %d is below 1", o.ID, o.Qty)) // poisoned at once: no retry fixes it
	}
	log.Printf("order %s: %d × %s", o.ID, o.Qty, o.SKU)
	return nil // nil deletes the message; an error lets it come back
}
