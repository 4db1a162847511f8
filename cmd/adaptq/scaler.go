package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/queue"
)

type scalerCmd struct {
	config string
}

// newScalerCmd is `adaptq scaler`: a command of its own, not a mode of
// run, because it is a different program in a different place. It runs no
// handler, so it needs none resolved (a config whose handlers are Go ones
// is fine); it runs as one small replica that is never scaled, beside a
// worker Deployment that KEDA scales to zero; and it never gets, puts or
// deletes a message.
func newScalerCmd(e env) *cobra.Command {
	o := &scalerCmd{}
	cmd := &cobra.Command{
		Use:   "scaler [--config FILE]",
		Short: "Serve the scaling signal of a config's queues, running no handler (scale to zero)",
		Long: `Serve GET /v1/scaling for every queue of a worker config on its admin.address,
without running any handler, so that an autoscaler (KEDA's metrics-api scaler,
configs/keda/scaledobject-zero.yaml) can scale the workers to zero and back.

Per queue it answers 0 instances when the queue holds nothing, visible or in
flight (once the zero has held a minute where the backend's count is
approximate: SQS, Azure, PostgreSQL), and one instance per
instances.messages_per_instance waiting otherwise, within instances.min and
instances.max. It reads each depth when asked, at most once per 10 s on a
billed backend and once a second on a free one, whatever the request rate.

It has the worker's admin endpoint's guards: admin.token (required off
loopback), wrong tokens throttled, cross-site requests refused, connections
bounded (admin.max_connections). It serves the signal and the probes only.

SIGINT or SIGTERM stops it. Exit codes: 0 when stopped, 2 if the config or
the start-up (a queue that does not open, an address in use) is wrong, and
for a queue the scaler would create empty (memory://, or a sqlite:// file that
does not exist): it would answer 0 under any backlog.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, e) },
	}
	cmd.Flags().StringVarP(&o.config, "config", "c", defaultConfig(), "worker config `FILE` (env "+configEnv+")")
	return cmd
}

func (o *scalerCmd) run(cmd *cobra.Command, e env) error {
	cfg, err := loadConfig(o.config, cmd.Flags().Changed("config"))
	if err != nil {
		return err
	}
	// A memory:// queue would be a new, empty one of the scaler's own: it
	// would answer 0 forever, and KEDA would scale the workers to zero
	// under a backlog.
	// Nor may it create the workers' SQLite file: it runs where their
	// volume may not be mounted (its own Deployment), and an empty file of
	// its own would answer 0 as well.
	for i, qc := range cfg.Queues {
		what := fmt.Sprintf("queues[%d].url", i)
		if u, err := url.Parse(qc.URL); err == nil && u.Scheme == memoryScheme {
			return errInProcess(what, qc.URL)
		}
		if f := missingFile(qc.URL); f != "" {
			return inputErrorf("%s %s: no such file %s (nothing was created: the scaler reads the workers' database, and an empty one of its own would answer 0 under any backlog; mount the workers' volume, or start a worker first)", what, queue.Redact(qc.URL), f)
		}
	}
	log, err := adaptq.NewLogger(cfg.Log)
	if err != nil {
		return inputError{err}
	}
	defer func() { _ = log.Sync() }()
	s, err := adaptq.NewScaler(cfg, adaptq.WithLogger(log))
	if err != nil {
		return inputError{err}
	}
	sigs, stopSignals := e.subscribe()
	defer stopSignals()
	ctx, stop := context.WithCancel(cmd.Context())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for {
		select {
		case err := <-done:
			if err == nil {
				return nil
			}
			if errors.Is(err, adaptq.ErrStart) {
				return inputError{err}
			}
			return failure{err}
		case sig := <-sigs:
			log.Info("adaptq: scaler stopping", zap.String("signal", signalName(sig)))
			stop()
		}
	}
}
