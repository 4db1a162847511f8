// Package all imports every driver of this module, for programs that want
// every URL scheme: memory://, sqlite://, azure://, postgres:// (and
// postgresql://), redis:// (and rediss://) and sqs://. The adaptq binary
// (cmd/adaptq) imports it.
//
// A program that knows its backend imports that driver alone, as
// database/sql programs do, and pays for no other SDK:
//
//	import _ "github.com/adaptq/adaptq/queue/sqlite"
//
// Importing this package instead costs the AWS and Azure SDKs, pgx and
// go-redis in build time and binary size.
package all

import (
	_ "github.com/adaptq/adaptq/queue/azure"    // azure://
	_ "github.com/adaptq/adaptq/queue/memory"   // memory://
	_ "github.com/adaptq/adaptq/queue/postgres" // postgres://, postgresql://
	_ "github.com/adaptq/adaptq/queue/redis"    // redis://, rediss://
	_ "github.com/adaptq/adaptq/queue/sqlite"   // sqlite://
	_ "github.com/adaptq/adaptq/queue/sqs"      // sqs://
)
