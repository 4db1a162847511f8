package main

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
)

type migrateCmd struct {
	config string
	urls   []string
	check  bool
}

func newMigrateCmd(e env) *cobra.Command {
	o := &migrateCmd{}
	cmd := &cobra.Command{
		Use:   "migrate [--config FILE | --url URL…] [--check]",
		Short: "Bring the database schema of the PostgreSQL queues up to date",
		Long: `Apply the pending schema migrations of every postgres:// queue the config names
(or of each --url), each schema once. Workers apply them by themselves when they
open a queue; teams that migrate as a separate deployment step run this and give
their workers URLs with migrate=false. Running it again is a no-op.

With --check nothing changes: it prints each schema's version and exits 1 if
any needs migrations.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, e) },
	}
	cmd.Flags().StringVarP(&o.config, "config", "c", defaultConfig(), "worker config `FILE` (env "+configEnv+")")
	cmd.Flags().StringArrayVar(&o.urls, "url", nil, "a postgres:// `URL` (repeatable; e.g. postgres://app@db:5432/app?schema=jobs)")
	cmd.Flags().BoolVar(&o.check, "check", false, "report versions, change nothing; exit 1 if migrations are pending")
	return cmd
}

func (o *migrateCmd) run(cmd *cobra.Command, e env) error {
	ctx := cmd.Context()
	urls := o.urls
	if cmd.Flags().Changed("url") && cmd.Flags().Changed("config") {
		return usageErrorf("give --url, or --config, not both")
	}
	if len(urls) == 0 {
		cfg, err := loadConfig(o.config, cmd.Flags().Changed("config"))
		if err != nil {
			return err
		}
		for _, qc := range cfg.Queues {
			if strings.HasPrefix(qc.URL, postgres.Scheme+":") || strings.HasPrefix(qc.URL, postgres.SchemeAlt+":") {
				urls = append(urls, qc.URL)
			}
		}
		if len(urls) == 0 {
			return inputErrorf("%s names no postgres:// queue: nothing to migrate", o.config)
		}
	}
	seen := map[string]bool{}
	pending := false
	for _, raw := range urls {
		k := databaseKey(raw)
		if seen[k] {
			continue
		}
		seen[k] = true
		schema, before, after, err := postgres.MigrateURL(ctx, raw, !o.check)
		switch {
		case errors.Is(err, queue.ErrInvalidURL):
			return inputError{err}
		case err != nil:
			return failure{err}
		}
		where := queue.Redact(raw)
		switch {
		case o.check && after < postgres.SchemaVersion:
			pending = true
			fmt.Fprintf(e.stdout, "%s: schema %s at version %d, %d pending\n", where, schema, before, postgres.SchemaVersion-before)
		case before == after:
			fmt.Fprintf(e.stdout, "%s: schema %s at version %d, up to date\n", where, schema, after)
		default:
			fmt.Fprintf(e.stdout, "%s: schema %s migrated from version %d to %d\n", where, schema, before, after)
		}
	}
	if pending {
		return failuref("migrations are pending (run adaptq migrate)")
	}
	return nil
}

// databaseKey is a URL without its queue parameter: the queues of one
// schema share one migration.
func databaseKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Del("queue")
	u.RawQuery = q.Encode()
	u.Scheme = postgres.Scheme
	return u.String()
}
