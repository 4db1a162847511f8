package sqs

import (
	"context"
	"time"
)

// NewClientIdle is NewClient with the driver's own transport closing idle
// connections after idle instead of DefaultIdleConnTimeout: a test that
// checks Close closes them sets an hour, so that only Close can.
func NewClientIdle(ctx context.Context, cfg Config, idle time.Duration) (*Client, error) {
	return newClient(ctx, cfg, idle)
}
