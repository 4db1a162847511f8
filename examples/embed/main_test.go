package main

import (
	"bytes"
	"context"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"

	"github.com/adaptq/adaptq/queue"
	_ "github.com/adaptq/adaptq/queue/sqlite"
)

// TestEmbedExample runs the example's main in its own directory layout and
// feeds it orders through the queue, as another process would.
func TestEmbedExample(t *testing.T) {
	if os.Getenv("ADAPTQ_EMBED_CHILD") == "1" {
		main()
		return
	}
	root := t.TempDir()
	cfgDir := filepath.Join(root, "examples", "embed")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile("adaptq.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg = bytes.ReplaceAll(cfg, []byte("127.0.0.1:8089"), []byte("127.0.0.1:0"))
	if err := os.WriteFile(filepath.Join(cfgDir, "adaptq.yaml"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	// Put two orders and a bad one before the worker starts.
	ctx := context.Background()
	q, err := queue.Open(ctx, "sqlite://"+filepath.Join(cfgDir, "data", "embed.db")+"?queue=orders") // beside the config
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{`{"id":"A1","sku":"pen","qty":3}`, `{"id":"A2","sku":"ink","qty":1}`} {
		if _, err := q.Put(ctx, []byte(b), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEmbedExample$")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "ADAPTQ_EMBED_CHILD=1")
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testutil.HangGuard) // a hang guard, not a speed test
	for !(strings.Contains(out.String(), "order A1: 3 × pen") && strings.Contains(out.String(), "order A2: 1 × ink")) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("orders not handled; output:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		n, err := q.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d orders left in the queue", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("worker exit: %v\n%s", err, out.String())
	}
	_ = q.Close()
	log.SetOutput(os.Stderr)
}
