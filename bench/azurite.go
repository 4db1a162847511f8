package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/meter"
)

// Azurite targets: the listener against the consumers a user writes
// without it, on the same Azurite in the same run (the calls target is
// AzureLikeCallsTarget, section 4's).
const (
	// AzureHandWrittenTarget: the listener keeps at least this fraction of
	// the hand-written loop's rate at the same concurrency.
	AzureHandWrittenTarget = 0.95
	// AzureNaiveTarget: the listener drains at least this many times as
	// fast as the naive loop of “Queues in Windows Azure Storage”.
	AzureNaiveTarget = 2.0
)

const (
	// azureWorkers is the concurrency of the listener and the
	// hand-written loop (queue/azure's bench_test.go: 16 getting 32).
	azureWorkers = 16
	// azureLatency is added to every request of the far rows by a
	// delaying proxy, as queue/azure's BenchmarkDrainLatency does.
	azureLatency = 30 * time.Millisecond
	// azureFillProducers put each backlog (BenchmarkPut's 16).
	azureFillProducers = 16
	// azureDrainLimit fails a drain that stalls.
	azureDrainLimit = 5 * time.Minute
)

// azureConsumer is one way of draining a queue: it returns the time from
// its start to its n-th delete.
type azureConsumer struct {
	key, what string
	drain     func(ctx context.Context, q *queue.Queue, n int) (time.Duration, error)
}

var (
	azureNaive = azureConsumer{"naive", "naive loop (“Queues in Windows Azure Storage”): 1 worker, get 1 → no-op → delete, sleep 1 s when empty", naiveDrain}
	azureHand  = azureConsumer{"handwritten", fmt.Sprintf("hand-written loop: %d goroutines, get 32 → no-op → 32 deletes in parallel", azureWorkers), handWrittenDrain}
	azureLis   = azureConsumer{"listener", fmt.Sprintf("listener: %d tasks, get 32, concurrency %d", azureWorkers, azureListenerConcurrency), listenerDrainAzure}
)

// azureListenerConcurrency: two full batches per task, as queue/azure's
// benchmark gives it (a task holds at most a batch plus the next one
// fetched at the new-batch threshold, 48).
const azureListenerConcurrency = 2 * azureWorkers * queue.MaxBatchSize

// naiveDrain is the worker loop of “Queues in Windows Azure Storage”: get one message, process it,
// delete it, and sleep a second when the queue is empty. It returns at the
// first empty get, where the seed's loop would sleep and poll again.
func naiveDrain(ctx context.Context, q *queue.Queue, n int) (time.Duration, error) {
	start := time.Now()
	var took time.Duration
	deleted := 0
	for {
		ms, err := q.Get(ctx, 1, time.Minute)
		if err != nil {
			return 0, err
		}
		if len(ms) == 0 {
			break // Thread.Sleep(1000) in the seed
		}
		if noop(ctx, ms[0]) == nil {
			if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
				return 0, err
			}
			if deleted++; deleted == n {
				took = time.Since(start)
			}
		}
	}
	if deleted != n {
		return 0, fmt.Errorf("deleted %d of %d", deleted, n)
	}
	return took, nil
}

// handWrittenDrain is what a careful programmer writes without the
// listener (queue/azure's bench_test.go handWritten): azureWorkers
// goroutines, each getting 32, handling them inline and deleting them in
// parallel, until its get comes back empty.
func handWrittenDrain(ctx context.Context, q *queue.Queue, n int) (time.Duration, error) {
	var done, took atomic.Int64
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for range azureWorkers {
		g.Go(func() error {
			for {
				ms, err := q.Get(gctx, queue.MaxBatchSize, time.Minute)
				if err != nil {
					return err
				}
				if len(ms) == 0 {
					return nil
				}
				var dg errgroup.Group
				for _, m := range ms {
					if noop(gctx, m) == nil {
						dg.Go(func() error {
							if err := q.Delete(gctx, m.ID, m.PopReceipt); err != nil {
								return err
							}
							if done.Add(1) == int64(n) {
								took.Store(int64(time.Since(start)))
							}
							return nil
						})
					}
				}
				if err := dg.Wait(); err != nil {
					return err
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	if done.Load() != int64(n) {
		return 0, fmt.Errorf("deleted %d of %d", done.Load(), n)
	}
	return time.Duration(took.Load()), nil
}

// azureListenerOptions: a fixed pool of azureWorkers tasks getting 32, the
// hand-written loop's concurrency; every other option is the default, the
// idle backoff included. (queue/azure's benchmark shortens the backoff to
// 1 ms–100 ms: at these depths that costs the tasks' polls at the end of
// each drain some 0.03 calls per message more, 2.074 against 2.043 in a
// trial run while this section was written, at the same rate.)
func azureListenerOptions() listener.Options {
	return listener.Options{
		Tasks: azureWorkers, MinTasks: azureWorkers, MaxTasks: azureWorkers,
		Concurrency: azureListenerConcurrency,
	}
}

func listenerDrainAzure(ctx context.Context, q *queue.Queue, n int) (time.Duration, error) {
	d, _, err := drainListener(ctx, q, n, noop, azureListenerOptions(), azureDrainLimit)
	return d, err
}

// azureSeries is one consumer's drains against one endpoint.
type azureSeries struct {
	c        azureConsumer
	m        *meter.Meter
	fill     *queue.Queue // metered, direct
	drainQ   *queue.Queue // metered, direct or through the proxy
	took     []time.Duration
	cpu      nodeUsage // over the drains
	calls    meter.Snapshot
	messages int
}

func (s *azureSeries) rate() float64 {
	var t time.Duration
	for _, d := range s.took {
		t += d
	}
	return rate(s.messages, t)
}

// jsPerRequest is the time Azurite's JavaScript thread spent per request
// of the drains (puts left out).
func (s *azureSeries) jsPerRequest() time.Duration {
	return s.cpu.js / time.Duration(max(s.calls.Total()-s.calls.Calls[meter.Put], 1))
}

// rateRange is the slowest and the fastest round's rate.
func (s *azureSeries) rateRange() (lo, hi float64) {
	n := s.messages / max(len(s.took), 1)
	lo = math.Inf(1)
	for _, d := range s.took {
		r := rate(n, d)
		lo, hi = math.Min(lo, r), math.Max(hi, r)
	}
	return math.Round(lo), math.Round(hi)
}

// figure is the rate over all rounds and the rounds' range.
func (s *azureSeries) figure() string {
	if len(s.took) == 1 {
		return perSec(s.rate())
	}
	lo, hi := s.rateRange()
	return fmt.Sprintf("%s (rounds %s–%s)", perSec(s.rate()), commas(int64(lo)), commas(int64(hi)))
}

// nodeUsage is what a span cost this process, Azurite's queue service
// (its Node process, and that process's main thread, where JavaScript
// runs) and the whole machine.
type nodeUsage struct {
	usage
	node, js time.Duration
	// nodeOK: Azurite's CPU was read over every span added.
	nodeOK bool
	spans  int
}

func (u *nodeUsage) add(v nodeUsage) {
	u.nodeOK = v.nodeOK && (u.spans == 0 || u.nodeOK)
	u.spans++
	u.usage.add(v.usage)
	u.node += v.node
	u.js += v.js
}

// nodeCores is the cores Azurite's Node process kept busy; jsBusy the
// share of the wall time its JavaScript thread ran.
func (u nodeUsage) nodeCores() float64 { return u.node.Seconds() / u.wall.Seconds() }
func (u nodeUsage) jsBusy() float64    { return u.js.Seconds() / u.wall.Seconds() }

// describe says how busy Azurite, this process and the machine were.
func (u nodeUsage) describe() string {
	var parts []string
	if u.nodeOK {
		parts = append(parts, fmt.Sprintf("Azurite's Node process %.2f cores (its JavaScript thread busy %.0f%% of the time)", u.nodeCores(), 100*u.jsBusy()))
	}
	parts = append(parts, fmt.Sprintf("this process %.2f cores", u.cores()))
	if m := u.machineCores(); !math.IsNaN(m) {
		parts = append(parts, fmt.Sprintf("the machine %.2f of %d", m, runtime.NumCPU()))
		if o := u.others(); o >= 0.25 {
			parts = append(parts, fmt.Sprintf("so other processes %.2f", o))
		}
	}
	return "CPU: " + strings.Join(parts, ", ")
}

// others is the cores processes other than this one and Azurite's queue
// service kept busy (NaN if unknown).
func (u nodeUsage) others() float64 {
	m := u.machineCores()
	if math.IsNaN(m) || !u.nodeOK {
		return math.NaN()
	}
	return math.Max(m-u.cores()-u.nodeCores(), 0)
}

// spanNode measures f, reading Azurite's queue service process pid too.
func spanNode(pid int, f func() error) (nodeUsage, error) {
	n0, ok0 := procCPU(pid, 0)
	j0, okj0 := procCPU(pid, pid)
	u, err := span(f)
	n1, ok1 := procCPU(pid, 0)
	j1, okj1 := procCPU(pid, pid)
	nu := nodeUsage{usage: u}
	if pid > 0 && ok0 && ok1 && okj0 && okj1 {
		nu.node, nu.js, nu.nodeOK = n1-n0, j1-j0, true
	}
	return nu, err
}

// queuePID is the process id of srv's queue service (0 if unknown).
func queuePID(srv *azuritetest.Server) int {
	for _, pid := range srv.PIDs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(b), "queueHost") {
			return pid
		}
	}
	return 0
}

// delayProxy is a reverse proxy that holds every request for a fixed
// time before forwarding it, as a far datacenter would.
type delayProxy struct {
	endpoint string
	srv      *http.Server
	tr       *http.Transport
}

func startDelayProxy(target string, delay time.Duration) (*delayProxy, error) {
	tu, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	account := tu.Path
	tu.Path = ""
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = azure.DefaultMaxIdleConns
	tr.MaxIdleConnsPerHost = azure.DefaultMaxIdleConns
	tr.IdleConnTimeout = azure.DefaultIdleConnTimeout // below Azurite's keep-alive
	rp := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(tu) },
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0), // cancelled requests are expected at shutdown
	}
	p := &delayProxy{endpoint: "http://" + ln.Addr().String() + account, tr: tr}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
			rp.ServeHTTP(w, r)
		case <-r.Context().Done():
		}
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *delayProxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
	p.tr.CloseIdleConnections()
}

// errNoAzurite wraps a failure to start Azurite with what to do.
var errNoAzurite = errors.New("the Azurite section needs Azurite: run `make test` once from the repository root " +
	"(it installs the pinned Azurite into tools/azurite with npm ci), then run the benchmarks again")

func azurite(ctx context.Context, e *Env, s *Section) error {
	n, nf, rounds := e.Sizes.Azurite, e.Sizes.AzuriteLatency, e.Sizes.AzuriteRounds
	s.how("adaptq's Azure driver (`queue/azure`) against Azurite %s, the Azure Storage emulator, started as the driver's "+
		"tests start it (`azuritetest`: one Node process per service on a free loopback port, its data on /dev/shm where "+
		"there is one); %d-byte messages, a no-op handler. Three consumers drain the same backlog of %s messages, each from "+
		"a queue of its own, put by %d producers just before each drain (not timed): the **naive loop** of “Queues in Windows Azure Storage” (one "+
		"worker: get 1, handle, delete; it sleeps 1 s when the queue is empty, which a drain never reaches), the "+
		"**hand-written loop** a careful programmer writes (%d goroutines, each getting 32, handling them inline and "+
		"deleting the 32 in parallel, as Azure has no batch delete) and the **listener** at the same concurrency (%d tasks "+
		"getting 32, MinTasks = MaxTasks = %d, handler concurrency %d, every other option its default). Each is timed from its start "+
		"to its %s-th delete; in each of %d round%s every consumer drains once, in rotating order, so that drift in Azurite "+
		"or in the machine's load touches all three alike, and each rate is all its messages over all its time. A cost "+
		"meter (`queue/meter`) wraps each consumer's queue, puts included; the driver makes one billed request per call.",
		azuritetest.Version, len(smallBody), commas(int64(n)), azureFillProducers, azureWorkers, azureWorkers, azureWorkers,
		azureListenerConcurrency, commas(int64(n)), rounds, plural(rounds))
	s.how("**30 ms per request**: the hand-written loop and the listener again, on %s messages, through a reverse proxy "+
		"in this process that holds every request %s before forwarding it to Azurite (queue/azure's "+
		"BenchmarkDrainLatency), as a datacenter some way off would; the backlogs are put directly. **CPU** is read from "+
		"/proc over the drains: Azurite's queue service (its Node process, and that process's main thread, where "+
		"Azurite's JavaScript runs), this process (getrusage) and the machine (/proc/stat).",
		commas(int64(nf)), azureLatency)

	srv, err := azuritetest.Launch()
	if err != nil {
		return fmt.Errorf("%w: %v", errNoAzurite, err)
	}
	defer srv.Stop()
	pid := queuePID(srv)
	e.logf("azurite: Azurite %s: queue service %s (pid %d)", azuritetest.Version, srv.QueueEndpoint, pid)

	direct, err := azure.NewAccount(azure.Config{Account: azuritetest.Account, QueueEndpoint: srv.QueueEndpoint, BlobEndpoint: srv.BlobEndpoint})
	if err != nil {
		return err
	}
	defer direct.Close()
	proxy, err := startDelayProxy(srv.QueueEndpoint, azureLatency)
	if err != nil {
		return err
	}
	defer proxy.close()
	far, err := azure.NewAccount(azure.Config{Account: azuritetest.Account, QueueEndpoint: proxy.endpoint, BlobEndpoint: srv.BlobEndpoint})
	if err != nil {
		return err
	}
	defer far.Close()

	open := func(c azureConsumer, prefix string, drainAcct *azure.Account) (*azureSeries, error) {
		name := "bench-" + prefix + c.key
		fq, err := direct.Queue(ctx, name)
		if err != nil {
			return nil, err
		}
		if err := fq.Clear(ctx); err != nil {
			return nil, err
		}
		m := meter.New(0)
		dq, err := drainAcct.Queue(ctx, name, queue.WithObserver(m))
		if err != nil {
			return nil, err
		}
		mfq, err := direct.Queue(ctx, name, queue.WithObserver(m))
		if err != nil {
			return nil, err
		}
		_ = fq.Close()
		return &azureSeries{c: c, m: m, fill: mfq, drainQ: dq}, nil
	}
	var nearS, farS []*azureSeries
	for _, c := range []azureConsumer{azureNaive, azureHand, azureLis} {
		sr, err := open(c, "", direct)
		if err != nil {
			return err
		}
		nearS = append(nearS, sr)
	}
	for _, c := range []azureConsumer{azureHand, azureLis} {
		sr, err := open(c, "far-", far)
		if err != nil {
			return err
		}
		farS = append(farS, sr)
	}
	defer func() {
		for _, sr := range append(nearS, farS...) {
			_ = sr.fill.Close()
			_ = sr.drainQ.Close()
		}
	}()

	var puts nodeUsage
	putCount := 0
	run := func(sr *azureSeries, n int, label string) error {
		u, err := spanNode(pid, func() error { return fillParallel(ctx, sr.fill, n, azureFillProducers, smallBody) })
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		puts.add(u)
		putCount += n
		before := sr.m.Snapshot()
		var took time.Duration
		u, err = spanNode(pid, func() error {
			var err error
			took, err = sr.c.drain(ctx, sr.drainQ, n)
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		if d := sr.m.Snapshot().Sub(before); d.MessagesDeleted != int64(n) {
			return fmt.Errorf("%s deleted %d of %d", label, d.MessagesDeleted, n)
		}
		sr.took = append(sr.took, took)
		sr.cpu.add(u)
		sr.messages += n
		e.logf("azurite: %s: %s (%s)", label, perSec(rate(n, took)), u.describe())
		return nil
	}
	for r := 0; r < rounds; r++ {
		for k := range nearS {
			sr := nearS[(r+k)%len(nearS)]
			if err := run(sr, n, sr.c.key); err != nil {
				return err
			}
		}
	}
	for r := 0; r < rounds; r++ {
		for k := range farS {
			sr := farS[(r+k)%len(farS)]
			if err := run(sr, nf, sr.c.key+" +"+azureLatency.String()); err != nil {
				return err
			}
		}
	}
	for _, sr := range append(nearS, farS...) {
		sr.calls = sr.m.Snapshot()
	}

	naive, hand, lis := nearS[0], nearS[1], nearS[2]
	s.add(Row{
		What:   fmt.Sprintf("Put, %d producers (the backlogs put before each drain)", azureFillProducers),
		Figure: perSec(rate(putCount, puts.wall)),
		Note:   fmt.Sprintf("%s messages in all; %s", commas(int64(putCount)), puts.describe()),
	})
	for _, sr := range nearS {
		s.add(Row{What: sr.c.what, Figure: sr.figure(), Note: callsNote(sr.calls) + "; " + sr.cpu.describe()})
	}
	ratioRow := func(what string, a, b *azureSeries, target float64, format string) Row {
		x := a.rate() / b.rate()
		return Row{What: what, Figure: fmt.Sprintf(format, x), Target: fmt.Sprintf("≥ "+format, target), Holds: verdict(x >= target)}
	}
	rh := ratioRow("listener ÷ hand-written loop", lis, hand, AzureHandWrittenTarget, "%.2f")
	rh.Note = ratioNote(rh.Holds, lis, hand)
	s.add(rh)
	rn := ratioRow("listener ÷ naive loop", lis, naive, AzureNaiveTarget, "%.1f×")
	rn.Note = fmt.Sprintf("the naive loop makes two round trips per message, one after the other (a get of 1, a delete); "+
		"the listener's %d tasks get 32 at a time and delete them in parallel", azureWorkers)
	s.add(rn)
	cpm := lis.calls.CallsPerMessage()
	drains := float64(len(lis.took))
	floor := 1 + 1.0/queue.MaxBatchSize + 1 + azureWorkers/float64(n)
	cr := Row{
		What:   "listener's calls per message on Azure: put + get/32 + delete",
		Figure: fmt.Sprintf("%.3f calls/message", cpm),
		Target: fmt.Sprintf("≤ %.2f", AzureLikeCallsTarget),
		Holds:  verdict(cpm <= AzureLikeCallsTarget),
		Note: breakdown(lis.calls) + fmt.Sprintf(" over all %d drains, counted until each listener had shut down: %.1f empty gets "+
			"per drain, the %d tasks' polls as the queue ran dry; %d workers that each stop at one empty get make %.3f on %s messages "+
			"(the hand-written loop: %.3f)", len(lis.took), float64(lis.calls.Calls[meter.GetEmpty])/drains, azureWorkers,
			azureWorkers, floor, commas(int64(n)), hand.calls.CallsPerMessage()),
	}
	if cpm > AzureLikeCallsTarget {
		cr.Note = "missed: " + cr.Note
	}
	s.add(cr)
	farHand, farLis := farS[0], farS[1]
	for _, sr := range farS {
		s.add(Row{What: fmt.Sprintf("%s per request: %s", azureLatency, sr.c.what), Figure: sr.figure(), Note: callsNote(sr.calls) + "; " + sr.cpu.describe()})
	}
	rf := ratioRow(fmt.Sprintf("%s per request: listener ÷ hand-written loop", azureLatency), farLis, farHand, AzureHandWrittenTarget, "%.2f")
	rf.Note = ratioNote(rf.Holds, farLis, farHand)
	s.add(rf)

	// Why: Azurite is the ceiling.
	var all, batched nodeUsage
	var requests, batchedReqs, batchedMsgs int64
	for _, sr := range nearS {
		all.add(sr.cpu)
		requests += sr.calls.Total() - sr.calls.Calls[meter.Put]
		if sr != naive {
			batched.add(sr.cpu)
			batchedReqs += sr.calls.Total() - sr.calls.Calls[meter.Put]
			batchedMsgs += sr.calls.MessagesDeleted
		}
	}
	putRate := rate(putCount, puts.wall)
	if all.nodeOK && batchedReqs > 0 {
		perReq := batched.js / time.Duration(batchedReqs)
		perPut := puts.js / time.Duration(max(putCount, 1))
		reqPerMsg := float64(batchedReqs) / float64(batchedMsgs)
		ceilingRate := 1 / (perReq.Seconds() * reqPerMsg)
		note := fmt.Sprintf("Azurite is the bottleneck, not the consumers: over the direct drains its queue service, one Node "+
			"process whose JavaScript runs on one thread, kept %.2f cores busy, that thread busy %.0f%% of the time, while this "+
			"process (the three consumers and the driver) used %.2f cores. Draining, the JavaScript thread spent %s per request "+
			"(a get or a delete; %s requests over the hand-written loop's and the listener's drains), against %s per put when "+
			"Azurite took %s puts a second from %d producers: at %.3f requests per message, that thread, kept busy all the "+
			"time, would drain some %s; the hand-written loop drained %s and the listener %s. Their ratio therefore says "+
			"whether the listener spends Azurite's capacity as well as the loop does (as many requests per message, no idle "+
			"gaps); it cannot show either going faster than Azurite.",
			all.nodeCores(), 100*all.jsBusy(), all.cores(), ms(perReq), commas(batchedReqs), ms(perPut),
			commas(int64(math.Round(putRate))), azureFillProducers, reqPerMsg, perSec(ceilingRate), perSec(hand.rate()), perSec(lis.rate()))
		if o := all.others(); o >= 0.25 && all.jsBusy() < 0.95 {
			note += fmt.Sprintf(" Other processes kept %.2f of the %d cores busy meanwhile, so for part of the time Azurite's thread "+
				"waited for a core: on an idle machine both rates would be higher, their ratio much the same.", o, runtime.NumCPU())
		}
		s.note("%s", note)
	} else {
		s.note("Azurite is the bottleneck (one Node process, its JavaScript on one thread); its CPU could not be read here "+
			"(no /proc), while this process used %.2f cores over the direct drains. Putting from %d producers, Azurite took "+
			"%s messages a second.", all.cores(), azureFillProducers, commas(int64(math.Round(putRate))))
	}
	var farAll nodeUsage
	var farReqs int64
	for _, sr := range farS {
		farAll.add(sr.cpu)
		farReqs += sr.calls.Total() - sr.calls.Calls[meter.Put]
	}
	ceiling := float64(azureWorkers*queue.MaxBatchSize) / (2 * azureLatency).Seconds()
	note := fmt.Sprintf("With %s added to every request, a worker's cycle takes at least two round trips (a get, then "+
		"its 32 deletes in parallel), so latency alone would cap %d workers at %s, far above the %s and %s measured. ",
		azureLatency, azureWorkers, perSec(ceiling), perSec(farHand.rate()), perSec(farLis.rate()))
	if farAll.nodeOK && all.nodeOK && batchedReqs > 0 && farReqs > 0 {
		note += fmt.Sprintf("Azurite's JavaScript thread was busy %.0f%% of these drains (%.0f%% of the direct ones)",
			100*farAll.jsBusy(), 100*all.jsBusy())
		if farAll.jsBusy() >= 0.6 {
			note += ", so it still sets most of the pace"
		} else {
			note += ", so the round trips set more of the pace"
		}
		note += fmt.Sprintf("; it spent %s per request here against %s direct, with the requests spread out by the delay",
			ms(farAll.js/time.Duration(farReqs)), ms(batched.js/time.Duration(batchedReqs)))
		if farHand.rate()+farLis.rate() >= hand.rate()+lis.rate() {
			note += ", which is why these drains are no slower than the direct ones"
		}
		note += ". "
	}
	if rf.Holds == Yes {
		note += "What the ratio shows is that the listener keeps pace with the hand-written loop when every request also " +
			"waits a round trip, as on Azure, where round trips rather than the service bound each worker; not the rate " +
			"Azure itself would give."
	} else {
		note += fmt.Sprintf("The listener falls %.0f%% behind the hand-written loop when every request also waits a round "+
			"trip, as on Azure, where round trips rather than the service bound each worker.", 100*(1-farLis.rate()/farHand.rate()))
	}
	s.note("%s", note)
	return nil
}

// pct formats a fraction as a percentage.
func pct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

// callsNote is calls per message, puts included.
func callsNote(s meter.Snapshot) string {
	return fmt.Sprintf("%.3f calls/message (puts included)", s.CallsPerMessage())
}

// ratioNote explains a listener ÷ hand-written ratio from the two series'
// rounds, calls and CPU.
func ratioNote(h Verdict, lis, hand *azureSeries) string {
	var parts []string
	llo, lhi := lis.rateRange()
	hlo, hhi := hand.rateRange()
	overlap := len(lis.took) > 1 && llo <= hhi && hlo <= lhi
	switch {
	case h == No && overlap:
		parts = append(parts, fmt.Sprintf("missed, within the rounds' spread: the listener's rounds ran %s–%s, the loop's %s–%s",
			commas(int64(llo)), commas(int64(lhi)), commas(int64(hlo)), commas(int64(hhi))))
	case h == No:
		parts = append(parts, fmt.Sprintf("missed: every round of the listener (%s–%s) was slower than every round of the loop (%s–%s)",
			commas(int64(llo)), commas(int64(lhi)), commas(int64(hlo)), commas(int64(hhi))))
	case lis.rate() > hand.rate() && overlap:
		parts = append(parts, "a ratio above 1 is the rounds' spread (the ranges above), not a listener faster than the loop")
	}
	parts = append(parts, fmt.Sprintf("calls per message %.3f vs %.3f", lis.calls.CallsPerMessage(), hand.calls.CallsPerMessage()))
	if lis.cpu.nodeOK && hand.cpu.nodeOK {
		parts = append(parts, fmt.Sprintf("Azurite's JavaScript thread busy %.0f%% vs %.0f%%, %s vs %s per request",
			100*lis.cpu.jsBusy(), 100*hand.cpu.jsBusy(), ms(lis.jsPerRequest()), ms(hand.jsPerRequest())))
		if o1, o2 := lis.cpu.others(), hand.cpu.others(); o1 >= 0.25 || o2 >= 0.25 {
			parts = append(parts, fmt.Sprintf("other processes kept %.2f vs %.2f cores busy", o1, o2))
		}
	}
	return strings.Join(parts, "; ")
}
