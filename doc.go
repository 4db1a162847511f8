// Package adaptq is the worker host: what a program embeds to drain queues
// fast, cheaply and without losing a message.
//
// A Worker turns a Config (usually YAML, see LoadConfig) into running
// parts: for each configured queue it opens the queue by URL, wraps it in
// the cost meter, and runs an adaptive listener (package listener) with a
// scaling agent (package scaling) that resizes the listener's pool from the
// queue's depth. An admin HTTP endpoint serves the worker's state and
// costs. Register handler funcs by name with Handle, then Run until the
// context ends; shutdown drains every listener gracefully.
//
//	cfg, err := adaptq.LoadConfig("configs/adaptq.yaml")
//	w, err := adaptq.New(cfg)
//	w.Handle("orders", func(ctx context.Context, m *queue.Message) error {
//		return process(ctx, m.ID, m.Body) // idempotent: may run more than once
//	})
//	err = w.Run(ctx)
//
// Delivery is at least once (seeds 000 and 001): a message whose handler
// crashed, timed out, or lost its delete runs again. Handlers must be
// idempotent, keyed on Message.ID.
package adaptq
