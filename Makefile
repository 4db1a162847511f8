# adaptq's tasks. `make test` is the whole suite, as CI runs it on a fresh
# clone; `make bench` regenerates the figures in BENCHMARKS.md.

GO ?= go

.PHONY: test test-main test-bench fuzz torture bench soak vet fmt screenshot

# Azurite, the Azure Storage emulator the queue/azure tests run against,
# pinned by tools/azurite/package-lock.json. npm ci runs again only when
# the lock file changes (rm -rf tools/azurite/node_modules to force it).
AZURITE := tools/azurite/node_modules/.adaptq-installed

$(AZURITE): tools/azurite/package.json tools/azurite/package-lock.json
	npm ci --prefix tools/azurite --no-audit --no-fund --loglevel=error
	touch $@

# fauxqs, the SQS emulator the queue/sqs tests and the SQS bench run
# against, pinned by tools/fauxqs/package-lock.json the same way.
FAUXQS := tools/fauxqs/node_modules/.adaptq-installed

$(FAUXQS): tools/fauxqs/package.json tools/fauxqs/package-lock.json
	npm ci --prefix tools/fauxqs --no-audit --no-fund --loglevel=error
	touch $@

# Chromium, the browser internal/statuspage's test drives (headless, with
# chromedp): Debian's package, installed only when /usr/bin/chromium is
# missing (the test skips without it, or fails under CI=true).
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The three parts run at once (many tests wait on a server, an emulator or
# a real clock, so two cores have time to spare); each part's output is
# printed whole when it ends, and the first failure fails the target.
test: $(AZURITE) $(FAUXQS) $(CHROMIUM)
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	$(MAKE) --no-print-directory -j3 --output-sync=target test-main test-bench fuzz FUZZTIME=10s

test-main:
	$(GO) test -race -count=1 -timeout 9m ./...

test-bench:
	cd bench && $(GO) test -race -count=1 ./...

# Short fuzz runs of the config loader and of the SQLite driver against the
# memory driver as a model; their seeds are in the tests. `make fuzz
# FUZZTIME=10m` for a longer hunt.
FUZZTIME ?= 1m
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzMatchesMemory$$' -fuzztime $(FUZZTIME) ./queue/sqlite/
	$(GO) test -run '^$$' -fuzz '^FuzzEnvelope$$' -fuzztime $(FUZZTIME) ./queue/poison/

# The listener's torture test alone, under -race, for DURATION (it runs
# 20 s within `make test`). A failure prints the seed that replays it.
DURATION ?= 10m
torture:
	$(GO) test -race -count=1 -timeout 0 -run '^TestTorture$$' -v ./listener/ -args -torture.duration=$(DURATION)

# Every figure of BENCHMARKS.md, measured in one run on this machine
# (bench/ is its own module, so goqite stays out of adaptq's go.mod). Size
# flags: `cd bench && go run ./cmd/benchreport -h`.
bench: $(AZURITE) $(FAUXQS)
	cd bench && $(GO) run ./cmd/benchreport -o ../BENCHMARKS.md

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w .

# Issue 21's soak: one worker on the embedded default (SQLite, trigger on)
# under 300 msgs/s plus a burst of 5,000 every 30 s, for DURATION (make
# soak DURATION=1h), sampling memory, goroutines, open files and the
# SQLite files every 10 s. It writes bench/soak/latest.{md,svg,csv} and
# replaces BENCHMARKS.md's soak section with the report (`make bench`, which
# rewrites the file, embeds latest.md again), and fails if a message was
# lost or handled twice.
soak:
	cd bench && $(GO) run ./cmd/soak -duration $(DURATION) -o soak -benchmarks ../BENCHMARKS.md

# The README's picture of the status page (docs/status-page.png), taken by
# the status page's browser test from a running worker with a poisoned
# message.
screenshot: $(CHROMIUM)
	$(GO) test -count=1 -run '^TestStatusPageInABrowser$$' ./internal/statuspage/ -args -screenshot=$(CURDIR)/docs/status-page.png
