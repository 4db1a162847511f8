package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The billing scenario (the Best Practices article's billing system), by its numbers.
const (
	// SeedWorkday is the standard eight-hour workday in which the
	// transactions arrive.
	SeedWorkday = 8 * time.Hour
	// SeedNight is the rest of the day: "the solution does not receive
	// data at all for 16 hours every day during non-working hours".
	SeedNight = 16 * time.Hour
	// SeedBusyShare is the part of the workday the solution is busy: "only
	// 25% of the time of the standard eight-hour workday".
	SeedBusyShare = 0.25
	// SeedBurstsPerDay is how many packages arrive in a workday: one in
	// each of its 8 hours. The article says only that the daily volume "can
	// reach several million transactions"; 8 packages of the sizes below
	// average about 345,000 a day and reach a million on a heavy day.
	SeedBurstsPerDay = 8
	// SeedBurstMin and SeedBurstMax bound a package's size: "the volume of
	// transactions transferred varies from several thousand to hundreds of
	// thousands within one package". Sizes are log-uniform between them.
	SeedBurstMin = 2_000
	SeedBurstMax = 200_000
)

// SeedBurstWindow is how long the initiator takes to put one package: the
// workday's busy share spread over its packages (8 h × 25% / 8 = 15 min),
// so the queue receives work for 2 of the 8 hours, as the article assumes.
const SeedBurstWindow = time.Duration(float64(SeedWorkday) * SeedBusyShare / SeedBurstsPerDay)

// Phase is one stretch of a workload's day: Burst messages put at once at
// its start, and Rate messages a second through it (Rate × Duration of
// them, rounded, evenly spaced from its start). A phase with neither is a
// quiet stretch.
type Phase struct {
	Duration time.Duration
	// Rate is in messages per second.
	Rate float64
	// Burst messages are put at the phase's start.
	Burst int
}

// Messages is the number of messages the phase puts.
func (p Phase) Messages() int64 {
	return int64(p.Burst) + p.steady()
}

// steady is the number of messages the phase's rate puts.
func (p Phase) steady() int64 {
	if p.Rate <= 0 {
		return 0
	}
	return int64(math.Round(p.Duration.Seconds() * p.Rate))
}

// Workload is a sequence of phases covering Days simulated days. The
// report prices a month as the calls of one day times 30, so Days need not
// be 24 hours each: the Best Practices article's idle-cost figure is 22 idle hours a day.
type Workload struct {
	// Name says where the workload came from (a file, "seed").
	Name   string
	Phases []Phase
	// Days is how many days the phases cover (at least 1).
	Days int
}

// Length is the workload's total duration.
func (w Workload) Length() time.Duration {
	var d time.Duration
	for _, p := range w.Phases {
		d += p.Duration
	}
	return d
}

// Messages is the number of messages the workload puts.
func (w Workload) Messages() int64 {
	var n int64
	for _, p := range w.Phases {
		n += p.Messages()
	}
	return n
}

// Repeat returns w's phases n times over, as n times w.Days days.
func (w Workload) Repeat(n int) Workload {
	if n <= 1 {
		return w
	}
	out := Workload{Name: w.Name, Days: max(w.Days, 1) * n}
	for range n {
		out.Phases = append(out.Phases, w.Phases...)
	}
	return out
}

// Validate names the first bad phase, its field and its value.
func (w Workload) Validate() error {
	if len(w.Phases) == 0 {
		return errors.New("sim: workload: phases: none given")
	}
	if w.Days < 1 {
		return fmt.Errorf("sim: workload: days: %d is below 1", w.Days)
	}
	for i, p := range w.Phases {
		switch {
		case p.Duration <= 0:
			return fmt.Errorf("sim: workload: phases[%d].duration: %s is not positive", i, p.Duration)
		case p.Rate < 0 || math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0):
			return fmt.Errorf("sim: workload: phases[%d].rate: %v is not a rate", i, p.Rate)
		case p.Burst < 0:
			return fmt.Errorf("sim: workload: phases[%d].burst: %d is negative", i, p.Burst)
		case p.Rate > MaxRate:
			return fmt.Errorf("sim: workload: phases[%d].rate: %v/s is above the most the simulator takes, %d/s", i, p.Rate, MaxRate)
		}
	}
	return nil
}

// MaxRate is the highest steady arrival rate a phase may have: one message
// a microsecond, far past any single queue (Azure's target in the Best Practices article is
// 500 transactions a second).
const MaxRate = 1_000_000

// SeedScenario is the Best Practices article's scenario for days days, drawn from seed: each
// day an eight-hour workday in each hour of which one package of
// log-uniform size in [SeedBurstMin, SeedBurstMax] arrives, put at a
// steady rate over SeedBurstWindow starting at a random minute of the
// hour, so the queue receives work 25% of the workday; then 16 hours with
// no traffic.
func SeedScenario(seed int64, days int) Workload {
	return SeedScenarioWindow(seed, days, SeedBurstWindow)
}

// SeedScenarioWindow is SeedScenario with each package put over window
// instead; 0 puts each package at once, the hardest case for a pool.
func SeedScenarioWindow(seed int64, days int, window time.Duration) Workload {
	days = max(days, 1)
	window = min(max(window, 0), SeedWorkday/SeedBurstsPerDay)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed002))
	name := fmt.Sprintf("the Best Practices article's scenario (seed %d)", seed)
	switch {
	case window == 0:
		name = fmt.Sprintf("the Best Practices article's scenario (seed %d, packages at once)", seed)
	case window != SeedBurstWindow:
		name = fmt.Sprintf("the Best Practices article's scenario (seed %d, packages over %s)", seed, fmtDuration(window))
	}
	w := Workload{Name: name, Days: days}
	hour := SeedWorkday / SeedBurstsPerDay
	for range days {
		for range SeedBurstsPerDay {
			// Start on a whole minute, so that the phases print cleanly.
			slack := int64((hour - max(window, time.Minute)) / time.Minute)
			off := time.Duration(rng.Int64N(slack+1)) * time.Minute
			size := int(math.Round(SeedBurstMin * math.Pow(SeedBurstMax/SeedBurstMin, rng.Float64())))
			if off > 0 {
				w.Phases = append(w.Phases, Phase{Duration: off})
			}
			if window > 0 {
				w.Phases = append(w.Phases, Phase{Duration: window, Rate: float64(size) / window.Seconds()})
				if rest := hour - off - window; rest > 0 {
					w.Phases = append(w.Phases, Phase{Duration: rest})
				}
			} else {
				w.Phases = append(w.Phases, Phase{Duration: hour - off, Burst: size})
			}
		}
		w.Phases = append(w.Phases, Phase{Duration: SeedNight})
	}
	return w
}

// IdleDay is the workload of the Best Practices article's cost example: a day's 22 idle
// hours with no traffic at all, during which a poller's every call is
// wasted. (The other two hours are busy and cost what the work costs.)
func IdleDay() Workload {
	return Workload{Name: "22 idle hours", Days: 1, Phases: []Phase{{Duration: 22 * time.Hour}}}
}

// The YAML form of a workload:
//
//	name: month end          # optional
//	phases:
//	  - duration: 2h         # a Go duration string
//	    rate: 50/s           # N/s, N/m or N/h; 0 needs no unit
//	  - duration: 1h
//	    burst: 100000        # put at once at the phase's start
//	  - duration: 16h
//	    rate: 0
type yamlWorkload struct {
	Name   string      `yaml:"name"`
	Phases []yamlPhase `yaml:"phases"`
}

type yamlPhase struct {
	Duration yaml.Node `yaml:"duration"`
	Rate     yaml.Node `yaml:"rate"`
	Burst    yaml.Node `yaml:"burst"`
}

// LoadWorkload reads a workload file (see ParseWorkload).
func LoadWorkload(path string) (Workload, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Workload{}, fmt.Errorf("sim: workload: %w", err)
	}
	w, err := ParseWorkload(b)
	if err != nil {
		return Workload{}, fmt.Errorf("%w (in %s)", err, path)
	}
	if w.Name == "" {
		w.Name = path
	}
	return w, nil
}

// ParseWorkload reads one day of arrivals from YAML:
//
//	phases:
//	  - {duration: 2h, rate: 50/s}
//	  - {duration: 1h, burst: 100000}
//	  - {duration: 16h, rate: 0}
//
// Every phase needs a duration, a Go duration string ("90s", "2h"); a
// bare number is an error, not seconds. rate is messages per second,
// minute or hour ("50/s", "3000/m", "0"); burst is a number of messages
// put at once at the phase's start. Unknown keys are errors that name the
// key.
func ParseWorkload(b []byte) (Workload, error) {
	var y yamlWorkload
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&y); err != nil {
		if errors.Is(err, io.EOF) {
			return Workload{}, errors.New("sim: workload: the file is empty")
		}
		return Workload{}, fmt.Errorf("sim: workload: %s", yamlError(err))
	}
	w := Workload{Name: y.Name, Days: 1}
	for i, yp := range y.Phases {
		field := func(name string) string { return fmt.Sprintf("phases[%d].%s", i, name) }
		var p Phase
		if yp.Duration.Kind == 0 {
			return Workload{}, fmt.Errorf("sim: workload: %s: missing", field("duration"))
		}
		if yp.Duration.Kind != yaml.ScalarNode || yp.Duration.Tag != "!!str" {
			return Workload{}, fmt.Errorf("sim: workload: %s: %s is not a Go duration string (e.g. 90s, 2h)", field("duration"), nodeValue(&yp.Duration))
		}
		d, err := time.ParseDuration(yp.Duration.Value)
		if err != nil {
			return Workload{}, fmt.Errorf("sim: workload: %s: %q is not a Go duration (e.g. 90s, 2h)", field("duration"), yp.Duration.Value)
		}
		p.Duration = d
		if yp.Rate.Kind != 0 {
			r, err := parseRate(&yp.Rate)
			if err != nil {
				return Workload{}, fmt.Errorf("sim: workload: %s: %w", field("rate"), err)
			}
			p.Rate = r
		}
		if yp.Burst.Kind != 0 {
			n, err := strconv.Atoi(yp.Burst.Value)
			if err != nil || yp.Burst.Kind != yaml.ScalarNode || yp.Burst.Tag != "!!int" {
				return Workload{}, fmt.Errorf("sim: workload: %s: %s is not a whole number of messages", field("burst"), nodeValue(&yp.Burst))
			}
			p.Burst = n
		}
		w.Phases = append(w.Phases, p)
	}
	if err := w.Validate(); err != nil {
		return Workload{}, err
	}
	return w, nil
}

// nodeValue describes a YAML value for an error message: a scalar as
// written, quoted if it is a string, else its kind.
func nodeValue(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!str" {
			return strconv.Quote(n.Value)
		}
		return n.Value
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a map"
	}
	return "a " + n.ShortTag()
}

// yamlError makes the decoder's errors one line each, naming an unknown
// key as such ("line 3: unknown key \"burts\"").
func yamlError(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		if line, rest, ok := strings.Cut(m, ": field "); ok {
			if key, _, ok := strings.Cut(rest, " not found in type"); ok {
				m = fmt.Sprintf("%s: unknown key %q", line, key)
			}
		}
		msgs[i] = m
	}
	return strings.Join(msgs, "; ")
}

// parseRate reads "50/s", "3000/m", "3000/min", "1e5/h", or a bare 0.
func parseRate(n *yaml.Node) (float64, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, fmt.Errorf("%s is not a rate (e.g. 50/s)", nodeValue(n))
	}
	v := strings.TrimSpace(n.Value)
	num, unit, ok := strings.Cut(v, "/")
	if !ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f == 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("%q has no unit: write N/s, N/m or N/h (e.g. 50/s)", v)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%q: %q is not a number of messages", v, num)
	}
	switch strings.TrimSpace(unit) {
	case "s", "sec":
		return f, nil
	case "m", "min":
		return f / 60, nil
	case "h":
		return f / 3600, nil
	}
	return 0, fmt.Errorf("%q: unit %q is not s, m or h", v, unit)
}

// Format writes w in the YAML form ParseWorkload reads, so that a
// generated scenario can be saved and edited.
func (w Workload) Format(out io.Writer) error {
	var b strings.Builder
	if w.Name != "" {
		fmt.Fprintf(&b, "name: %q\n", w.Name)
	}
	b.WriteString("phases:\n")
	for _, p := range w.Phases {
		fmt.Fprintf(&b, "  - {duration: %s", fmtDuration(p.Duration))
		if p.Rate > 0 {
			fmt.Fprintf(&b, ", rate: %s/s", strconv.FormatFloat(p.Rate, 'g', -1, 64))
		}
		if p.Burst > 0 {
			fmt.Fprintf(&b, ", burst: %d", p.Burst)
		}
		b.WriteString("}\n")
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// fmtDuration drops time.Duration's trailing zero units: 1h0m0s → 1h.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
