package sim_test

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/adaptq/adaptq/internal/sim"
)

// The Best Practices article's cost example: one thread polling an empty queue every second
// for a day's 22 idle hours.
func ExampleRun() {
	policies, _ := sim.Lookup([]string{sim.PolicyNaive1}, 0)
	rep, err := sim.Run(context.Background(), sim.IdleDay(), policies, sim.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	r := rep.Results[0]
	fmt.Printf("%s: %d calls, %d of them empty gets, $%.2f a month\n", r.Policy, r.Calls, r.IdleCalls, r.MonthlyCost)
	// Output: naive-1: 79200 calls, 79200 of them empty gets, $2.38 a month
}

// adaptq simulate, on a day of one package of 3,200 messages and 21 quiet
// hours.
func ExampleMain() {
	f, err := os.CreateTemp("", "day-*.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.Remove(f.Name())
	f.WriteString("name: one package\nphases:\n  - {duration: 10m}\n  - {duration: 50m, burst: 3200}\n  - {duration: 21h}\n")
	f.Close()
	sim.Main([]string{"--workload", f.Name(), "--policy", "naive-1,seed-adaptive,adaptq"}, os.Stdout, io.Discard)
	// Output:
	// workload: one package: 22h over 1 day(s), 3,200 messages
	// service 20ms per message; handler concurrency: no bound; deletes: one call per message deleted (Azure); $0.01 per 10,000 calls; seed 2011
	//
	//   policy         calls/day  idle/day  gets/day  deletes/day  counts/day  $/month    p50    p99  max backlog  peak tasks  end tasks  left
	//   naive-1           85,536    79,136    82,336        3,200           0     2.57    32s   1m3s        3,200           1          1     0
	//   seed-adaptive      5,617     2,315     2,415        3,200           2     0.17  36.3s  36.3s        3,200         100          1     0
	//   adaptq             4,081       779       879        3,200           2     0.12      0      0        3,200         100          1     0
	//
	//   naive-1        the two-step dequeue post: get 1, process, delete; sleep 1 s when empty; 1 thread
	//   seed-adaptive  the Best Practices article: idle tasks stop down to 1; static rules (10/50/100) on WorkDetected
	//   adaptq         adaptq: push trigger (100 ms floor), 5 min safety poll, SLA 30s pool
}
