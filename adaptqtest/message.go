package adaptqtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue/poison"
)

// State is where a message is.
type State int

// The states of a message.
const (
	// Unknown: the kit saw no message of that id put.
	Unknown State = iota
	// Visible: in its queue, waiting for a get.
	Visible
	// Hidden: in its queue, hidden until Message.VisibleAt (its visibility
	// timeout or retry delay runs).
	Hidden
	// Deleted: deleted from its queue, after its handler succeeded.
	Deleted
	// Poisoned: moved to its poison queue.
	Poisoned
	// Expired: gone without a delete: its time-to-live ended.
	Expired
)

var stateNames = [...]string{"unknown", "visible", "hidden", "deleted", "poisoned", "expired"}

func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("State(%d)", int(s))
	}
	return stateNames[s]
}

// Message is what happened to one message put to a queue of the kit.
type Message struct {
	ID    string
	Queue string
	Body  []byte
	State State
	// Runs are the handler's runs on the message, in order: len(Runs) is
	// how many times it was handled.
	Runs []Run
	// DequeueCount is the newest: the queue's, the poison envelope's, or
	// the last run's.
	DequeueCount int
	// VisibleAt is when a Hidden message shows again.
	VisibleAt time.Time
	// Rule and Reason say why a Poisoned message was poisoned: the rule
	// and its last failure, as its poison envelope has them.
	Rule   poison.Rule
	Reason string
}

// LastErr is the error of the message's last run (nil if it succeeded or
// never ran).
func (m Message) LastErr() error {
	if len(m.Runs) == 0 {
		return nil
	}
	return m.Runs[len(m.Runs)-1].Err
}

// String says what happened to the message, for a test's failure:
//
//	message 1 of queue "orders": poisoned (max_dequeue_count) after 5 runs, dequeue count 5, last error: boom
func (m Message) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "message %s of queue %q: %s", m.ID, m.Queue, m.State)
	switch m.State {
	case Poisoned:
		fmt.Fprintf(&b, " (%s)", m.Rule)
	case Hidden:
		fmt.Fprintf(&b, " until %s", m.VisibleAt.Format(time.RFC3339Nano))
	}
	fmt.Fprintf(&b, " after %d runs, dequeue count %d", len(m.Runs), m.DequeueCount)
	if err := m.LastErr(); err != nil {
		fmt.Fprintf(&b, ", last error: %v", err)
	} else if m.Reason != "" {
		fmt.Fprintf(&b, ", reason: %s", m.Reason)
	}
	return b.String()
}

// Message reports what has happened to the message id so far.
func (k *Kit) Message(id string) Message {
	r := k.rec
	r.mu.Lock()
	m := Message{ID: id, Queue: r.queueOf[id], Body: r.bodies[id], Runs: append([]Run(nil), r.runs[id]...)}
	pm, poisoned := r.poisoned[id]
	deleted := r.gone[id]
	r.mu.Unlock()
	if len(m.Runs) > 0 {
		m.DequeueCount = m.Runs[len(m.Runs)-1].DequeueCount
	}
	switch {
	case poisoned:
		m.State, m.Rule, m.Reason, m.DequeueCount = Poisoned, pm.Rule, pm.Reason, pm.DequeueCount
		if m.Queue == "" {
			m.Queue, m.Body = pm.Queue, pm.Body
		}
		return m
	case deleted:
		m.State = Deleted
		return m
	case m.Queue == "":
		return m // Unknown
	}
	for _, sm := range k.store.Inspect(m.Queue) {
		if sm.ID != id {
			continue
		}
		m.DequeueCount = sm.DequeueCount
		m.State = Visible
		if sm.NextVisibleAt.After(k.clock.Now()) {
			m.State, m.VisibleAt = Hidden, sm.NextVisibleAt
		}
		return m
	}
	m.State = Expired
	return m
}

// RequireHandled reports, with t.Errorf, unless the message id was
// deleted after a run of its handler that succeeded, and returns whether
// it was. The report shows the message's id, state, runs, dequeue count
// and last error.
func (k *Kit) RequireHandled(t testing.TB, id string) bool {
	t.Helper()
	m := k.Message(id)
	if m.State == Deleted && len(m.Runs) > 0 && m.LastErr() == nil {
		return true
	}
	t.Errorf("adaptqtest: want message %s handled and deleted; %v", id, m)
	return false
}

// RequirePoisoned reports, with t.Errorf, unless the message id was moved
// to its poison queue by rule (any rule if rule is ""), and returns
// whether it was. The report shows the message's id, state, runs, dequeue
// count and last error.
func (k *Kit) RequirePoisoned(t testing.TB, id string, rule poison.Rule) bool {
	t.Helper()
	m := k.Message(id)
	if m.State == Poisoned && (rule == "" || m.Rule == rule) {
		return true
	}
	want := "poisoned"
	if rule != "" {
		want += fmt.Sprintf(" (%s)", rule)
	}
	t.Errorf("adaptqtest: want message %s %s; %v", id, want, m)
	return false
}
