package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// openTest opens the queue at rawURL until the test ends.
func openTest(t *testing.T, rawURL string) (context.Context, *queue.Queue) {
	t.Helper()
	q, err := queue.Open(context.Background(), rawURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return context.Background(), q
}

// putPoison puts n enveloped poison messages of queue "orders" (original
// ids orig-0 …, bodies body-0 …) to the poison queue at rawURL.
func putPoison(t *testing.T, rawURL string, n int) {
	t.Helper()
	ctx, q := openTest(t, rawURL)
	at := time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC)
	for i := range n {
		b, err := poison.Encode(poison.Message{
			ID: fmt.Sprintf("orig-%d", i), Queue: "orders", DequeueCount: 5, Rule: poison.RuleMaxDequeue,
			Reason: fmt.Sprintf("exit status 3 (try %d)", i), FailedAt: at, InsertedAt: at, Body: fmt.Appendf(nil, "body-%d", i),
		}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Put(ctx, b, queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// bodiesOf drains the queue at rawURL and returns its bodies, sorted.
func bodiesOf(t *testing.T, rawURL string) []string {
	t.Helper()
	ctx, q := openTest(t, rawURL)
	var out []string
	for {
		ms, err := q.Get(ctx, 32, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			slices.Sort(out)
			return out
		}
		for _, m := range ms {
			out = append(out, string(m.Body))
		}
	}
}

func TestPoisonCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, baseConfig)
	home := "sqlite://" + dir + "/q.db?queue=orders"
	pq := "sqlite://" + dir + "/q.db?queue=orders" + adaptq.PoisonSuffix
	mustCLI(t, "", "enqueue", "-c", cfg, "-q", "orders", "seed") // creates the file
	putPoison(t, pq, 40)
	mustCLI(t, "", "enqueue", "-c", cfg, "-q", "orders-poison", "an old bare one")

	// list, page by page, following the "more:" line.
	more := regexp.MustCompile(`(?m)^more: .* --after (\S+)$`)
	seen := map[string]int{}
	args := []string{"poison", "list", "-c", cfg, "-q", "orders", "--limit", "15"}
	for pages := 0; ; pages++ {
		r := mustCLI(t, "", args...)
		for _, line := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(line); len(f) > 1 && (strings.HasPrefix(f[1], "orig-") || f[1] == "-") && f[0] != "POISON" {
				seen[f[1]+"/"+f[0]]++
			}
		}
		m := more.FindStringSubmatch(r.stdout)
		if m == nil || pages > 10 {
			if !strings.Contains(r.stdout, "(bare body") {
				t.Errorf("the last page does not show the bare message:\n%s", r.stdout)
			}
			break
		}
		args = []string{"poison", "list", "-c", cfg, "-q", "orders", "--limit", "15", "--after", m[1]}
	}
	if len(seen) != 41 {
		t.Errorf("the listing showed %d distinct messages, want 41: %v", len(seen), seen)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s listed %d times", k, n)
		}
	}
	if n := queueDepthOf(t, pq); n != 41 {
		t.Fatalf("after listing the poison queue holds %d", n)
	}

	// --json, and the poison queue named by itself.
	var page admin.PoisonPage
	r := mustCLI(t, "", "poison", "list", "-c", cfg, "-q", "orders-poison", "--json", "--limit", "1000")
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Messages) != 41 || page.Queue != "orders" || page.Next != "" {
		t.Fatalf("list --json: %v %s", err, r.stdout)
	}
	// --scan reads them with gets: the same 41, paged with its own cursor.
	r = mustCLI(t, "", "poison", "list", "-c", cfg, "-q", "orders", "--scan", "--limit", "30")
	if got := strings.Count(r.stdout, "orig-"); got != 30 || !strings.Contains(r.stdout, "--scan --after ") {
		t.Fatalf("list --scan --limit 30: %d messages, no next page with --scan:\n%s", got, r.stdout)
	}
	cursor := r.stdout[strings.LastIndex(r.stdout, "--after ")+len("--after "):]
	r = mustCLI(t, "", "poison", "list", "-c", cfg, "-q", "orders", "--scan", "--after", strings.TrimSpace(cursor))
	if got := strings.Count(r.stdout, "(bare body") + strings.Count(r.stdout, "orig-"); got != 11 {
		t.Fatalf("list --scan, second page: %d messages, want 11:\n%s", got, r.stdout)
	}

	// show, by original id and by poison id.
	r = mustCLI(t, "", "poison", "show", "-c", cfg, "-q", "orders", "orig-7")
	for _, want := range []string{"id             orig-7", "dequeue count  5", "reason         exit status 3 (try 7)", "  body-7"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show: no %q in\n%s", want, r.stdout)
		}
	}
	var m poison.Message
	r = mustCLI(t, "", "poison", "show", "--url", home, "--json", "orig-8")
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || string(m.Body) != "body-8" || m.DequeueCount != 5 {
		t.Fatalf("show --json: %v %s", err, r.stdout)
	}
	if r := cli(t, "", "poison", "show", "-c", cfg, "-q", "orders", "nope"); r.code != exitUsage || !strings.Contains(r.stderr, "not found") {
		t.Errorf("show of an unknown id: %+v", r)
	}

	// requeue by ids (a poison id, an original id, an unknown one).
	r = cli(t, "", "poison", "requeue", "-c", cfg, "-q", "orders", m.PoisonID, "orig-9", "nope")
	if r.code != exitUsage || !strings.Contains(r.stdout, "requeued 2 messages from orders-poison, 1 not found") {
		t.Fatalf("requeue by ids: %+v", r)
	}
	if got := bodiesOf(t, home); !slices.Equal(got, []string{"body-8", "body-9", "seed"}) {
		t.Fatalf("the queue holds %q", got)
	}
	// requeue --all: the bare message goes to --queue's queue.
	var res poison.Result
	r = mustCLI(t, "", "poison", "requeue", "-c", cfg, "-q", "orders", "--all", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || len(res.Done) != 39 {
		t.Fatalf("requeue --all: %v %s", err, r.stdout)
	}
	if got := bodiesOf(t, home); len(got) != 39 || !slices.Contains(got, "an old bare one") {
		t.Errorf("after requeue --all the queue holds %d: %q", len(got), got)
	}
	if n := queueDepthOf(t, pq); n != 0 {
		t.Errorf("the poison queue holds %d after requeue --all", n)
	}

	// purge.
	putPoison(t, pq, 3)
	r = mustCLI(t, "", "poison", "purge", "-c", cfg, "-q", "orders", "orig-1")
	if !strings.Contains(r.stdout, "purged 1 message from orders-poison") || queueDepthOf(t, pq) != 2 {
		t.Errorf("purge by id: %q, %d left", r.stdout, queueDepthOf(t, pq))
	}
	mustCLI(t, "", "poison", "purge", "-c", cfg, "-q", "orders", "--all")
	if n := queueDepthOf(t, pq); n != 0 {
		t.Errorf("%d left after purge --all", n)
	}

	for _, bad := range [][]string{
		{"poison", "purge", "-c", cfg, "-q", "orders"},
		{"poison", "purge", "-c", cfg, "-q", "orders", "--all", "x"},
		{"poison", "list", "-c", cfg, "-q", "orders", "--limit", "0"},
		{"poison", "list", "-c", cfg, "-q", "orders", "--after", "!!"},
		{"poison", "show", "-c", cfg, "-q", "orders"},
	} {
		if r := cli(t, "", bad...); r.code != exitUsage {
			t.Errorf("adaptq %s: exit %d, want 2 (stderr %q)", strings.Join(bad, " "), r.code, r.stderr)
		}
	}
}
