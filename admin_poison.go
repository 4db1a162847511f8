package adaptq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// Admin paths of the poison tools; {name} is the queue's name (not its
// poison queue's), {id} a poison message's poison id or original id.
const (
	// PoisonPath lists the poison queue: GET, ?limit=N&after=CURSOR.
	PoisonPath = "/v1/queues/{name}/poison"
	// PoisonMessagePath shows one poison message with its body: GET.
	PoisonMessagePath = "/v1/queues/{name}/poison/{id}"
	// PoisonRequeuePath and PoisonPurgePath take ids or all=true, as a form
	// (ids=A&ids=B, or ids=A,B) or as JSON ({"ids": ["A"]} or {"all": true}):
	// POST.
	PoisonRequeuePath = "/v1/queues/{name}/poison/requeue"
	PoisonPurgePath   = "/v1/queues/{name}/poison/purge"
)

// PoisonPage is one page of a queue's poison queue, as GET PoisonPath
// serves it.
type PoisonPage struct {
	Queue       string `json:"queue"`
	PoisonQueue string `json:"poison_queue"`
	poison.Page
}

// ErrNoQueue: the worker has no queue of that name.
var ErrNoQueue = errors.New("adaptq: no such queue")

// poisonOf finds the named queue while the worker runs.
func (w *Worker) poisonOf(queueName string) (*workerQueue, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wq := range w.queues {
		if wq.name == queueName {
			return wq, nil
		}
	}
	if !w.running {
		return nil, fmt.Errorf("queue %q: %w", queueName, ErrNotRunning)
	}
	return nil, fmt.Errorf("%w: %q is not configured", ErrNoQueue, queueName)
}

// PoisonList returns up to limit messages (0: poison.DefaultLimit) of the
// named queue's poison queue after the cursor after ("" for the first
// page), oldest first, without their bodies. See poison.List for how a
// poison queue of more than 32 messages is read without taking anything.
func (w *Worker) PoisonList(ctx context.Context, queueName, after string, limit int) (PoisonPage, error) {
	wq, err := w.poisonOf(queueName)
	if err != nil {
		return PoisonPage{}, err
	}
	w.poisonMu.Lock()
	defer w.poisonMu.Unlock()
	p, err := poison.List(ctx, wq.poison, after, limit)
	return PoisonPage{Queue: wq.name, PoisonQueue: wq.poison.Name(), Page: p}, err
}

// PoisonPeek returns up to n (1..32) messages of the named queue's poison
// queue, most recently poisoned first, without bodies, with one peek that
// hides nothing: for a page that refreshes itself. See poison.Peek.
func (w *Worker) PoisonPeek(ctx context.Context, queueName string, n int) ([]poison.Message, error) {
	wq, err := w.poisonOf(queueName)
	if err != nil {
		return nil, err
	}
	return poison.Peek(ctx, wq.poison, n)
}

// PoisonMessage returns the message of the named queue's poison queue whose
// poison id, or else original id, is id, with its body.
func (w *Worker) PoisonMessage(ctx context.Context, queueName, id string) (poison.Message, error) {
	wq, err := w.poisonOf(queueName)
	if err != nil {
		return poison.Message{}, err
	}
	w.poisonMu.Lock()
	defer w.poisonMu.Unlock()
	return poison.Find(ctx, wq.poison, id)
}

// PoisonRequeue puts the selected messages of the named queue's poison
// queue back to the queues they were poisoned from (a bare message, whose
// queue is unknown, to the named queue), then deletes them from the poison
// queue, and pulls those queues' push triggers. A message whose envelope
// names a queue this worker does not run, or one whose poison queue is
// another, stays, listed in Failed.
func (w *Worker) PoisonRequeue(ctx context.Context, queueName string, sel poison.Selection) (poison.Result, error) {
	wq, err := w.poisonOf(queueName)
	if err != nil {
		return poison.Result{}, err
	}
	dest := func(name string) (*queue.Queue, error) {
		if name == "" || name == wq.name {
			return wq.q, nil
		}
		// Anyone who can write to the poison queue can name any queue in
		// an envelope: only a queue that poisons onto this same poison
		// queue can be where the message came from.
		other, err := w.poisonOf(name)
		if err != nil {
			return nil, fmt.Errorf("it was poisoned from queue %q, which this worker does not run", name)
		}
		if other.poison == nil || other.poison.Name() != wq.poison.Name() {
			return nil, fmt.Errorf("its envelope names queue %q, whose poison queue is not %s: refused", name, wq.poison.Name())
		}
		return other.q, nil
	}
	w.poisonMu.Lock()
	res, err := poison.Requeue(ctx, wq.poison, dest, sel)
	w.poisonMu.Unlock()
	woken := map[string]bool{}
	for _, d := range res.Done {
		if !d.Duplicate && !woken[d.Queue] {
			woken[d.Queue] = true
			_ = w.Trigger(d.Queue)
		}
	}
	return res, err
}

// PoisonPurge deletes the selected messages of the named queue's poison
// queue.
func (w *Worker) PoisonPurge(ctx context.Context, queueName string, sel poison.Selection) (poison.Result, error) {
	wq, err := w.poisonOf(queueName)
	if err != nil {
		return poison.Result{}, err
	}
	w.poisonMu.Lock()
	defer w.poisonMu.Unlock()
	return poison.Purge(ctx, wq.poison, sel)
}

// poisonRoutes adds the poison tools to the admin endpoint. The two POST
// routes change queues: the admin chain's cross-origin check and token
// guard them as every state-changing route.
func (w *Worker) poisonRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+PoisonPath, func(rw http.ResponseWriter, r *http.Request) {
		limit := 0
		if s := r.URL.Query().Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > poison.MaxLimit {
				http.Error(rw, fmt.Sprintf("limit %q: want a number 1..%d", s, poison.MaxLimit), http.StatusBadRequest)
				return
			}
			limit = n
		}
		p, err := w.PoisonList(r.Context(), r.PathValue("name"), r.URL.Query().Get("after"), limit)
		writePoison(rw, p, err)
	})
	mux.HandleFunc("GET "+PoisonMessagePath, func(rw http.ResponseWriter, r *http.Request) {
		m, err := w.PoisonMessage(r.Context(), r.PathValue("name"), r.PathValue("id"))
		writePoison(rw, m, err)
	})
	for path, op := range map[string]func(context.Context, string, poison.Selection) (poison.Result, error){
		PoisonRequeuePath: w.PoisonRequeue,
		PoisonPurgePath:   w.PoisonPurge,
	} {
		mux.HandleFunc("POST "+path, func(rw http.ResponseWriter, r *http.Request) {
			sel, err := readSelection(r)
			if err != nil {
				http.Error(rw, err.Error(), http.StatusBadRequest)
				return
			}
			res, err := op(r.Context(), r.PathValue("name"), sel)
			if err == nil && len(res.Failed) > 0 {
				writeJSON(rw, http.StatusInternalServerError, res)
				return
			}
			writePoison(rw, res, err)
		})
	}
}

// readSelection reads ids or all=true from a JSON body or a form (the body
// of a form post, or the query).
func readSelection(r *http.Request) (poison.Selection, error) {
	var sel poison.Selection
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "application/json" {
		var body struct {
			IDs []string `json:"ids"`
			All bool     `json:"all"`
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			return sel, fmt.Errorf("body: %v (want {\"ids\": [...]} or {\"all\": true})", err)
		}
		sel.IDs, sel.All = body.IDs, body.All
	} else {
		if err := r.ParseForm(); err != nil {
			return sel, fmt.Errorf("form: %v", err)
		}
		for _, v := range r.Form["ids"] {
			for id := range strings.SplitSeq(v, ",") {
				if id = strings.TrimSpace(id); id != "" {
					sel.IDs = append(sel.IDs, id)
				}
			}
		}
		if s := r.Form.Get("all"); s != "" {
			all, err := strconv.ParseBool(s)
			if err != nil {
				return sel, fmt.Errorf("all=%q: want true or false", s)
			}
			sel.All = all
		}
	}
	return sel, nil // the operation checks it (ErrInvalidArgument: 400)
}

// writePoison writes v as JSON, or err with the status its kind calls for.
func writePoison(rw http.ResponseWriter, v any, err error) {
	switch {
	case err == nil:
		writeJSON(rw, http.StatusOK, v)
	case errors.Is(err, ErrNoQueue), errors.Is(err, queue.ErrNotFound):
		http.Error(rw, err.Error(), http.StatusNotFound)
	case errors.Is(err, queue.ErrInvalidArgument):
		http.Error(rw, err.Error(), http.StatusBadRequest)
	case errors.Is(err, ErrNotRunning):
		http.Error(rw, err.Error(), http.StatusServiceUnavailable)
	default:
		http.Error(rw, err.Error(), http.StatusBadGateway)
	}
}

func writeJSON(rw http.ResponseWriter, status int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	enc := json.NewEncoder(rw)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
