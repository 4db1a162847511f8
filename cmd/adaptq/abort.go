package main

import "time"

// abortWait bounds how long a worker told twice to stop waits for its
// handlers, cancelled by Worker.Abort, to return: long enough for an exec: handler to kill
// its command's process group and reap it (the handler package waits up to
// half a second for the command's output to close).
const abortWait = time.Second
