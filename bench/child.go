package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/sqlite"
)

// ChildEnv is the environment variable that turns this program into a
// child that measures one thing and prints it: how peak memory is measured
// without the harness's own heap.
const ChildEnv = "ADAPTQ_BENCH_CHILD"

// childRequest says what a child runs.
type childRequest struct {
	// Kind: "idle" (nothing), "backlog" (fill only), "plain" (fill, drain
	// with the plain loop), "listener" (fill, drain with the listener).
	Kind  string
	N     int
	Tasks int
	// Path is the SQLite file of "produce" (the steady-rate section's
	// producer in another process: it puts stamped messages at Rate a
	// second for Duration into Queue, and Drained is then how many it
	// put) and of "sqlite-drain", which drains it with Tasks consumers
	// (sqlite.go).
	Path     string        `json:",omitempty"`
	Queue    string        `json:",omitempty"`
	Rate     int           `json:",omitempty"`
	Duration time.Duration `json:",omitempty"`
}

// childResult is what a child prints.
type childResult struct {
	// HWMKiB is the peak resident set (VmHWM, or getrusage's maxrss).
	HWMKiB  int64
	Source  string
	Drained int64
	Err     string
	// sqlite-drain: its first get and last delete (Unix ns), its calls, the
	// calls that took 1 ms or more, the time in Get and in DeleteBatch,
	// and its CPU time.
	Start, End, Calls, SlowCalls, GetNs, DelNs, CPUNs int64 `json:",omitempty"`
}

// RunChildIfAsked runs the child measurement named by ChildEnv, prints its
// result and exits; it returns at once when ChildEnv is not set. Call it
// first in main (and in TestMain).
func RunChildIfAsked() {
	runPGWakeChildIfAsked()
	runRedisChildIfAsked()
	spec := os.Getenv(ChildEnv)
	if spec == "" {
		return
	}
	var req childRequest
	res := childResult{}
	if err := json.Unmarshal([]byte(spec), &req); err != nil {
		res.Err = err.Error()
	} else if err := runChild(req, &res); err != nil {
		res.Err = err.Error()
	}
	res.HWMKiB, res.Source = peakRSS()
	_ = json.NewEncoder(os.Stdout).Encode(res)
	os.Exit(0)
}

func runChild(req childRequest, res *childResult) error {
	ctx := context.Background()
	switch req.Kind {
	case "idle":
		return nil
	case "sqlite-drain":
		return sqliteDrainChild(ctx, req, res)
	}
	if req.Kind == "produce" {
		db, err := sqlite.Open(req.Path)
		if err != nil {
			return err
		}
		defer db.Close()
		q, err := db.Queue(req.Queue)
		if err != nil {
			return err
		}
		res.Drained, err = produce(ctx, q, req.Rate, req.Duration, nil)
		return err
	}
	q, err := memory.NewStore().Queue("rss")
	if err != nil {
		return err
	}
	if err := fill(ctx, q, req.N, smallBody); err != nil {
		return err
	}
	switch req.Kind {
	case "backlog":
		return nil
	case "plain":
		n, err := plainLoop(ctx, q, max(req.Tasks, 1), noop)
		res.Drained = n
		return err
	case "listener":
		tasks := max(req.Tasks, 1)
		_, st, err := drainListener(ctx, q, req.N, noop, listener.Options{Tasks: tasks, Concurrency: tasks * listenerSlotsPerTask}, 10*time.Minute)
		res.Drained = st.Deleted
		return err
	}
	return fmt.Errorf("unknown child kind %q", req.Kind)
}

// peakRSS reads the process's peak resident set in KiB.
func peakRSS() (int64, string) {
	if f, err := os.Open("/proc/self/status"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
				fs := strings.Fields(rest)
				if len(fs) > 0 {
					if kb, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
						return kb, "VmHWM"
					}
				}
			}
		}
	}
	if kb, ok := maxRSS(); ok {
		return kb, "getrusage maxrss"
	}
	return 0, "unavailable"
}

// runChild runs e.Self as a child with req and returns its result.
func (e *Env) runChild(ctx context.Context, req childRequest) (childResult, error) {
	var res childResult
	if len(e.Self) == 0 {
		return res, fmt.Errorf("no command to run a child with")
	}
	spec, _ := json.Marshal(req)
	cmd := exec.CommandContext(ctx, e.Self[0], e.Self[1:]...)
	cmd.Env = append(os.Environ(), ChildEnv+"="+string(spec))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("child %s: %w: %s", req.Kind, err, strings.TrimSpace(errb.String()))
	}
	if err := json.Unmarshal(lastLine(out.Bytes()), &res); err != nil {
		return res, fmt.Errorf("child %s: bad output %q: %w", req.Kind, out.String(), err)
	}
	if res.Err != "" {
		return res, fmt.Errorf("child %s: %s", req.Kind, res.Err)
	}
	return res, nil
}

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}
