package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/adaptq/adaptq"
	_ "github.com/adaptq/adaptq/tracing" // spans for puts and handled messages, once a provider is set
	"github.com/adaptq/adaptq/tracing/otlpenv"
)

type runCmd struct {
	config string
}

func newRunCmd(e env) *cobra.Command {
	o := &runCmd{}
	cmd := &cobra.Command{
		Use:   "run [--config FILE]",
		Short: "Run the worker a config describes",
		Long: `Run the worker a config describes: listen to every configured queue and hand
each message to its handler, until SIGINT or SIGTERM.

The binary has no Go handlers, so each queue's handler must be a program
("exec: CMD ARGS…": the body on standard input, ADAPTQ_MESSAGE_ID and
ADAPTQ_DEQUEUE_COUNT in the environment, exit 0 for done, 65 for a message no
retry can fix) or a URL ("http: https://host/path", POSTed the body). For
handlers written in Go, embed the adaptq package in your own program.

The first signal starts a graceful drain: nothing new is fetched, running
handlers get up to shutdown_grace to finish, and fetched messages not yet
started are handed back. A second signal exits at once with code 130.

Exit codes: 0 after a drain, 1 if the worker failed while running, 2 if the
config or the start-up (a queue that does not open, a handler that is not
registered, an admin address in use) is wrong.

Tracing: with OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp) set,
spans of each handled message go to that OTLP/HTTP endpoint, children of the
producer's span when the message carries its trace context; exec: handlers
get TRACEPARENT, http: handlers a traceparent header. The other standard
OTEL_* variables apply (OTEL_SERVICE_NAME, default adaptq;
OTEL_TRACES_SAMPLER; OTEL_EXPORTER_OTLP_HEADERS …).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, e) },
	}
	cmd.Flags().StringVarP(&o.config, "config", "c", defaultConfig(), "worker config `FILE` (env "+configEnv+")")
	return cmd
}

func (o *runCmd) run(cmd *cobra.Command, e env) error {
	cfg, err := loadConfig(o.config, cmd.Flags().Changed("config"))
	if err != nil {
		return err
	}
	if err := goHandlers(cfg); err != nil {
		return err
	}
	log, err := adaptq.NewLogger(cfg.Log)
	if err != nil {
		return inputError{err}
	}
	defer func() { _ = log.Sync() }()
	traced, stopTracing, err := otlpenv.Setup(cmd.Context())
	if err != nil {
		return inputError{fmt.Errorf("tracing: %w", err)}
	}
	if traced {
		log.Info("adaptq: tracing: spans go to the OTLP endpoint the OTEL_* variables name")
	}
	defer func() {
		// Flush the spans still batched, within a bound of our own: the
		// run's context has ended by now.
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlush)
		defer cancel()
		if err := stopTracing(ctx); err != nil {
			log.Warn("adaptq: tracing: flushing spans at exit failed", zap.Error(err))
		}
	}()
	// exec: handlers' output lines go to the log, each with its message's id.
	w, err := adaptq.New(cfg, adaptq.WithLogger(log))
	if err != nil {
		return inputError{err}
	}

	sigs, stopSignals := e.subscribe()
	defer stopSignals()
	ctx, drain := context.WithCancel(cmd.Context())
	defer drain()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	parent := cmd.Context().Done()
	draining := false
	startDrain := func(why string) {
		draining = true
		log.Info("adaptq: "+why+": draining (nothing new is fetched; running handlers may finish within shutdown_grace); send another signal to exit at once",
			zap.Duration("shutdown_grace", maxGrace(cfg)))
		drain()
	}
	for {
		select {
		case err := <-done:
			if err == nil {
				return nil
			}
			if errors.Is(err, adaptq.ErrStart) {
				return startupError(cfg, err)
			}
			return failure{err}
		case <-parent:
			parent = nil
			if !draining {
				startDrain("stopping")
			}
		case s := <-sigs:
			if draining {
				log.Warn("adaptq: second signal: exiting at once; running handlers are stopped (exec: commands killed) and their messages reappear after their visibility timeout",
					zap.String("signal", signalName(s)))
				w.Abort()
				select {
				case <-done:
				case <-time.After(abortWait):
					log.Warn("adaptq: some handlers did not return in time; exiting without them", zap.Duration("waited", abortWait))
				}
				return errSecondSignal
			}
			startDrain("received " + signalName(s))
		}
	}
}

// tracingFlush bounds the flush of batched spans at exit (the SDK's
// default export timeout, OTEL_BSP_EXPORT_TIMEOUT, is 30 s: too long for a
// worker that was asked to stop).
const tracingFlush = 5 * time.Second

// goHandlers refuses, before anything is opened, a config whose queues
// name Go handlers (or none, which means the Go handler of the queue's
// name): the binary has none.
func goHandlers(cfg adaptq.Config) error {
	var plain []string
	for i, qc := range cfg.Queues {
		if h := qc.Handler; !strings.HasPrefix(h, adaptq.ExecPrefix) && !strings.HasPrefix(h, adaptq.HTTPPrefix) {
			what := "no handler key"
			if h != "" {
				what = fmt.Sprintf("handler %q", h)
			}
			plain = append(plain, fmt.Sprintf("queues[%d].handler: %s", i, what))
		}
	}
	if len(plain) == 0 {
		return nil
	}
	return startupError(cfg, fmt.Errorf("%w: %w: %s", adaptq.ErrStart, adaptq.ErrNoHandler, strings.Join(plain, "; ")))
}

// startupError is a Run error from before the worker started: the
// configuration is at fault. If a queue names a Go handler, which the
// binary cannot have, it says what the binary can run instead.
func startupError(cfg adaptq.Config, err error) error {
	if !errors.Is(err, adaptq.ErrNoHandler) {
		return inputError{err}
	}
	var plain []string
	for i, qc := range cfg.Queues {
		h := qc.Handler
		if !strings.HasPrefix(h, adaptq.ExecPrefix) && !strings.HasPrefix(h, adaptq.HTTPPrefix) {
			plain = append(plain, fmt.Sprintf("queues[%d].handler", i))
		}
	}
	if len(plain) == 0 {
		return inputError{err}
	}
	return inputError{fmt.Errorf(`%w
hint: the adaptq binary registers no Go handlers, so %s must name a program or a URL:
  handler: "exec: ./worker.py"              # the body on stdin; exit 0 done, 65 permanent failure
  handler: "http: http://127.0.0.1:8000/jobs"  # the body POSTed; 2xx done
(for handlers in Go, embed the adaptq package and call Worker.Handle)`, err, strings.Join(plain, ", "))}
}

// maxGrace is the longest shutdown grace of the configured queues.
func maxGrace(cfg adaptq.Config) time.Duration {
	var g time.Duration
	for _, q := range cfg.Queues {
		g = max(g, q.ShutdownGrace)
	}
	return g
}

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}
