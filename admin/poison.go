package admin

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
	// PoisonPath lists the poison queue: GET, ?limit=N&after=CURSOR. A
	// page only peeks, with backend calls bounded by N (poison.List).
	PoisonPath = "/v1/queues/{name}/poison"
	// PoisonMessagePath shows one poison message with its body: GET. It
	// only peeks (poison.Find), with backend calls bounded whatever the
	// poison queue holds.
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

// ErrNoQueue: the worker has no queue of that name; a poison route answers
// 404. The worker's errors wrap it (adaptq.ErrNoQueue is this value).
var ErrNoQueue = errors.New("adaptq: no such queue")

// PoisonWorker is the worker's side of the poison tools: the poison routes
// call it, and the status page peeks at each queue's poison queue. Its
// errors wrap ErrNoQueue for a queue the worker does not run and
// ErrNotRunning while it does not run.
type PoisonWorker interface {
	// PoisonList returns up to limit messages of the named queue's poison
	// queue after the cursor after, oldest first, without bodies, with
	// backend calls bounded by limit (poison.List).
	PoisonList(ctx context.Context, queueName, after string, limit int) (PoisonPage, error)
	// PoisonMessage returns one message of the named queue's poison queue,
	// by its poison id or original id, with its body.
	PoisonMessage(ctx context.Context, queueName, id string) (poison.Message, error)
	// PoisonRequeue puts the selected messages back to their queues and
	// deletes them from the poison queue.
	PoisonRequeue(ctx context.Context, queueName string, sel poison.Selection) (poison.Result, error)
	// PoisonPurge deletes the selected messages of the poison queue.
	PoisonPurge(ctx context.Context, queueName string, sel poison.Selection) (poison.Result, error)
	// PoisonQueue returns the named queue's poison queue, metered.
	PoisonQueue(queueName string) (*queue.Queue, error)
}

// poisonRoutes adds the poison tools to the admin endpoint. The two POST
// routes change queues: the admin chain's cross-origin check and token
// guard them as every state-changing route.
func (s *Server) poisonRoutes(mux *http.ServeMux) {
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
		p, err := s.w.PoisonList(r.Context(), r.PathValue("name"), r.URL.Query().Get("after"), limit)
		writePoison(rw, p, err)
	})
	mux.HandleFunc("GET "+PoisonMessagePath, func(rw http.ResponseWriter, r *http.Request) {
		m, err := s.w.PoisonMessage(r.Context(), r.PathValue("name"), r.PathValue("id"))
		writePoison(rw, m, err)
	})
	for path, op := range map[string]func(context.Context, string, poison.Selection) (poison.Result, error){
		PoisonRequeuePath: s.w.PoisonRequeue,
		PoisonPurgePath:   s.w.PoisonPurge,
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
	case errors.Is(err, queue.ErrUnsupported):
		http.Error(rw, err.Error(), http.StatusNotImplemented)
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
