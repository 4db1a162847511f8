package scaling_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/scaling"
)

func TestInstancesDesired(t *testing.T) {
	t.Parallel()
	p := scaling.Instances{TargetDrainTime: time.Minute, MessagesPerInstance: 500, Min: 1, Max: 20}
	for _, tc := range []struct {
		name      string
		p         scaling.Instances
		depth     int
		rate      float64
		want      int
		wantBasis scaling.Basis
	}{
		{"empty queue: min", p, 0, 10, 1, scaling.BasisEmpty},
		{"empty queue, min 0", scaling.Instances{MessagesPerInstance: 1}, 0, 0, 0, scaling.BasisEmpty},
		// 10 msgs/s for 60 s: 600 per instance.
		{"rate: exactly one instance's minute", p, 600, 10, 1, scaling.BasisDrainRate},
		{"rate: one message more", p, 601, 10, 2, scaling.BasisDrainRate},
		{"rate: 5,000 messages", p, 5000, 10, 9, scaling.BasisDrainRate},
		{"rate: clamped to max", p, 1_000_000, 10, 20, scaling.BasisDrainRate},
		{"rate, no max", scaling.Instances{MessagesPerInstance: 1, Max: 0}, 1_000_000, 10, 1667, scaling.BasisDrainRate},
		{"rate, default drain time", scaling.Instances{MessagesPerInstance: 1}, 1200, 10, 2, scaling.BasisDrainRate},
		{"no rate: per instance", p, 1200, 0, 3, scaling.BasisMessagesPerInstance},
		{"no rate: one message", p, 1, 0, 1, scaling.BasisMessagesPerInstance},
		{"slow drain time", scaling.Instances{TargetDrainTime: 10 * time.Minute, MessagesPerInstance: 1, Min: 2}, 100, 0.1, 2, scaling.BasisDrainRate},
	} {
		got, basis := tc.p.Desired(tc.depth, tc.rate)
		if got != tc.want || basis != tc.wantBasis {
			t.Errorf("%s: Desired(%d, %v) = %d (%s), want %d (%s)", tc.name, tc.depth, tc.rate, got, basis, tc.want, tc.wantBasis)
		}
	}
}

func TestInstancesValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    scaling.Instances
		want string
	}{
		{scaling.Instances{TargetDrainTime: -time.Second, MessagesPerInstance: 1}, "target_drain_time -1s is negative"},
		{scaling.Instances{}, "messages_per_instance 0 is below 1"},
		{scaling.Instances{MessagesPerInstance: 1, Min: -1}, "min -1 is negative"},
		{scaling.Instances{MessagesPerInstance: 1, Max: -2}, "max -2 is negative"},
		{scaling.Instances{MessagesPerInstance: 1, Min: 5, Max: 2}, "max 2 is below min 5"},
	} {
		err := tc.p.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.p, err, tc.want)
		}
	}
	if err := (scaling.Instances{MessagesPerInstance: 1, Min: 0, Max: 0}).Validate(); err != nil {
		t.Errorf("min 0, no max: %v", err)
	}
}

// A worker instance that deleted 10 messages a second over the last minute
// sees 5,000 waiting: to drain them within a minute takes 9 instances.
// Before any rate is measured, 500 messages an instance asks for 10.
func ExampleInstances_Desired() {
	p := scaling.Instances{TargetDrainTime: time.Minute, MessagesPerInstance: 500, Min: 1, Max: 20}
	fmt.Println(p.Desired(5000, 10))
	fmt.Println(p.Desired(5000, 0))
	fmt.Println(p.Desired(0, 10))
	// Output:
	// 9 drain_rate
	// 10 messages_per_instance
	// 1 empty
}
