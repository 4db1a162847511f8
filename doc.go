// Package adaptq is the worker host: what a program embeds to drain queues
// fast, cheaply and without losing a message.
//
// A Worker turns a Config (usually YAML, see LoadConfig) into running
// parts: for each configured queue it opens the queue by URL, wraps it in
// the cost meter, and runs an adaptive listener (package listener) with a
// scaling agent (package scaling) that resizes the listener's pool from the
// queue's depth. When admin.address is set, Run also serves the admin HTTP
// endpoint (package admin: probes, metrics, stats, the scaling signal, the
// push trigger, the poison tools and the status page), which reads the
// worker through admin.Worker. Register handler funcs by name with Handle,
// then Run until the context ends; shutdown drains every listener
// gracefully.
//
// The worker imports no queue driver: a program imports the driver of each
// URL scheme its config names, as database/sql programs do, and compiles no
// other backend's SDK. A config naming a scheme whose driver is not
// imported fails at LoadConfig and New with the import line to add
// (queue.NoDriverError). Package queue/all imports every driver.
//
//	import _ "github.com/adaptq/adaptq/queue/sqlite" // sqlite:// URLs
//
//	cfg, err := adaptq.LoadConfig("configs/adaptq.yaml")
//	w, err := adaptq.New(cfg)
//	w.Handle("orders", func(ctx context.Context, m *queue.Message) error {
//		return process(ctx, m.ID, m.Body) // idempotent: may run more than once
//	})
//	err = w.Run(ctx)
//
// Delivery is at least once (the Windows Azure Queue white paper and the
// message visibility article): a message whose handler crashed, timed out,
// or lost its delete runs again. Handlers must be idempotent, keyed on
// Message.ID.
//
// # References
//
// adaptq is built from these sources; the godoc of every package cites
// them by the short name before the colon.
//
//   - The Windows Azure Queue white paper: "Windows Azure Queue" (Microsoft,
//     December 2008; Japanese edition). The data model, the REST API, the
//     visibility timeout, and the best practices adaptq keeps.
//   - The message visibility article: "Windows Azure: Messaging with the
//     queue — Understanding message visibility" (2011).
//   - The Best Practices article: "Best Practices for Maximizing
//     Scalability and Cost Effectiveness of Queue-Based Messaging Solutions
//     on Windows Azure" (Windows Azure customer advisory team, 2011), the
//     article adaptq follows: cost model, batching, idle backoff,
//     QueueEmpty and QueueWorkDetected, dynamic scaling, push triggers.
//   - The worker thread governance post: "Introducing worker thread
//     governance to Windows Azure SQL Database" (blog post, November 2012;
//     Japanese translation): the throttling codes and the 10 s back-off.
//   - The two-step dequeue post: "Queues in Windows Azure Storage" (blog
//     post), whose naive worker loop is the baseline adaptq is measured
//     against.
package adaptq
