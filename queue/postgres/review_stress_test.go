package postgres

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// TestGetReleaseChurn: Gets race releases (UpdateVisibility 0, which
// rewrites the row a concurrent Get may be about to lock) and batch
// deletes, while a vacuum runs throughout; no message is held by two at
// once, none is lost, each is deleted once, and Count ends at 0.
func TestGetReleaseChurn(t *testing.T) {
	ctx := context.Background()
	c := clock.NewFake(clock.Epoch)
	db, err := Open(ctx, pgtest.URL(t)+"&pool_max_conns=12", WithSchema(pgtest.Schema(t)), WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pq, err := db.queue(ctx, "churn")
	if err != nil {
		t.Fatal(err)
	}
	const total = 600
	reqs := make([]driver.PutRequest, total)
	for i := range reqs {
		reqs[i] = driver.PutRequest{Body: []byte{byte(i), byte(i >> 8)}, Opts: driver.PutOptions{TTL: driver.NoExpiry}}
	}
	if _, _, err := pq.PutBatch(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		held    = map[string]bool{}
		deleted = map[string]int{}
		dups    int
		wg      sync.WaitGroup
	)
	// A vacuum of the tables runs over and over meanwhile (it prunes
	// and defragments the pages whose rows the Gets find by ctid).
	stop := make(chan struct{})
	vacuumed := make(chan int)
	go func() {
		n := 0
		defer func() { vacuumed <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := db.Vacuum(ctx); err != nil {
				t.Error(err)
				return
			}
			n++
		}
	}()
	for w := 0; w < 10; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				mu.Lock()
				done := len(deleted) == total
				mu.Unlock()
				if done {
					return
				}
				ms, err := pq.Get(ctx, 1+r.IntN(8), time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, m := range ms {
					if held[m.ID] {
						dups++
					}
					held[m.ID] = true
				}
				mu.Unlock()
				var dels []driver.Receipt
				for _, m := range ms {
					if r.IntN(3) == 0 {
						dels = append(dels, driver.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
						continue
					}
					mu.Lock()
					held[m.ID] = false
					mu.Unlock()
					if _, err := pq.UpdateVisibility(ctx, m.ID, m.PopReceipt, 0); err != nil {
						t.Errorf("release %s: %v", m.ID, err)
					}
				}
				if len(dels) > 0 {
					res, err := pq.DeleteBatch(ctx, dels)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for i, e := range res {
						if e != nil {
							t.Errorf("delete %s: %v", dels[i].ID, e)
						} else {
							deleted[dels[i].ID]++
						}
					}
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	t.Logf("%d vacuums", <-vacuumed)
	if dups != 0 {
		t.Errorf("%d deliveries of a message another held", dups)
	}
	for id, n := range deleted {
		if n != 1 {
			t.Errorf("%s deleted %d times", id, n)
		}
	}
	if n, err := pq.Count(ctx); err != nil || n != 0 {
		t.Errorf("Count: %d, %v", n, err)
	}
	var left int
	if err := db.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+quoteIdent(db.schema)+`.messages) + (SELECT count(*) FROM `+quoteIdent(db.schema)+`.bodies)`).Scan(&left); err != nil || left != 0 {
		t.Errorf("rows left: %d, %v", left, err)
	}
}
