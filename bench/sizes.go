package bench

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Sizes scale every section. DefaultSizes is the full run; TinySizes runs
// every code path in seconds.
type Sizes struct {
	// Repeats is how many times each throughput figure is measured (the
	// report gives the median); baseline and adaptq runs alternate.
	Repeats int
	// Overhead is the number of messages each overhead run drains.
	Overhead int
	// Backlog is the queue depth of the peak-RSS runs.
	Backlog int
	// Embedded is the number of messages each SQLite-vs-goqite run drains;
	// EmbeddedBytes caps the bodies of one run by size (64 KiB bodies: at
	// most EmbeddedBytes/64Ki messages).
	Embedded      int
	EmbeddedBytes int
	// Azurite is the number of messages each drain of the Azurite section
	// starts with; AzuriteLatency the same with latency added to every
	// request; AzuriteRounds how many times each consumer drains them.
	Azurite        int
	AzuriteLatency int
	AzuriteRounds  int
	// SQS is the number of messages each drain of the SQS section starts
	// with, SQSRounds how many times each consumer drains them, and
	// SQSIdle how long its idle listener is watched.
	SQS       int
	SQSRounds int
	SQSIdle   time.Duration
	// Calls is the number of messages of each calls-per-message run.
	Calls int
	// Burst is the number of messages that land at once on an idle worker;
	// BurstTrials the number of bursts per mode; BurstIdleMax the idle.max
	// of the listener without a trigger.
	Burst        int
	BurstTrials  int
	BurstIdleMax time.Duration
	// WorkWindow is how long each cell of the scaling-with-work grid is
	// measured (after a tenth of it as warm-up); WorkBacklog caps a
	// cell's backlog.
	WorkWindow  time.Duration
	WorkBacklog int
	// RawSQLite and RawMemory are the message counts of the raw driver
	// figures.
	RawSQLite int
	RawMemory int
	// TriggerTrials are the wake-latency trials with a trigger;
	// PollTrials those without one, run in PollLanes concurrent lanes with
	// idle.max = PollIdleMax.
	TriggerTrials int
	PollTrials    int
	PollLanes     int
	PollIdleMax   time.Duration
	// IdleHours is the virtual time over which idle calls are counted.
	IdleHours int
	// Postgres is the number of jobs each adaptq-vs-River drain starts
	// with; PostgresLong the messages of the long run (dead tuples, Get
	// latency); PostgresWake the cross-process wake trials; PostgresIdle
	// how long River's idle client is watched.
	Postgres     int
	PostgresLong int
	PostgresWake int
	PostgresIdle time.Duration
	// TxPut is the number of transactions each side of the
	// enqueue-in-a-transaction comparison (adaptq PutTx, River InsertTx)
	// commits per run.
	TxPut int

	// Redis is the number of messages each Redis-vs-asynq drain starts
	// with; RedisWakeTrials the cross-process wake trials; RedisIdle the
	// window over which idle commands are counted.
	Redis           int
	RedisWakeTrials int
	RedisIdle       time.Duration

	// SteadyWindow is how long each steady-rate cell puts messages, after
	// a warm-up of a fifth of it.
	SteadyWindow time.Duration

	// SQLiteBacklogs are the backlogs of the sqlite section; SQLiteAfter
	// how long after each drain its file size is read again; SQLiteTwoProc
	// the messages of each two-process run.
	SQLiteBacklogs []int
	SQLiteAfter    time.Duration
	SQLiteTwoProc  int

	// PutBatch is the number of messages each run of the batch-put
	// section puts on each engine, PutBatchRounds how many times Put and
	// PutBatch each put them.
	PutBatch       int
	PutBatchRounds int

	// BatchHandler is the number of messages each drain of the batch
	// handler section writes into PostgreSQL (issue 29: 100,000).
	BatchHandler int
}

// DefaultSizes finish in under ten minutes on a two-core machine.
func DefaultSizes() Sizes {
	return Sizes{
		Repeats:        5,
		BatchHandler:   100_000,
		Overhead:       500_000,
		Backlog:        100_000,
		Embedded:       20_000,
		EmbeddedBytes:  256 << 20,
		SQLiteBacklogs: []int{1_000, 100_000, 1_000_000},
		SQLiteAfter:    time.Minute,
		SQLiteTwoProc:  100_000,
		Azurite:        1_500,
		AzuriteLatency: 1_000,
		AzuriteRounds:  5,
		SQS:            3_000,
		SQSRounds:      3,
		SQSIdle:        100 * time.Second,
		Calls:          50_000,
		Burst:          10_000,
		BurstTrials:    3,
		BurstIdleMax:   2 * time.Second,
		WorkWindow:     2 * time.Second,
		WorkBacklog:    600_000,
		RawSQLite:      50_000,
		RawMemory:      1_000_000,
		TriggerTrials:  200,
		PollTrials:     200,
		PollLanes:      40,
		PollIdleMax:    2 * time.Second,
		IdleHours:      24,
		Postgres:       100_000,
		PostgresLong:   1_000_000,
		PostgresWake:   200,
		PostgresIdle:   30 * time.Second,
		TxPut:          20_000,

		Redis:           50_000,
		RedisWakeTrials: 300,
		RedisIdle:       30 * time.Second,
		SteadyWindow:    5 * time.Second,
		PutBatch:        3_000,
		PutBatchRounds:  2,
	}
}

// TinySizes exercise every section in seconds: for the test that keeps the
// harness from rotting, not for figures.
func TinySizes() Sizes {
	return Sizes{
		Repeats:        1,
		Overhead:       2_000,
		Backlog:        2_000,
		Embedded:       200,
		EmbeddedBytes:  1 << 20,
		SQLiteBacklogs: []int{100, 1_000},
		SQLiteAfter:    1500 * time.Millisecond,
		SQLiteTwoProc:  500,
		Azurite:        200,
		AzuriteLatency: 100,
		AzuriteRounds:  1,
		SQS:            200,
		SQSRounds:      1,
		SQSIdle:        3 * time.Second,
		Calls:          500,
		Burst:          300,
		BurstTrials:    1,
		BurstIdleMax:   100 * time.Millisecond,
		WorkWindow:     60 * time.Millisecond,
		WorkBacklog:    5_000,
		RawSQLite:      400,
		RawMemory:      5_000,
		TriggerTrials:  5,
		PollTrials:     4,
		PollLanes:      2,
		PollIdleMax:    100 * time.Millisecond,
		IdleHours:      1,
		Postgres:       500,
		BatchHandler:   500,
		PostgresLong:   2_000,
		PostgresWake:   5,
		TxPut:          200,
		PostgresIdle:   time.Second,

		Redis:           500,
		RedisWakeTrials: 5,
		RedisIdle:       time.Second,
		SteadyWindow:    200 * time.Millisecond,
		PutBatch:        100,
		PutBatchRounds:  1,
	}
}

// RegisterFlags binds each size to a flag of fs, with s's values as the
// defaults.
func (s *Sizes) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&s.Repeats, "repeats", s.Repeats, "measurements per throughput figure (median reported)")
	fs.IntVar(&s.BatchHandler, "batch-handler", s.BatchHandler, "messages per drain of the batch handler section")
	fs.IntVar(&s.Overhead, "overhead", s.Overhead, "messages per listener-overhead run")
	fs.IntVar(&s.Backlog, "backlog", s.Backlog, "backlog of the peak-RSS runs")
	fs.IntVar(&s.Embedded, "embedded", s.Embedded, "messages per SQLite-vs-goqite run")
	fs.IntVar(&s.EmbeddedBytes, "embedded-bytes", s.EmbeddedBytes, "largest total of bodies per SQLite-vs-goqite run by size")
	fs.Var((*intsValue)(&s.SQLiteBacklogs), "sqlite-backlogs", "comma-separated backlogs of the sqlite section")
	fs.DurationVar(&s.SQLiteAfter, "sqlite-after", s.SQLiteAfter, "how long after a drain the sqlite section reads the file size again")
	fs.IntVar(&s.SQLiteTwoProc, "sqlite-two-proc", s.SQLiteTwoProc, "messages per two-process run of the sqlite section")
	fs.IntVar(&s.Azurite, "azurite", s.Azurite, "messages per drain of the Azurite section")
	fs.IntVar(&s.AzuriteLatency, "azurite-latency", s.AzuriteLatency, "messages per drain of the Azurite section with latency added")
	fs.IntVar(&s.AzuriteRounds, "azurite-rounds", s.AzuriteRounds, "drains per consumer in the Azurite section")
	fs.IntVar(&s.SQS, "sqs", s.SQS, "messages per drain of the SQS section")
	fs.IntVar(&s.SQSRounds, "sqs-rounds", s.SQSRounds, "drains per consumer in the SQS section")
	fs.DurationVar(&s.SQSIdle, "sqs-idle", s.SQSIdle, "how long the SQS section watches an idle listener")
	fs.IntVar(&s.Calls, "calls", s.Calls, "messages per calls-per-message run")
	fs.IntVar(&s.PutBatch, "putbatch", s.PutBatch, "messages per run of the batch-put section, per engine")
	fs.IntVar(&s.PutBatchRounds, "putbatch-rounds", s.PutBatchRounds, "runs of Put and of PutBatch per engine in the batch-put section")
	fs.IntVar(&s.Burst, "burst", s.Burst, "messages in a burst")
	fs.IntVar(&s.BurstTrials, "burst-trials", s.BurstTrials, "bursts per mode")
	fs.DurationVar(&s.BurstIdleMax, "burst-idle-max", s.BurstIdleMax, "idle.max of the burst listener without a trigger")
	fs.DurationVar(&s.WorkWindow, "work-window", s.WorkWindow, "measurement window per scaling-with-work cell")
	fs.IntVar(&s.WorkBacklog, "work-backlog", s.WorkBacklog, "largest backlog of a scaling-with-work cell")
	fs.IntVar(&s.RawSQLite, "raw-sqlite", s.RawSQLite, "messages per raw SQLite figure")
	fs.IntVar(&s.RawMemory, "raw-memory", s.RawMemory, "messages per raw memory figure")
	fs.IntVar(&s.TriggerTrials, "trigger-trials", s.TriggerTrials, "wake-latency trials with a trigger")
	fs.IntVar(&s.PollTrials, "poll-trials", s.PollTrials, "wake-latency trials without a trigger")
	fs.IntVar(&s.PollLanes, "poll-lanes", s.PollLanes, "concurrent lanes of the trials without a trigger")
	fs.DurationVar(&s.PollIdleMax, "poll-idle-max", s.PollIdleMax, "idle.max of the listener without a trigger")
	fs.IntVar(&s.IdleHours, "idle-hours", s.IdleHours, "virtual hours over which idle calls are counted")
	fs.IntVar(&s.Postgres, "postgres", s.Postgres, "jobs per adaptq-vs-River drain")
	fs.IntVar(&s.PostgresLong, "postgres-long", s.PostgresLong, "messages of the PostgreSQL long run")
	fs.IntVar(&s.PostgresWake, "postgres-wake", s.PostgresWake, "cross-process wake trials on PostgreSQL")
	fs.IntVar(&s.TxPut, "txput", s.TxPut, "transactions per run of each side of the enqueue-in-a-transaction comparison (adaptq PutTx, River InsertTx)")
	fs.DurationVar(&s.PostgresIdle, "postgres-idle", s.PostgresIdle, "how long River's idle client is watched")
	fs.IntVar(&s.Redis, "redis", s.Redis, "messages per Redis-vs-asynq drain")
	fs.IntVar(&s.RedisWakeTrials, "redis-wake-trials", s.RedisWakeTrials, "cross-process wake trials on Redis")
	fs.DurationVar(&s.RedisIdle, "redis-idle", s.RedisIdle, "window over which idle Redis commands are counted")
	fs.DurationVar(&s.SteadyWindow, "steady-window", s.SteadyWindow, "how long each steady-rate cell puts messages (after a fifth of it as warm-up)")
}

// Validate rejects sizes that cannot measure anything.
func (s Sizes) Validate() error {
	var bad []string
	for name, v := range map[string]int{
		"repeats": s.Repeats, "overhead": s.Overhead, "backlog": s.Backlog, "embedded": s.Embedded,
		"azurite": s.Azurite, "azurite-latency": s.AzuriteLatency, "azurite-rounds": s.AzuriteRounds,
		"sqs": s.SQS, "sqs-rounds": s.SQSRounds,
		"calls": s.Calls, "burst": s.Burst, "burst-trials": s.BurstTrials, "raw-sqlite": s.RawSQLite, "work-backlog": s.WorkBacklog,
		"raw-memory": s.RawMemory, "trigger-trials": s.TriggerTrials, "poll-trials": s.PollTrials,
		"poll-lanes": s.PollLanes, "idle-hours": s.IdleHours,
		"postgres": s.Postgres, "postgres-long": s.PostgresLong, "postgres-wake": s.PostgresWake, "txput": s.TxPut,
		"redis": s.Redis, "redis-wake-trials": s.RedisWakeTrials, "batch-handler": s.BatchHandler,
		"embedded-bytes": s.EmbeddedBytes, "sqlite-two-proc": s.SQLiteTwoProc,
		"putbatch": s.PutBatch, "putbatch-rounds": s.PutBatchRounds,
	} {
		if v < 1 {
			bad = append(bad, fmt.Sprintf("-%s %d is below 1", name, v))
		}
	}
	for name, v := range map[string]time.Duration{
		"burst-idle-max": s.BurstIdleMax, "sqs-idle": s.SQSIdle, "work-window": s.WorkWindow, "poll-idle-max": s.PollIdleMax,
		"postgres-idle": s.PostgresIdle, "redis-idle": s.RedisIdle,
	} {
		if v < 10*time.Millisecond {
			bad = append(bad, fmt.Sprintf("-%s %s is below 10ms", name, v))
		}
	}
	if len(s.SQLiteBacklogs) == 0 {
		bad = append(bad, "-sqlite-backlogs is empty")
	}
	for _, n := range s.SQLiteBacklogs {
		if n < 1 {
			bad = append(bad, fmt.Sprintf("-sqlite-backlogs %d is below 1", n))
		}
	}
	if s.SQLiteAfter < 0 {
		bad = append(bad, "-sqlite-after is negative")
	}
	if len(bad) > 0 {
		return fmt.Errorf("bench: sizes: %s", strings.Join(bad, "; "))
	}
	return nil
}

// String lists the sizes as the flags that reproduce them.
func (s Sizes) String() string {
	fs := flag.NewFlagSet("sizes", flag.ContinueOnError)
	c := s
	c.RegisterFlags(fs)
	var parts []string
	fs.VisitAll(func(f *flag.Flag) { parts = append(parts, "-"+f.Name+" "+f.Value.String()) })
	return strings.Join(parts, " ")
}

// intsValue is a flag.Value of comma-separated integers.
type intsValue []int

func (v *intsValue) String() string {
	if v == nil {
		return ""
	}
	s := make([]string, len(*v))
	for i, n := range *v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (v *intsValue) Set(text string) error {
	var ns []int
	for _, f := range strings.Split(text, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		ns = append(ns, n)
	}
	*v = ns
	return nil
}
