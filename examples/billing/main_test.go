package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestBillingRunsAndAggregatesExactly(t *testing.T) {
	p := Params{
		DB:           filepath.Join(t.TempDir(), "billing.db"),
		Bursts:       2,
		Transactions: 3000,
		Gap:          1500 * time.Millisecond,
		PerMessage:   10,
		Work:         50,
		IdleMax:      300 * time.Millisecond,
	}
	var out bytes.Buffer
	sum, err := Run(context.Background(), p, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	report := out.String()
	// Run itself checks the aggregate against the initiator's totals; the
	// report must say what was done.
	if sum.Transactions != 6000 || sum.WorkMessages != 600 || sum.Results != 600 {
		t.Fatalf("summary %+v", sum)
	}
	for _, want := range []string{
		"done: 6000 transactions in 600 work messages, 600 results aggregated",
		"processing pool (tasks, every 250 ms):",
		"queue calls (each one billed):",
		"cost of these calls at $0.01 per 10,000",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	// The pool follows the queue's depth: it must grow when the backlog
	// held more than two tasks' share (pool.messages_per_task 64) beyond
	// what one task holds in flight (concurrency 32). On a busy machine the
	// producer may never outrun one task; then growing would be wrong.
	if sum.MaxBacklog > 2*64+32 && sum.MaxTasks < 2 {
		t.Errorf("the backlog reached %d messages but the pool never grew (max %d tasks):\n%s", sum.MaxBacklog, sum.MaxTasks, report)
	} else if sum.MaxTasks < 2 {
		t.Logf("the backlog peaked at %d messages: one task kept up, the pool rightly stayed at 1", sum.MaxBacklog)
	}
	if last := sum.Timeline[len(sum.Timeline)-1]; last != 1 {
		t.Errorf("the pool ended at %d tasks, want it back at 1:\n%s", last, report)
	}
	m := regexp.MustCompile(`calls per message: ([0-9.]+)`).FindStringSubmatch(report)
	if m == nil {
		t.Fatalf("no calls per message in:\n%s", report)
	}
	if cpm, _ := strconv.ParseFloat(m[1], 64); cpm < 1 || cpm > 1.5 {
		t.Errorf("calls per message = %v, want close to 1 (put + a share of a 32-message get and delete)", cpm)
	}
}
