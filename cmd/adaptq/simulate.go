package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/adaptq/adaptq/internal/sim"
)

// exitWith ends the command with a code whose message was printed already.
type exitWith struct{ code int }

func (e exitWith) Error() string { return fmt.Sprintf("exit %d", e.code) }

func newSimulateCmd(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "simulate [flags]",
		Short: "Price polling policies over a simulated day (the Best Practices article's scenario)",
		Long: `Simulate runs the two-step dequeue post's naive loop, the Best Practices article's listeners and adaptq's against the
memory driver in virtual time, so a simulated day takes seconds, and prints for
each policy its calls, idle calls, cost per month, p50/p99 pickup latency and
largest backlog. Run "adaptq simulate --help" for the simulator's own flags.`,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			if code := sim.Main(args, e.stdout, e.stderr); code != 0 {
				return exitWith{code}
			}
			return nil
		},
	}
}
