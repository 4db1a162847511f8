package sim

import (
	"math"
	"strings"
	"testing"
	"time"
)

// A NaN rate limit is refused, naming the field: every comparison with
// NaN is false, so the "is negative" check let it through.
func TestPolicyRefusesANaNRateLimit(t *testing.T) {
	t.Parallel()
	p := AdaptqRate("nan-rate", time.Minute, math.NaN()).withDefaults()
	err := p.validate()
	if err == nil || !strings.Contains(err.Error(), `policy "nan-rate": rate_limit: NaN`) {
		t.Fatalf("validate: %v, want rate_limit: NaN refused", err)
	}
	if err := AdaptqRate("ok-rate", time.Minute, 10).withDefaults().validate(); err != nil {
		t.Fatalf("validate of rate 10: %v", err)
	}
}
