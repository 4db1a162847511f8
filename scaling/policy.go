package scaling

import (
	"fmt"
	"math"
)

// Policy answers the Best Practices article's GetOptimalDequeueTaskCount: how many dequeue
// tasks a queue of the given depth needs.
type Policy interface {
	Tasks(depth int) int
}

// PolicyFunc adapts a function to Policy.
type PolicyFunc func(depth int) int

// Tasks calls f.
func (f PolicyFunc) Tasks(depth int) int { return f(depth) }

// Rule is one row of a StaticRules table: below this depth, this many
// tasks.
type Rule struct {
	Below int
	Tasks int
}

// StaticRules maps depth to tasks by a table, first matching row wins; a
// depth at or above every row's Below gets Else.
type StaticRules struct {
	Rules []Rule
	Else  int
}

// SeedRules is the Best Practices article's table: fewer than 100 messages → 10 tasks, fewer
// than 1,000 → 50, otherwise 100.
var SeedRules = StaticRules{Rules: []Rule{{Below: 100, Tasks: 10}, {Below: 1000, Tasks: 50}}, Else: 100}

// Tasks looks depth up in the table.
func (r StaticRules) Tasks(depth int) int {
	for _, row := range r.Rules {
		if depth < row.Below {
			return row.Tasks
		}
	}
	return r.Else
}

// Validate checks that rows are in increasing order of depth and ask for
// at least one task.
func (r StaticRules) Validate() error {
	prev := math.MinInt
	for i, row := range r.Rules {
		if row.Below <= prev {
			return fmt.Errorf("scaling: rules[%d].below %d is not above the row before (%d)", i, row.Below, prev)
		}
		if row.Tasks < 1 {
			return fmt.Errorf("scaling: rules[%d].tasks %d is below 1", i, row.Tasks)
		}
		prev = row.Below
	}
	if r.Else < 1 {
		return fmt.Errorf("scaling: rules else %d is below 1", r.Else)
	}
	return nil
}

// DefaultMessagesPerTask is Proportional's default: one task per full batch
// waiting (the Best Practices article: 32 messages per get).
const DefaultMessagesPerTask = 32

// Proportional asks for one task per PerTask waiting messages, rounded up
// (KEDA's queue-length rule), and at least one.
type Proportional struct {
	PerTask int
}

// Tasks is ceil(depth / PerTask), at least 1.
func (p Proportional) Tasks(depth int) int {
	per := p.PerTask
	if per <= 0 {
		per = DefaultMessagesPerTask
	}
	if depth <= 0 {
		return 1
	}
	n := (depth + per - 1) / per
	if n < 1 {
		n = 1
	}
	return n
}

// Clamp limits n to [min, max]; max ≤ 0 means no upper limit.
func Clamp(n, min, max int) int {
	if max > 0 && n > max {
		n = max
	}
	if n < min {
		n = min
	}
	return n
}
