package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

type purgeCmd struct {
	target
	yes bool
}

func newPurgeCmd(e env) *cobra.Command {
	o := &purgeCmd{}
	cmd := &cobra.Command{
		Use:   "purge [--queue NAME | --url URL] --yes",
		Short: "Delete every message of a queue",
		Long: `Delete every message of a queue, visible or held by a worker. Without --yes,
purge deletes nothing and says how many messages would go.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, e) },
	}
	o.addFlags(cmd, true)
	cmd.Flags().BoolVar(&o.yes, "yes", false, "really delete every message")
	return cmd
}

func (o *purgeCmd) run(cmd *cobra.Command, e env) (err error) {
	ctx := cmd.Context()
	q, err := o.open(ctx, cmd)
	if err != nil {
		return err
	}
	defer closeQueue(q, &err)
	n, err := q.Count(ctx)
	if err != nil {
		return failuref("count %s: %w", q.Name(), err)
	}
	if !o.yes {
		return inputErrorf("purge %s would delete %s; add --yes to do it", q.Name(), messages(n))
	}
	if err := q.Clear(ctx); err != nil {
		return failuref("purge %s: %w", q.Name(), err)
	}
	fmt.Fprintf(e.stdout, "purged %s: %s deleted\n", q.Name(), messages(n))
	return nil
}

// messages is "1 message" or "12 messages".
func messages(n int) string {
	if n == 1 {
		return "1 message"
	}
	return fmt.Sprintf("%d messages", n)
}
