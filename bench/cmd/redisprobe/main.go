// Command redisprobe drains a Redis queue of n messages with each side in
// turn, for several rounds (the order reversed every other round),
// printing each drain's rate and Redis's CPU per message over the drain
// (INFO cpu), with INFO commandstats. Issue 34's probe: adaptq beside the
// hand-written Lua zset loop of PEERS.md.
//
//	cd bench && go run ./cmd/redisprobe -n 50000 -rounds 3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/adaptq/adaptq/bench"
)

func main() {
	n := flag.Int("n", 50000, "messages per drain")
	rounds := flag.Int("rounds", 3, "rounds")
	sides := flag.String("sides", "hand,default,tasks4", "comma-separated sides: "+strings.Join(bench.RedisProbeSides, ", "))
	verbose := flag.Bool("v", false, "print INFO commandstats of each drain")
	flag.Parse()
	ctx := context.Background()
	names := strings.Split(*sides, ",")
	res := map[string][][2]float64{}
	for r := 0; r < *rounds; r++ {
		order := append([]string(nil), names...)
		if r%2 == 1 {
			for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
				order[i], order[j] = order[j], order[i]
			}
		}
		for _, side := range order {
			x, err := bench.RedisProbe(ctx, side, *n)
			if err != nil {
				fmt.Fprintln(os.Stderr, "redisprobe:", side, err)
				os.Exit(1)
			}
			load, _ := os.ReadFile("/proc/loadavg")
			fmt.Printf("round %d %-8s %8.0f msgs/s  redis CPU %6.2f µs/msg  (load %s)\n", r+1, side, x.Rate, x.ServerU, strings.Join(strings.Fields(string(load))[:3], " "))
			if *verbose {
				fmt.Println("   ", x.Detail)
			}
			res[side] = append(res[side], [2]float64{x.Rate, x.ServerU})
		}
	}
	for _, side := range names {
		var rates, cpus []float64
		for _, x := range res[side] {
			rates, cpus = append(rates, x[0]), append(cpus, x[1])
		}
		fmt.Printf("median %-8s %8.0f msgs/s  redis CPU %6.2f µs/msg\n", side, med(rates), med(cpus))
	}
}

func med(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}
