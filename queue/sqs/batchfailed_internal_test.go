package sqs

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// TestBatchFailedClassifiesEachEntry covers what the emulator never
// answers: a batch call's per-entry failures (a known code, a sender fault,
// a service fault, an id out of range) and entries its answer leaves out.
// Every SQS batch call (send, delete, change visibility) records its
// failures through batchFailed.
func TestBatchFailedClassifiesEachEntry(t *testing.T) {
	q := &Queue{name: "orders"}
	sent := []*string{aws.String("0"), aws.String("1"), aws.String("2"), aws.String("3"), aws.String("4")}
	failed := []types.BatchResultErrorEntry{
		{Id: aws.String("0"), Code: aws.String("ReceiptHandleIsInvalid"), Message: aws.String("bad handle\nmore"), SenderFault: true},
		{Id: aws.String("1"), Code: aws.String("InvalidParameterValue"), Message: aws.String("no"), SenderFault: true},
		{Id: aws.String("2"), Code: aws.String("InternalError"), Message: aws.String("try again")},
		{Id: aws.String("9"), Code: aws.String("InternalError")},
	}
	answered := map[int]bool{4: true}
	results := make([]error, 5)
	var knownFor []int
	q.batchFailed("DeleteMessageBatch", "no result", failed, sent, answered, results, func(i int, e *Error) error {
		knownFor = append(knownFor, i)
		if e.Code == "ReceiptHandleIsInvalid" {
			e.kind = queue.ErrNotFound
			return e
		}
		return nil
	})
	if len(knownFor) != 3 {
		t.Errorf("known asked for entries %v, want 0, 1 and 2 (an id out of range is skipped)", knownFor)
	}
	transient := func(err error) bool { tr, _ := driver.DefaultClassify(err); return tr }
	if !errors.Is(results[0], queue.ErrNotFound) || transient(results[0]) {
		t.Errorf("entry 0 (a known code): %v, want a permanent ErrNotFound", results[0])
	}
	var e *Error
	if !errors.As(results[0], &e) || e.Message != "bad handle" || e.Op != "DeleteMessageBatch" || e.Queue != "orders" {
		t.Errorf("entry 0's error %#v: want op, queue and the message's first line", e)
	}
	if results[1] == nil || transient(results[1]) {
		t.Errorf("entry 1 (a sender fault): %v, want a permanent error", results[1])
	}
	if results[2] == nil || !transient(results[2]) {
		t.Errorf("entry 2 (a service fault): %v, want a transient error", results[2])
	}
	if results[3] == nil || !transient(results[3]) {
		t.Errorf("entry 3 (left out of the answer): %v, want a transient error", results[3])
	}
	if results[4] != nil {
		t.Errorf("entry 4 (answered as a success): %v, want nil", results[4])
	}
	for _, i := range []int{0, 1, 2, 3} {
		if !answered[i] && i != 3 {
			t.Errorf("entry %d not marked answered", i)
		}
	}
}
