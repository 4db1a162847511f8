// Command pgprobe drains a PostgreSQL queue of n 200-byte messages with
// each side in turn, for several rounds (the order reversed every other
// round), printing each drain's rate and the client's and the server's
// CPU per message, then each side's median. Issue 34's probe: adaptq with
// its defaults beside the hand-written SKIP LOCKED loop of PEERS.md.
//
//	cd bench && go run ./cmd/pgprobe -n 50000 -rounds 3 -sides hand,default,bench
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/adaptq/adaptq/bench"
)

func main() {
	n := flag.Int("n", 50000, "messages per drain")
	rounds := flag.Int("rounds", 3, "rounds")
	sides := flag.String("sides", "hand,default,bench", "comma-separated sides: "+strings.Join(bench.PGProbeSides, ", "))
	prof := flag.String("cpuprofile", "", "write a CPU profile of the whole run here")
	memprof := flag.String("memprofile", "", "write an allocation profile (every allocation) of the whole run here")
	flag.Parse()
	if *memprof != "" {
		runtime.MemProfileRate = 1
		defer func() {
			f, err := os.Create(*memprof)
			if err == nil {
				err = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "pgprobe:", err)
			}
		}()
	}
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgprobe:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "pgprobe:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	ctx := context.Background()
	names := strings.Split(*sides, ",")
	res := map[string][]bench.PGProbeResult{}
	for r := 0; r < *rounds; r++ {
		order := append([]string(nil), names...)
		if r%2 == 1 {
			for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
				order[i], order[j] = order[j], order[i]
			}
		}
		for _, side := range order {
			x, err := bench.PGProbe(ctx, side, *n)
			if err != nil {
				fmt.Fprintln(os.Stderr, "pgprobe:", side, err)
				pprof.StopCPUProfile()
				os.Exit(1)
			}
			load, _ := os.ReadFile("/proc/loadavg")
			fmt.Printf("round %d %-9s %8.0f msgs/s  client %6.2f µs (sys %5.2f, %.3f csw)  server %6.2f µs  (load %s) %s\n", r+1, side, x.Rate, us(x.Client), us(x.Sys), x.CtxSwitches, us(x.Server), strings.Join(strings.Fields(string(load))[:3], " "), x.Detail)
			res[side] = append(res[side], x)
		}
	}
	for _, side := range names {
		xs := res[side]
		rates, cl, sv := make([]float64, len(xs)), make([]float64, len(xs)), make([]float64, len(xs))
		for i, x := range xs {
			rates[i], cl[i], sv[i] = x.Rate, us(x.Client), us(x.Server)
		}
		fmt.Printf("median %-9s %8.0f msgs/s  client %6.2f µs  server %6.2f µs\n", side, med(rates), med(cl), med(sv))
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func med(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}
