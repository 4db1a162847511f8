# adaptq's tasks. `make test` is the whole suite, as CI runs it on a fresh
# clone; `make bench` regenerates the figures in BENCHMARKS.md.

GO ?= go

.PHONY: test fuzz bench vet fmt

test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 9m ./...
	$(MAKE) fuzz FUZZTIME=10s

# Short fuzz runs of the config loader and of the SQLite driver against the
# memory driver as a model; their seeds are in the tests. `make fuzz
# FUZZTIME=10m` for a longer hunt.
FUZZTIME ?= 1m
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzMatchesMemory$$' -fuzztime $(FUZZTIME) ./queue/sqlite/

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./queue/memory/ ./queue/sqlite/ ./listener/

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w .
