package listener

import (
	"sync"
	"time"
)

// DefaultSafetyInterval is how often the one task left polls while a push
// trigger is configured: a lost trigger delays work by at most this much,
// never loses it, and idle polling costs 12 calls an hour.
const DefaultSafetyInterval = 5 * time.Minute

// Notifier carries "work detected" signals from producers to listeners
// (the Best Practices article's push trigger): a producer that puts messages calls Notify
// with the queue's name, and every listener subscribed to that name wakes
// its sleeping tasks at once instead of waiting out its polling delay.
type Notifier interface {
	// Notify signals that queueName has new messages. It never blocks.
	Notify(queueName string)
	// Subscribe returns a channel that receives after each Notify of
	// queueName (signals that arrive while one is pending merge), and a
	// func that ends the subscription.
	Subscribe(queueName string) (<-chan struct{}, func())
}

// LocalNotifier is a Notifier within one process. The zero value is ready
// to use.
type LocalNotifier struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// Notify signals every subscriber of queueName.
func (n *LocalNotifier) Notify(queueName string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.subs[queueName] {
		select {
		case ch <- struct{}{}:
		default: // one is pending already
		}
	}
}

// Subscribe registers a subscriber of queueName.
func (n *LocalNotifier) Subscribe(queueName string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.subs == nil {
		n.subs = map[string]map[chan struct{}]struct{}{}
	}
	if n.subs[queueName] == nil {
		n.subs[queueName] = map[chan struct{}]struct{}{}
	}
	n.subs[queueName][ch] = struct{}{}
	n.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			n.mu.Lock()
			delete(n.subs[queueName], ch)
			n.mu.Unlock()
		})
	}
}
