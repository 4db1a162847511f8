package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// A handler's failure that quotes a signed URL, a password in a URL and a
// token reaches the poison queue redacted: `adaptq poison show` and
// `poison list` print no secret of it.
func TestPoisonShowPrintsTheRedactedReason(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	home := "sqlite://" + dir + "/q.db?queue=orders"
	ctx, q := openTest(t, home)
	_, pq := openTest(t, home+"-poison")
	id, err := q.Put(ctx, []byte("order 7"), queue.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *queue.Message) error {
		return errors.New("GET https://acct.blob.core.windows.net/c/b?sv=1&sig=SIGSECRET: 403 from https://u:PWSECRET@h.example; token=TOKSECRET")
	}
	l, err := listener.New(q, h, listener.Options{Poison: pq, MaxDequeueCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	if err := l.Start(runCtx, 1); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the message is poisoned", func() bool { return l.Stats().Poisoned == 1 })
	cancel()
	if err := l.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"poison", "show", "--url", home, id},
		{"poison", "show", "--url", home, id, "--json"},
		{"poison", "list", "--url", home},
		{"poison", "list", "--url", home, "--json"},
	} {
		out := mustCLI(t, "", args...).stdout
		for _, s := range []string{"SIGSECRET", "PWSECRET", "TOKSECRET"} {
			if strings.Contains(out, s) {
				t.Errorf("adaptq %s prints %s:\n%s", strings.Join(args, " "), s, out)
			}
		}
		if args[1] == "show" && !strings.Contains(out, "sig=REDACTED") {
			t.Errorf("adaptq %s does not show the redacted reason:\n%s", strings.Join(args, " "), out)
		}
	}
}
