package poison

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/adaptq/adaptq/queue"
)

// Listing bounds.
const (
	// DefaultLimit is the page size of a listing that names none.
	DefaultLimit = 50
	// MaxLimit is the largest page a listing returns.
	MaxLimit = 1000
	// MaxScan is the most messages one operation reads (see List), and so
	// the most it holds hidden at once or acts on: one call's cost (one
	// admin request's) is bounded whatever the poison queue holds. A
	// poison queue is a place for a few failures to be looked at, not a
	// second queue; past this many a listing says it is truncated, and a
	// requeue or purge of more says more remain (Result.More): run it
	// again.
	MaxScan = 10_000
	// ScanVisibility is how long a scan hides the messages it gets before
	// it hands them back (UpdateVisibility 0) at its end: longer than a
	// scan of MaxScan messages takes, short enough that a scan cut off by
	// a crash hides nothing for long.
	ScanVisibility = time.Minute
	// maxStaleGets is how many gets in a row may return only messages a
	// scan saw before (it outlasted ScanVisibility) before it stops and
	// says more may remain.
	maxStaleGets = 3
	// releaseTimeout bounds the hand-back of a scan whose context ended,
	// and the poison delete of a requeue whose put is done.
	releaseTimeout = 10 * time.Second
)

// ErrNotFound: no message of the poison queue has the id (wraps
// queue.ErrNotFound).
var ErrNotFound = fmt.Errorf("poison: %w", queue.ErrNotFound)

// ErrBadCursor: the "after" cursor of a listing is not one a listing gave.
var ErrBadCursor = fmt.Errorf("poison: %w: bad cursor", queue.ErrInvalidArgument)

// Page is one page of a poison queue's listing.
type Page struct {
	// Messages are the page's messages, without their bodies (Size says
	// how large each is; Find gives one whole): in the order they were
	// poisoned where the backend pages its peeks, else oldest first (by
	// when they were poisoned, then by poison id).
	Messages []Message `json:"messages"`
	// Next is the cursor of the next page ("after"); empty on the last.
	Next string `json:"next,omitempty"`
	// Truncated is set when the listing could not see every visible
	// message: a backend that peeks but cannot page its peeks showed only
	// its first MaxPeek (List); the poison queue held more than MaxScan,
	// or the scan outlasted ScanVisibility (ListScan).
	Truncated bool `json:"truncated,omitempty"`
}

// List returns up to limit messages (DefaultLimit if 0, at most MaxLimit)
// of the poison queue pq that come after the cursor after ("" for the
// first page), without their bodies. It only peeks: no message is hidden,
// no dequeue count rises, and its backend calls are bounded by limit
// whatever the poison queue holds, so the admin endpoint can serve it to
// anyone who may read it:
//
//   - Where the backend pages its peeks (queue.PeekPages: memory, SQLite,
//     PostgreSQL), one PeekAfter per 32 messages of the page (one call for
//     a page of up to 31): every visible message appears on exactly one
//     page, in the order they were poisoned, and a message poisoned later
//     on a later page.
//   - Where it can only peek at its first 32 (Azure, Redis), one Peek per
//     page, paged within those 32, with Truncated set when the peek was
//     full: the messages beyond it are not listed (ListScan reads them,
//     "adaptq poison list --scan").
//   - Where it cannot peek (SQS), queue.ErrUnsupported: use ListScan.
func List(ctx context.Context, pq *queue.Queue, after string, limit int) (Page, error) {
	return list(ctx, pq, after, limit, false)
}

// ListBodies is List with each message's original body: for a page that
// previews them. A compressed body is inflated only up to its first
// MaxPreview bytes (Size is the whole body's; Find gives it whole).
func ListBodies(ctx context.Context, pq *queue.Queue, after string, limit int) (Page, error) {
	return list(ctx, pq, after, limit, true)
}

func list(ctx context.Context, pq *queue.Queue, after string, limit int, bodies bool) (Page, error) {
	limit, err := checkLimit(limit)
	if err != nil {
		return Page{}, err
	}
	var c cursor
	if after != "" {
		if c, err = parseCursor(after); err != nil {
			return Page{}, err
		}
	}
	peek := pq.Features().MaxPeek
	switch {
	case pq.PeekPages():
		if after != "" && !c.paged {
			return Page{}, fmt.Errorf("%w: after %q", ErrBadCursor, after)
		}
		// limit+1, to know whether a next page exists.
		var out []Message
		from := c.id
		for len(out) <= limit {
			n := min(peek, limit+1-len(out))
			ms, err := pq.PeekAfter(ctx, from, n)
			if err != nil {
				return Page{}, fmt.Errorf("poison: peek %s: %w", pq.Name(), err)
			}
			for _, pm := range ms {
				out = append(out, decode(pm, bodies))
			}
			if len(ms) < n {
				break
			}
			from = ms[len(ms)-1].ID
		}
		var page Page
		if len(out) > limit {
			out = out[:limit]
			page.Next = cursor{paged: true, id: out[limit-1].PoisonID}.String()
		}
		page.Messages = strip(out, bodies)
		return page, nil
	case peek > 0:
		if after != "" && c.paged {
			return Page{}, fmt.Errorf("%w: after %q", ErrBadCursor, after)
		}
		ms, err := pq.Peek(ctx, peek)
		if err != nil {
			return Page{}, fmt.Errorf("poison: peek %s: %w", pq.Name(), err)
		}
		all := make([]Message, len(ms))
		for i, m := range ms {
			all[i] = decode(m, bodies)
		}
		page := paginate(all, c, after != "", limit)
		page.Truncated = len(ms) == peek
		page.Messages = strip(page.Messages, bodies)
		return page, nil
	}
	return Page{}, fmt.Errorf("poison: %w: %s cannot show its messages without receiving them (which hides them and raises their dequeue counts); adaptq poison list --scan reads it that way",
		queue.ErrUnsupported, pq.Name())
}

// ListScan is the listing that sees every visible message on any backend,
// up to MaxScan, at the cost of reading all of them for every page. A
// Peek shows at most 32 messages, so when it finds a full 32 ListScan
// reads the queue with Get: every message is hidden for ScanVisibility
// while the scan runs (so that each is seen once) and handed back with
// UpdateVisibility 0 at its end, visible again at once. The messages' own
// dequeue counts in the poison queue rise by one (the envelope's count,
// the original's, does not change); a consumer of the poison queue running
// meanwhile does not see what the scan holds. Pages are oldest first (by
// when they were poisoned, then by poison id); its cursors are its own.
// For an operator's command ("adaptq poison list --scan"), never for a
// request anyone can repeat.
func ListScan(ctx context.Context, pq *queue.Queue, after string, limit int) (Page, error) {
	limit, err := checkLimit(limit)
	if err != nil {
		return Page{}, err
	}
	var c cursor
	if after != "" {
		if c, err = parseCursor(after); err != nil {
			return Page{}, err
		}
		if c.paged {
			return Page{}, fmt.Errorf("%w: after %q", ErrBadCursor, after)
		}
	}
	all, truncated, err := readAll(ctx, pq)
	if err != nil {
		return Page{}, err
	}
	page := paginate(all, c, after != "", limit)
	page.Truncated = truncated
	page.Messages = strip(page.Messages, false)
	return page, nil
}

func checkLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return DefaultLimit, nil
	case limit < 0 || limit > MaxLimit:
		return 0, fmt.Errorf("poison: %w: limit %d is outside 1..%d", queue.ErrInvalidArgument, limit, MaxLimit)
	}
	return limit, nil
}

// paginate sorts all by key and returns the page of up to limit after c
// (if has), with Next set when more follow.
func paginate(all []Message, c cursor, has bool, limit int) Page {
	slices.SortFunc(all, func(a, b Message) int { return keyOf(a).compare(keyOf(b)) })
	i := 0
	if has {
		from := c.key
		i, _ = slices.BinarySearchFunc(all, from, func(m Message, k key) int { return keyOf(m).compare(k) })
		for i < len(all) && keyOf(all[i]).compare(from) <= 0 {
			i++
		}
	}
	var page Page
	end := min(i+limit, len(all))
	page.Messages = all[i:end]
	if end < len(all) {
		page.Next = cursor{key: keyOf(all[end-1])}.String()
	}
	return page
}

// strip drops the bodies of ms unless bodies is set (a listing carries
// sizes).
func strip(ms []Message, bodies bool) []Message {
	if len(ms) == 0 {
		return nil
	}
	out := slices.Clone(ms)
	if !bodies {
		for i := range out {
			out[i].Body = nil
		}
	}
	return out
}

// Peek returns up to n (1..pq's peek limit, at most 32) visible messages of
// pq without their bodies, most recently poisoned first, with one Peek: no
// message is hidden or counted, so a page that refreshes itself can call
// it as often as it likes. On a queue of more than n messages they are the
// ones the backend shows first (the oldest visible), not the newest; List
// pages through them. A backend that cannot peek returns queue.ErrUnsupported.
func Peek(ctx context.Context, pq *queue.Queue, n int) ([]Message, error) {
	out, err := PeekBodies(ctx, pq, n)
	for i := range out {
		out[i].Body = nil
	}
	return out, err
}

// PeekBodies is Peek with each message's original body: for a preview of
// it (the status page shows a few bytes of each). A compressed body is
// inflated only up to its first MaxPreview bytes, as in ListBodies.
func PeekBodies(ctx context.Context, pq *queue.Queue, n int) ([]Message, error) {
	ms, err := pq.Peek(ctx, n)
	if err != nil {
		return nil, fmt.Errorf("poison: peek %s: %w", pq.Name(), err)
	}
	out := make([]Message, len(ms))
	for i, pm := range ms {
		out[i] = decode(pm, true)
	}
	slices.SortFunc(out, func(a, b Message) int { return keyOf(b).compare(keyOf(a)) })
	return out, nil
}

// readAll reads every visible message of pq (up to MaxScan): with one Peek
// when the queue shows fewer than a full peek, else with a scan.
func readAll(ctx context.Context, pq *queue.Queue) ([]Message, bool, error) {
	if n := pq.Features().MaxPeek; n > 0 {
		ms, err := pq.Peek(ctx, n)
		if err != nil {
			return nil, false, fmt.Errorf("poison: peek %s: %w", pq.Name(), err)
		}
		if len(ms) < n {
			out := make([]Message, len(ms))
			for i, m := range ms {
				out[i] = decode(m, false)
			}
			return out, false, nil
		}
	}
	var out []Message
	truncated, err := scan(ctx, pq, func(pm *queue.Message) (bool, bool) {
		m := decode(pm, false)
		m.Body = nil // a listing drops the bodies: hold none
		out = append(out, m)
		return false, false
	})
	return out, truncated, err
}

// Find returns the message of the poison queue whose poison id, or else
// whose original id, is id, with its body (ErrNotFound if none is
// visible). It only peeks, so that its cost is bounded whatever the
// poison queue holds (the admin endpoint serves it to anyone who may read
// it): where the backend pages its peeks it peeks page by page (up to
// MaxScan messages), hiding nothing; where it only peeks (Azure, Redis) it
// looks at the first MaxPeek, and a message beyond them is ErrNotFound
// (FindScan reads them); where it cannot peek (SQS), queue.ErrUnsupported.
func Find(ctx context.Context, pq *queue.Queue, id string) (Message, error) {
	return find(ctx, pq, id, false)
}

// FindScan is Find that, on a backend that cannot page its peeks, reads
// the poison queue as ListScan does when the message is not among the
// first MaxPeek (or the backend cannot peek): every message is hidden for
// the scan and its dequeue count raised. For an operator's command
// ("adaptq poison show"), never for a request anyone can repeat.
func FindScan(ctx context.Context, pq *queue.Queue, id string) (Message, error) {
	return find(ctx, pq, id, true)
}

func find(ctx context.Context, pq *queue.Queue, id string, scanning bool) (Message, error) {
	if id == "" {
		return Message{}, fmt.Errorf("poison: %w: empty id", queue.ErrInvalidArgument)
	}
	if pq.PeekPages() {
		return findPaged(ctx, pq, id)
	}
	n := pq.Features().MaxPeek
	if n > 0 {
		ms, err := pq.Peek(ctx, n)
		if err != nil {
			return Message{}, fmt.Errorf("poison: peek %s: %w", pq.Name(), err)
		}
		if m, ok := match(ms, id); ok {
			return m, nil
		}
		if len(ms) < n {
			return Message{}, fmt.Errorf("%w: %q in %s", ErrNotFound, id, pq.Name())
		}
	}
	if !scanning {
		if n > 0 {
			return Message{}, fmt.Errorf("%w: %q is not among the first %d messages %s shows to a peek (adaptq poison show reads them all)", ErrNotFound, id, n, pq.Name())
		}
		return Message{}, fmt.Errorf("poison: %w: %s cannot show its messages without receiving them; adaptq poison show reads it that way",
			queue.ErrUnsupported, pq.Name())
	}
	var found *queue.Message
	_, err := scan(ctx, pq, func(pm *queue.Message) (bool, bool) {
		// The first match by original id, unless the poison id matches.
		if pm.ID == id || (found == nil && byOriginalID(pm, id)) {
			found = pm
		}
		return false, found != nil && found.ID == id
	})
	if err != nil {
		return Message{}, err
	}
	if found == nil {
		return Message{}, fmt.Errorf("%w: %q in %s", ErrNotFound, id, pq.Name())
	}
	return Decode(found), nil
}

// byOriginalID reports whether pm is an envelope of the original id id,
// reading its header only: the messages a search passes are not inflated.
func byOriginalID(pm *queue.Message, id string) bool {
	m := decode(pm, false)
	return m.Enveloped && m.ID == id
}

// findPaged is Find with PeekAfter.
func findPaged(ctx context.Context, pq *queue.Queue, id string) (Message, error) {
	var byOriginal *queue.Message
	n, from := pq.Features().MaxPeek, ""
	for seen := 0; seen < MaxScan; {
		ms, err := pq.PeekAfter(ctx, from, n)
		if err != nil {
			return Message{}, fmt.Errorf("poison: peek %s: %w", pq.Name(), err)
		}
		for _, pm := range ms {
			if pm.ID == id {
				return Decode(pm), nil
			}
			if byOriginal == nil && byOriginalID(pm, id) {
				byOriginal = pm
			}
		}
		if seen += len(ms); len(ms) < n {
			break
		}
		from = ms[len(ms)-1].ID
	}
	if byOriginal != nil {
		return Decode(byOriginal), nil
	}
	return Message{}, fmt.Errorf("%w: %q in %s", ErrNotFound, id, pq.Name())
}

// match finds the message whose poison id is id, or else the first whose
// original id is.
func match(ms []*queue.Message, id string) (Message, bool) {
	var byOriginal *queue.Message
	for _, pm := range ms {
		if pm.ID == id {
			return Decode(pm), true
		}
		if byOriginal == nil && byOriginalID(pm, id) {
			byOriginal = pm
		}
	}
	if byOriginal != nil {
		return Decode(byOriginal), true
	}
	return Message{}, false
}

// Selection names the messages Requeue or Purge act on: All, or the
// messages whose poison id or original id is one of IDs.
type Selection struct {
	All bool
	IDs []string
}

func (s Selection) check() error {
	switch {
	case s.All && len(s.IDs) > 0:
		return fmt.Errorf("poison: %w: give ids or all, not both", queue.ErrInvalidArgument)
	case !s.All && len(s.IDs) == 0:
		return fmt.Errorf("poison: %w: no ids given (give ids, or all)", queue.ErrInvalidArgument)
	}
	for _, id := range s.IDs {
		if id == "" {
			return fmt.Errorf("poison: %w: empty id", queue.ErrInvalidArgument)
		}
	}
	return nil
}

// Result is what Requeue or Purge did.
type Result struct {
	// Done are the messages requeued (put to their queue, then deleted
	// from the poison queue) or purged.
	Done []Done `json:"done"`
	// NotFound are the ids asked for that no visible message has.
	NotFound []string `json:"not_found,omitempty"`
	// Failed are messages left in the poison queue (or, for a requeue
	// whose delete failed, put to their queue and still in the poison
	// queue: a duplicate, never a loss).
	Failed []Failure `json:"failed,omitempty"`
	// More is set when MaxScan messages were held, or the scan outlasted
	// ScanVisibility, and more may remain: do it again.
	More bool `json:"more,omitempty"`
}

// Done is one message requeued or purged.
type Done struct {
	PoisonID string `json:"poison_id"`
	ID       string `json:"id,omitempty"`    // the original id, if known
	Queue    string `json:"queue,omitempty"` // requeue: the queue it went back to
	NewID    string `json:"new_id,omitempty"`
	// Duplicate: a second poison copy of a message this requeue already
	// put back (a crash between a poison put and its delete leaves two);
	// it was deleted without a second put.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Failure is one message an operation could not finish.
type Failure struct {
	PoisonID string `json:"poison_id"`
	ID       string `json:"id,omitempty"`
	Error    string `json:"error"`
}

// Dest opens the queue a poisoned message goes back to: name is the
// envelope's queue, "" for a bare message whose queue is unknown (the
// caller's own queue, usually).
type Dest func(name string) (*queue.Queue, error)

// Requeue moves the selected messages back to their queues: for each, it
// puts the original body to the queue dest gives for the envelope's queue
// (with the original's time-to-live, counted afresh; a bare message lives
// queue.DefaultTTL), and only then deletes it from the poison queue, so a
// crash between the two leaves a duplicate, never a loss. The message gets
// a new id and starts at dequeue count 0 there; its body is the original's,
// byte for byte. A message whose body was cut short (Message.Truncated),
// or whose header says it is larger than its queue takes (refused before
// it is inflated),
// stays, listed in Failed. A second poison copy of a
// message already put back by this call (same queue, original id and body) is
// deleted without a second put. A message this call put back and a
// handler poisoned again before the scan ended stays in the poison queue
// (it is not requeued twice). Messages that fail stay in the poison
// queue and are listed in Failed. The error is for the scan itself (a get
// that failed).
func Requeue(ctx context.Context, pq *queue.Queue, dest Dest, sel Selection) (Result, error) {
	if err := sel.check(); err != nil {
		return Result{}, err
	}
	// Queue and original id of each message put back → its body's
	// SHA-256 (a digest, so that a requeue of many holds no bodies).
	put := map[[2]string][sha256.Size]byte{}
	// Queue and id of each message this call put back: a handler that
	// still fails may poison one again before the scan ends, and that new
	// copy is left for the operator rather than requeued round and round.
	newIDs := map[[2]string]bool{}
	return apply(ctx, pq, sel, func(pm *queue.Message, h Message, res *Result) bool {
		if h.Enveloped && newIDs[[2]string{h.Queue, h.ID}] {
			return false
		}
		if h.Truncated {
			res.Failed = append(res.Failed, Failure{PoisonID: h.PoisonID, ID: h.ID, Error: fmt.Sprintf(
				"only the first %d of its %d bytes were kept (it did not fit in the poison queue even compressed): it cannot be requeued; read it and purge it", len(h.Body), h.Size)})
			return false
		}
		// The queue first, and its limit against the size the header
		// says: a body its queue would refuse is not inflated.
		q, err := dest(h.Queue)
		if err != nil {
			res.Failed = append(res.Failed, Failure{PoisonID: h.PoisonID, ID: h.ID, Error: err.Error()})
			return false
		}
		if h.Size > q.MaxBodySize() {
			res.Failed = append(res.Failed, Failure{PoisonID: h.PoisonID, ID: h.ID, Error: fmt.Sprintf(
				"its body of %d bytes is larger than %s takes (%d): it cannot be requeued", h.Size, q.Name(), q.MaxBodySize())})
			return false
		}
		m := Decode(pm) // the selection read the header only
		if h.Enveloped && !m.Enveloped {
			res.Failed = append(res.Failed, Failure{PoisonID: h.PoisonID, ID: h.ID, Error: fmt.Sprintf(
				"its compressed body does not inflate to the %d bytes its envelope says: it cannot be requeued", h.Size)})
			return false
		}
		d := Done{PoisonID: m.PoisonID, ID: m.ID, Queue: m.Queue}
		if sum, ok := put[[2]string{m.Queue, m.ID}]; ok && m.Enveloped && sum == sha256.Sum256(m.Body) {
			d.Duplicate = true
		} else {
			id, err := q.Put(ctx, m.Body, queue.PutOptions{TTL: ttlOf(m), Metadata: m.Metadata})
			if err != nil {
				res.Failed = append(res.Failed, Failure{PoisonID: m.PoisonID, ID: m.ID, Error: fmt.Sprintf("put to %s: %v", q.Name(), err)})
				return false
			}
			d.Queue, d.NewID = q.Name(), id
			newIDs[[2]string{q.Name(), id}] = true
			if m.Enveloped {
				put[[2]string{m.Queue, m.ID}] = sha256.Sum256(m.Body)
			}
		}
		// The body is back in its queue: the delete must happen even if
		// the caller went away meanwhile, or the message would be in both.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		err = pq.Delete(dctx, pm.ID, pm.PopReceipt)
		cancel()
		if err != nil {
			res.Failed = append(res.Failed, Failure{PoisonID: m.PoisonID, ID: m.ID,
				Error: fmt.Sprintf("requeued as %s but not deleted from %s (it is now in both): %v", d.NewID, pq.Name(), err)})
			return false
		}
		res.Done = append(res.Done, d)
		return true
	})
}

// ttlOf is the time-to-live a requeued message gets: its original's.
func ttlOf(m Message) time.Duration {
	switch {
	case !m.Enveloped:
		return 0 // unknown: queue.DefaultTTL
	case m.ExpiresAt.IsZero():
		return queue.NoExpiry
	}
	if ttl := m.ExpiresAt.Sub(m.InsertedAt); ttl > 0 {
		return ttl
	}
	return 0
}

// Purge deletes the selected messages from the poison queue.
func Purge(ctx context.Context, pq *queue.Queue, sel Selection) (Result, error) {
	if err := sel.check(); err != nil {
		return Result{}, err
	}
	return apply(ctx, pq, sel, func(pm *queue.Message, m Message, res *Result) bool {
		if err := pq.Delete(ctx, pm.ID, pm.PopReceipt); err != nil {
			res.Failed = append(res.Failed, Failure{PoisonID: m.PoisonID, ID: m.ID, Error: err.Error()})
			return false
		}
		res.Done = append(res.Done, Done{PoisonID: m.PoisonID, ID: m.ID, Queue: m.Queue})
		return true
	})
}

// apply scans pq and calls act on every selected message, with what its
// header says (a compressed body is not inflated: act decodes what it
// needs); act reports whether the message left the poison queue. A selection by ids ends the
// scan once each id has matched a poison id (unique); an id that matched
// an original id may match further copies, so the scan then goes on.
func apply(ctx context.Context, pq *queue.Queue, sel Selection, act func(*queue.Message, Message, *Result) bool) (Result, error) {
	var res Result
	want := map[string]bool{} // id → matched
	for _, id := range sel.IDs {
		want[id] = false
	}
	found, byOriginal := 0, false
	more, err := scan(ctx, pq, func(pm *queue.Message) (taken, stop bool) {
		m := decode(pm, false)
		if !sel.All {
			k := m.PoisonID
			if _, ok := want[k]; !ok {
				if _, ok := want[m.ID]; !ok || !m.Enveloped {
					return false, false
				}
				k, byOriginal = m.ID, true
			}
			if !want[k] {
				want[k] = true
				found++
			}
		}
		taken = act(pm, m, &res)
		return taken, !sel.All && !byOriginal && found == len(want)
	})
	res.More = more
	for _, id := range sel.IDs {
		if !want[id] {
			res.NotFound = append(res.NotFound, id)
		}
	}
	return res, err
}

// scan gets every visible message of pq once and calls visit for each;
// visit reports whether it took the message out of the queue (deleted it)
// and whether the scan should stop. Messages not taken stay hidden until
// the scan ends, then are handed back with UpdateVisibility 0. It stops,
// with more set, once it has visited MaxScan messages (taken or held), or
// when it outlasted ScanVisibility and its gets return only messages it
// saw.
func scan(ctx context.Context, pq *queue.Queue, visit func(*queue.Message) (taken, stop bool)) (more bool, err error) {
	var held []queue.Receipt
	at := map[string]int{} // id → index in held
	defer func() {
		if rerr := release(ctx, pq, held); rerr != nil && err == nil {
			err = rerr
		}
	}()
	n := pq.Features().MaxBatch
	stale := 0   // gets in a row that returned only messages seen before
	visited := 0 // messages visited, taken or held
	for {
		ms, err := pq.Get(ctx, n, ScanVisibility)
		if err != nil {
			return false, fmt.Errorf("poison: get %s: %w", pq.Name(), err)
		}
		if len(ms) == 0 {
			return false, nil
		}
		fresh := 0
		for k, pm := range ms {
			if i, ok := at[pm.ID]; ok {
				// Seen already: its hiding ran out during a long scan.
				held[i].PopReceipt = pm.PopReceipt
				continue
			}
			fresh++
			visited++
			taken, stop := visit(pm)
			if !taken {
				at[pm.ID] = len(held)
				held = append(held, queue.Receipt{ID: pm.ID, PopReceipt: pm.PopReceipt})
			}
			if full := visited >= MaxScan; stop || full {
				// The rest of this batch is held too, unvisited.
				for _, rest := range ms[k+1:] {
					if i, ok := at[rest.ID]; ok {
						held[i].PopReceipt = rest.PopReceipt
						continue
					}
					at[rest.ID] = len(held)
					held = append(held, queue.Receipt{ID: rest.ID, PopReceipt: rest.PopReceipt})
				}
				return full && !stop, nil
			}
		}
		if fresh == 0 {
			// Only messages seen before came back: their hiding ran out
			// during a long scan. A backend that serves the oldest put
			// first (Azure) serves them before messages not yet seen, so
			// this does not mean everything was seen: go on, and if
			// nothing new comes for a few gets, say that more may remain.
			if stale++; stale >= maxStaleGets {
				return true, nil
			}
			continue
		}
		stale = 0
	}
}

// release hands held messages back at once. A message whose receipt went
// stale (its hiding ran out and someone else got it) is someone else's;
// one that is gone is gone.
func release(ctx context.Context, pq *queue.Queue, held []queue.Receipt) error {
	if len(held) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	var errs []error
	for chunk := range slices.Chunk(held, queue.MaxBatchSize) {
		_, results, err := pq.UpdateVisibilityBatch(ctx, chunk, 0)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range results {
			if r != nil && !errors.Is(r, queue.ErrReceiptMismatch) && !errors.Is(r, queue.ErrNotFound) {
				errs = append(errs, r)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("poison: handing %d messages back to %s (they reappear within %s): %w", len(held), pq.Name(), ScanVisibility, errors.Join(errs...))
	}
	return nil
}

// key orders a listing: when the message was poisoned, then its poison id.
type key struct {
	at time.Time
	id string
}

func keyOf(m Message) key { return key{m.PoisonedAt, m.PoisonID} }

func (k key) compare(o key) int {
	if c := k.at.Compare(o.at); c != 0 {
		return c
	}
	return cmp.Compare(k.id, o.id)
}

// cursor is a listing's "after": the poison id of the last message of a
// page where the backend pages its peeks (List), else the last message's
// key (List on a backend that only peeks, ListScan). Both are base64 of
// text: "p/ID", or "NANOS/ID".
type cursor struct {
	paged bool
	id    string // paged
	key   key    // not paged
}

func (c cursor) String() string {
	s := "p/" + c.id
	if !c.paged {
		s = strconv.FormatInt(c.key.at.UnixNano(), 10) + "/" + c.key.id
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func parseCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, fmt.Errorf("%w: after %q", ErrBadCursor, s)
	}
	head, id, ok := strings.Cut(string(b), "/")
	if ok && head == "p" && id != "" {
		return cursor{paged: true, id: id}, nil
	}
	n, err := strconv.ParseInt(head, 10, 64)
	if !ok || err != nil {
		return cursor{}, fmt.Errorf("%w: after %q", ErrBadCursor, s)
	}
	return cursor{key: key{time.Unix(0, n), id}}, nil
}
