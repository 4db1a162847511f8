package sqs_test

import (
	"flag"
	"os"
	"strconv"
	"testing"

	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// parallelCases is how many parallel (sub)tests run at once unless
// -test.parallel says otherwise. The conformance cases against the
// emulator mostly sleep on its real clock, so they overlap far beyond
// GOMAXPROCS.
const parallelCases = 64

// TestMain raises the parallelism of sleeping cases, points the AWS
// credential chain at dummy credentials, and stops the shared emulator
// when the tests end.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			explicit = true
		}
	})
	if !explicit {
		_ = flag.Set("test.parallel", strconv.Itoa(parallelCases))
	}
	os.Exit(sqstest.Main(m))
}
