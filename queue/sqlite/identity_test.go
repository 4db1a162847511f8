package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/adaptq/adaptq/queue"
	_ "github.com/adaptq/adaptq/queue/sqlite"
)

// SameQueue tells one queue reached by two URLs (and as a sibling) from a
// queue of the same name in another file, and from another queue of the
// same file.
func TestSameQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	open := func(file, name string) *queue.Queue {
		t.Helper()
		q, err := queue.Open(ctx, "sqlite://"+filepath.Join(dir, file)+"?queue="+name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = q.Close() })
		return q
	}
	a, a2 := open("a.db", "pois"), open("a.db", "pois")
	other, b := open("a.db", "jobs"), open("b.db", "pois")
	sib, err := other.Sibling(ctx, "pois")
	if err != nil {
		t.Fatal(err)
	}
	defer sib.Close()
	for _, c := range []struct {
		name string
		x, y *queue.Queue
		want bool
	}{
		{"two URLs of one queue", a, a2, true},
		{"a sibling of the same name in the same file", a, sib, true},
		{"another queue of the file", a, other, false},
		{"a queue of the same name in another file", a, b, false},
	} {
		if got := c.x.SameQueue(c.y); got != c.want {
			t.Errorf("%s: SameQueue = %v, want %v", c.name, got, c.want)
		}
	}
}
