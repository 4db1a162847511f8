// Command adaptq runs adaptq workers and works on their queues from the
// shell:
//
//	adaptq run     --config configs/adaptq.yaml          # the worker: exec: and http: handlers
//	adaptq enqueue --queue orders 'hello'                # put a message (or --file F, or - for stdin)
//	adaptq peek    --queue orders -n 5                   # look without taking
//	adaptq stats                                         # depths, and the running worker's counters and costs
//	adaptq purge   --queue orders --yes                  # delete every message
//	adaptq poison  list|show|requeue|purge --queue orders # the poison messages: why they failed, put them back
//	adaptq version
//
// Every command that works on queues reads the worker's config (--config,
// default configs/adaptq.yaml or $ADAPTQ_CONFIG) and picks a queue by
// --queue NAME; enqueue, peek, purge and stats also take --url URL for a
// queue no config names.
//
// Exit codes: 0 success, 1 a runtime failure, 2 bad usage, input or
// configuration. Errors go to standard error, prefixed "adaptq:".
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	// The binary opens every scheme: it imports every driver.
	_ "github.com/adaptq/adaptq/queue/all"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // something failed at run time
	exitUsage   = 2 // bad flags, input or configuration
	// exitSignal is the code of a worker stopped by a second signal, as a
	// shell reports a process killed by SIGINT (128 + 2).
	exitSignal = 130
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the whole program, callable in-process: it parses args, runs the
// command and returns the exit code. The worker's signals are the
// process's SIGINT and SIGTERM.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runContext(context.Background(), env{
		stdin:    stdin,
		stdout:   stdout,
		stderr:   stderr,
		terminal: isTerminal(stdout),
		signals:  processSignals,
	}, args)
}

// env is what a command reads and writes besides its flags. Tests build
// their own: buffers for the streams, a channel for the signals.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// terminal: stdout is a terminal (progress lines are shown).
	terminal bool
	// signals subscribes to the signals that stop a worker; stop
	// unsubscribes. Nil: no signals.
	signals func() (c <-chan os.Signal, stop func())
}

func (e env) subscribe() (<-chan os.Signal, func()) {
	if e.signals == nil {
		return nil, func() {}
	}
	return e.signals()
}

// processSignals delivers the process's SIGINT and SIGTERM.
func processSignals() (<-chan os.Signal, func()) {
	c := make(chan os.Signal, 2)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	return c, func() { signal.Stop(c) }
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// runContext runs the command args name. Cancelling ctx stops a worker as
// a first signal does.
func runContext(ctx context.Context, e env, args []string) int {
	root := newRootCmd(e)
	root.SetArgs(args)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if !c.HasParent() {
			if uerr := unknownCommand(c, args); uerr != nil {
				return uerr
			}
		}
		return usageError{err}
	})
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var silent exitWith
	if errors.As(err, &silent) {
		return silent.code
	}
	code := exitCode(err)
	if code == exitSignal {
		return code
	}
	// The library's errors start with the package's name, which is the
	// program's: say it once.
	fmt.Fprintf(e.stderr, "adaptq: %s\n", strings.TrimPrefix(err.Error(), "adaptq: "))
	if code == exitUsage && cmd != nil && isUsage(err) {
		fmt.Fprintf(e.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

func newRootCmd(e env) *cobra.Command {
	root := &cobra.Command{
		Use:   "adaptq",
		Short: "Run adaptq workers and work on their queues",
		Long: `adaptq runs queue workers whose handlers are programs (exec:) or URLs (http:),
and puts, peeks at, counts and purges messages of the queues they drain.

Exit codes: 0 success, 1 runtime failure, 2 bad usage, input or configuration.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return usageErrorf("no command given (commands: %s)", commandNames(c))
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		newRunCmd(e),
		newScalerCmd(e),
		newEnqueueCmd(e),
		newPeekCmd(e),
		newStatsCmd(e),
		newPurgeCmd(e),
		newSimulateCmd(e),
		newVersionCmd(e),
		newMigrateCmd(e),
		newPoisonCmd(e),
	)
	return root
}

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			hint := ""
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				hint = fmt.Sprintf("; did you mean %q?", s[0])
			}
			return usageErrorf("unknown command %q%s (commands: %s)", args[0], hint, commandNames(cmd))
		}
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args[0])
	}
	return nil
}

// commandNames lists cmd's subcommands, as help does.
func commandNames(cmd *cobra.Command) string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return strings.Join(names, ", ")
}

// unknownCommand is noArgs's error for a command line whose first word is
// no command, else nil. Cobra parses the flags of such a line as the root
// command's, so that "enque --queue x" failed on --queue, not on enque.
func unknownCommand(root *cobra.Command, args []string) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		if strings.HasPrefix(a, "-") {
			continue // the root command's flags take no value
		}
		if c, _, err := root.Find([]string{a}); err == nil && c != root {
			return nil
		}
		if a == "help" {
			return nil
		}
		return noArgs(root, []string{a})
	}
	return nil
}

// usageError is bad usage, input or configuration: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// inputError is input or configuration that cannot be used (an unknown
// queue, an oversized body, a config with a bad field): exit code 2, like
// a usageError, but without the pointer to --help, since the message says
// what is wrong with the input.
type inputError struct{ err error }

func (e inputError) Error() string { return e.err.Error() }
func (e inputError) Unwrap() error { return e.err }

func inputErrorf(format string, args ...any) error {
	return inputError{fmt.Errorf(format, args...)}
}

// failure is an error at run time: exit code 1.
type failure struct{ err error }

func (e failure) Error() string { return e.err.Error() }
func (e failure) Unwrap() error { return e.err }

func failuref(format string, args ...any) error { return failure{fmt.Errorf(format, args...)} }

// errSecondSignal ends a worker that was told twice to stop.
var errSecondSignal = errors.New("second signal: exiting without waiting for the drain")

func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u)
}

// exitCode maps an error to the process's exit code. Errors that no
// command marked come from parsing the command line: bad usage.
func exitCode(err error) int {
	var f failure
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errSecondSignal):
		return exitSignal
	case errors.As(err, &f):
		return exitFailure
	}
	return exitUsage
}
