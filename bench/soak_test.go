package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func TestFitSeries(t *testing.T) {
	var ss []SoakSample
	for i := 0; i <= 360; i++ { // an hour every 10 s
		ss = append(ss, SoakSample{At: time.Duration(i) * 10 * time.Second, RSS: int64(20<<20 + i*20000 + (i%2)*5000)})
	}
	f := fitSeries(ss, 10*time.Minute, time.Hour, func(s SoakSample) float64 { return float64(s.RSS) })
	// 20,000 bytes a sample, 360 samples an hour.
	if want := 7200000.0; math.Abs(f.slope-want) > want*0.01 {
		t.Fatalf("slope %.0f per hour, want %.0f", f.slope, want)
	}
	if f.flat() {
		t.Fatal("a series growing by 6 MB over the window is flat")
	}
	flat := fitSeries(ss, 10*time.Minute, time.Hour, func(s SoakSample) float64 { return float64(20<<20 + (s.At/time.Second%20)*1000) })
	if !flat.flat() {
		t.Fatalf("a series that only scatters is not flat: %+v", flat)
	}
}

func TestSoakReportAndSection(t *testing.T) {
	r := &SoakResult{Config: SoakConfig{Duration: 3 * time.Minute, Warmup: time.Minute}, Start: time.Now(), Put: 10, Handled: 9, Poisoned: 1}
	for i := 0; i <= 20; i++ {
		r.Samples = append(r.Samples, SoakSample{At: time.Duration(i) * 10 * time.Second, RSS: 25 << 20, RSSAnon: 11 << 20, Goroutines: 20})
	}
	var md, svg bytes.Buffer
	if err := r.WriteSoakMarkdown(&md, "latest.svg", "latest.csv"); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteSoakSVG(&svg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| **Lost** | **0** |") || !strings.HasPrefix(svg.String(), "<svg") || strings.Contains(svg.String(), "NaN") {
		t.Fatalf("report:\n%s\nsvg:\n%s", md.String(), svg.String())
	}
	sec := SoakSection(md.String())
	if !strings.HasPrefix(sec, SoakHeading) || !strings.Contains(sec, "](bench/soak/latest.svg)") {
		t.Fatalf("section:\n%s", sec)
	}
	doc := "# adaptq benchmarks\n\n## 1. Something\n\ntext\n"
	once := ReplaceSoakSection(doc, sec)
	if twice := ReplaceSoakSection(once, sec); twice != once || !strings.HasPrefix(once, doc) {
		t.Fatalf("replacing the section again changed the document:\n%s\n---\n%s", once, twice)
	}
}
