package adaptq

import (
	"context"
	"math"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
)

// The worker is what its admin endpoint reads and drives.
var _ admin.Worker = (*Worker)(nil)

// Stats reads every queue's state, depth (one billed Count each), meter
// and windows: what GET /v1/stats serves (package admin).
func (w *Worker) Stats(ctx context.Context) admin.Stats {
	w.mu.Lock()
	qs := append([]*workerQueue(nil), w.queues...)
	up := w.clock.Now().Sub(w.started)
	w.mu.Unlock()
	s := admin.Stats{Uptime: admin.Duration(up), PricePer10k: w.cfg.PricePer10k}
	for _, wq := range qs {
		st, err := wq.l.State(ctx)
		minute, hour := wq.win.windows(w.clock.Now())
		qs := queueStats(wq.name, st, wq.meter.Snapshot(), admin.QueueWindows{Name: wq.name, LastMinute: minute, LastHour: hour})
		if err != nil {
			qs.DepthError = queue.RedactText(err.Error())
		}
		qs.Flow = flowStats(wq.l.Flow())
		s.Queues = append(s.Queues, qs)
	}
	return s
}

func queueStats(name string, st listener.State, m meter.Snapshot, win admin.QueueWindows) admin.QueueStats {
	q := admin.QueueStats{
		Name: name, Depth: st.Depth, PricePer10k: m.PricePer10k,
		ActiveTasks: st.ActiveTasks, TotalTasks: st.TotalTasks, IdleTasks: st.IdleTasks, InFlight: st.InFlight,
		HandlerTime: admin.Duration(st.HandlerTime),
		Processed:   st.Processed, Failed: st.Failed, Poisoned: st.Poisoned, Deleted: st.Deleted,
		ReceiptMismatches: st.ReceiptMismatches,
		GetErrors:         st.GetErrors, Renewed: st.Renewed, Released: st.Released,
		BatchCalls:  st.Calls,
		CallFigures: callFigures(m),
		LastMinute:  win.LastMinute, LastHour: win.LastHour,
	}
	cur := win.Current()
	q.MonthlyCost, q.IdleCallsPerHour = cur.MonthlyCost, cur.EmptyGetsPerHour
	return q
}

// callFigures are a meter's calls as the stats and windows show them.
func callFigures(m meter.Snapshot) admin.CallFigures {
	f := admin.CallFigures{Calls: m.Map(), TotalCalls: m.Total(), CallErrors: m.TotalErrors(), Cost: m.Cost()}
	if c := m.CallsPerMessage(); !math.IsNaN(c) {
		f.CallsPerMessage = c
	}
	return f
}

// AdminAddress is the address the admin endpoint listens on while the
// worker runs ("" if it has none or has not started).
func (w *Worker) AdminAddress() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.admin
}

// startAdmin serves the admin endpoint (package admin) if an address is
// configured.
func (w *Worker) startAdmin() (*admin.Server, error) {
	if w.cfg.Admin.Address == "" {
		return nil, nil
	}
	o := admin.Options{Address: w.cfg.Admin.Address, Token: w.cfg.Admin.Token, Logger: w.log, Clock: w.clock, MaxConns: w.cfg.Admin.MaxConnections}
	if w.adminOptions != nil {
		w.adminOptions(&o)
	}
	srv, err := admin.Start(w, o)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.admin = srv.Addr()
	w.mu.Unlock()
	return srv, nil
}
