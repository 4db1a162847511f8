package memory_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
)

// model is the obvious, slow implementation of the contract: a list.
type model struct {
	msgs []*modelMsg
}

type modelMsg struct {
	id                 string
	seq                int
	visibleAt, expires time.Time
	dequeues           int
	receipt            string // the driver's newest receipt
}

func (m *model) visible(now time.Time) []*modelMsg {
	var out []*modelMsg
	for _, x := range m.msgs {
		if !x.visibleAt.After(now) && x.expires.After(now) {
			out = append(out, x)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].visibleAt.Equal(out[j].visibleAt) {
			return out[i].visibleAt.Before(out[j].visibleAt)
		}
		return out[i].seq < out[j].seq
	})
	return out
}

func (m *model) find(id string) (int, *modelMsg) {
	for i, x := range m.msgs {
		if x.id == id {
			return i, x
		}
	}
	return -1, nil
}

// TestMatchesModel runs random operations against the driver and the model
// and requires the same answers: the heap, the lazy expiry and the peek
// walk are exact, not approximately right.
func TestMatchesModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		c := clock.NewFake(clock.Epoch)
		q, err := memory.NewStore(memory.WithClock(c)).Queue("model")
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var md model
		var held []*modelMsg // messages some consumer got, maybe stale now
		heldReceipt := map[*modelMsg][]string{}
		seq := 0
		for step := 0; step < 3000; step++ {
			now := c.Now()
			switch op := rng.IntN(10); {
			case op < 3: // put
				ttl := time.Duration(1+rng.IntN(120)) * time.Second
				delay := time.Duration(0)
				if rng.IntN(4) == 0 {
					delay = time.Duration(rng.IntN(int(ttl/time.Second))) * time.Second
				}
				id, err := q.Put(ctx, []byte("x"), queue.PutOptions{TTL: ttl, InitialVisibilityDelay: delay})
				if err != nil {
					t.Fatal(err)
				}
				seq++
				md.msgs = append(md.msgs, &modelMsg{id: id, seq: seq, visibleAt: now.Add(delay), expires: now.Add(ttl)})
			case op < 6: // get
				n := 1 + rng.IntN(queue.MaxBatchSize)
				vis := time.Duration(1+rng.IntN(30)) * time.Second
				got, err := q.Get(ctx, n, vis)
				if err != nil {
					t.Fatal(err)
				}
				want := md.visible(now)
				if len(want) > n {
					want = want[:n]
				}
				if len(got) != len(want) {
					t.Fatalf("seed %d step %d: Get(%d) = %d messages, model %d", seed, step, n, len(got), len(want))
				}
				for i, g := range got {
					w := want[i]
					w.dequeues++
					w.visibleAt = now.Add(vis)
					w.receipt = g.PopReceipt
					if g.ID != w.id || g.DequeueCount != w.dequeues || !g.NextVisibleAt.Equal(w.visibleAt) || !g.ExpiresAt.Equal(w.expires) {
						t.Fatalf("seed %d step %d: Get[%d] = %s (dq %d, vis %s), model %s (dq %d, vis %s)",
							seed, step, i, g.ID, g.DequeueCount, g.NextVisibleAt, w.id, w.dequeues, w.visibleAt)
					}
					held = append(held, w)
					heldReceipt[w] = append(heldReceipt[w], g.PopReceipt)
				}
			case op < 8 && len(held) > 0: // delete or update with some receipt we were given
				w := held[rng.IntN(len(held))]
				rs := heldReceipt[w]
				r := rs[rng.IntN(len(rs))]
				i, live := md.find(w.id)
				var wantErr error
				switch {
				case live == nil || !live.expires.After(now):
					wantErr = queue.ErrNotFound
				case r != live.receipt:
					wantErr = queue.ErrReceiptMismatch
				}
				if op == 6 {
					err := q.Delete(ctx, w.id, r)
					if !errors.Is(err, wantErr) || (wantErr == nil && err != nil) {
						t.Fatalf("seed %d step %d: Delete = %v, model %v", seed, step, err, wantErr)
					}
					if i >= 0 && (wantErr == nil || wantErr == queue.ErrNotFound) {
						md.msgs = append(md.msgs[:i], md.msgs[i+1:]...)
					}
				} else {
					d := time.Duration(rng.IntN(20)) * time.Second
					nr, err := q.UpdateVisibility(ctx, w.id, r, d)
					if !errors.Is(err, wantErr) || (wantErr == nil && err != nil) {
						t.Fatalf("seed %d step %d: UpdateVisibility = %v, model %v", seed, step, err, wantErr)
					}
					if wantErr == nil {
						live.receipt = nr
						live.visibleAt = now.Add(d)
						heldReceipt[w] = append(heldReceipt[w], nr)
					} else if wantErr == queue.ErrNotFound && i >= 0 {
						md.msgs = append(md.msgs[:i], md.msgs[i+1:]...)
					}
				}
			case op == 8: // peek and count
				n := 1 + rng.IntN(queue.MaxPeek)
				got, err := q.Peek(ctx, n)
				if err != nil {
					t.Fatal(err)
				}
				want := md.visible(now)
				if len(want) > n {
					want = want[:n]
				}
				if len(got) != len(want) {
					t.Fatalf("seed %d step %d: Peek(%d) = %d, model %d", seed, step, n, len(got), len(want))
				}
				for i := range got {
					if got[i].ID != want[i].id || got[i].DequeueCount != want[i].dequeues {
						t.Fatalf("seed %d step %d: Peek[%d] = %s, model %s", seed, step, i, got[i].ID, want[i].id)
					}
				}
				cnt, err := q.Count(ctx)
				if err != nil {
					t.Fatal(err)
				}
				live := 0
				for _, x := range md.msgs {
					if x.expires.After(now) {
						live++
					}
				}
				if cnt != live {
					t.Fatalf("seed %d step %d: Count = %d, model %d", seed, step, cnt, live)
				}
			default:
				c.Advance(time.Duration(rng.IntN(5000)) * time.Millisecond)
			}
		}
	}
}
