# adaptq's tasks. `make test` is the whole suite, as CI runs it on a fresh
# clone; `make bench` regenerates the figures in BENCHMARKS.md.

GO ?= go

.PHONY: test bench vet fmt

test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 9m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./queue/memory/ ./queue/sqlite/ ./listener/

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w .
