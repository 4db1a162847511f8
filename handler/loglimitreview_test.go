package handler_test

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
)

// Review of issue 27 item 3's rate limit: with lines from many goroutines
// across many window ends, every line is either logged or counted, and
// the summaries (window ends and the final Flush) add up to exactly the
// lines counted: none summed up twice, none never summed up.
func TestLogLimitReviewSummariesAddUp(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	lim, err := handler.NewLogLimit(7, 10*time.Second, zap.New(core), clk)
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 8, 2000
	var allowed [goroutines]int
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if lim.Allow() {
					allowed[g]++
				}
				if g == 0 && i%50 == 0 {
					clk.Advance(3 * time.Second) // window ends fall between lines
				}
			}
		}()
	}
	wg.Wait()
	lim.Flush()
	sumAllowed := 0
	for _, a := range allowed {
		sumAllowed += a
	}
	if got := int64(goroutines*each - sumAllowed); got != lim.NotLogged() {
		t.Errorf("NotLogged() = %d, want %d (lines not allowed)", lim.NotLogged(), got)
	}
	var summed int64
	for _, e := range logs.All() {
		summed += e.ContextMap()["not_logged"].(int64)
	}
	if summed != lim.NotLogged() {
		t.Errorf("summaries add up to %d, NotLogged() = %d", summed, lim.NotLogged())
	}
}

// A window that has ended, with no line since: Flush at the worker's stop
// still writes its summary once (the timer may not have run yet), and a
// timer that runs afterwards writes nothing more.
func TestLogLimitReviewFlushAfterWindowEnd(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	lim, err := handler.NewLogLimit(1, 10*time.Second, zap.New(core), clk)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		lim.Allow()
	}
	lim.Flush()
	clk.Advance(time.Minute)
	lim.Flush()
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d summaries, want 1: %v", n, logs.All())
	}
	if got := logs.All()[0].ContextMap()["not_logged"]; got != int64(4) {
		t.Errorf("not_logged %v, want 4", got)
	}
}
