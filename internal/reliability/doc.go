// Package reliability holds adaptq's tests that try to break its promise of
// at-least-once processing with nothing lost: real worker processes killed
// mid-run and drained under load. The tests re-execute their own binary as
// the worker (see worker_test.go), so the process under test is built from
// this repository.
package reliability
