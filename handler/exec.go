package handler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/adaptq/adaptq/queue"
)

// Environment variables that Exec sets for each message, on top of the
// variables it passes from the worker's environment (ExecBaseEnv and
// ExecOptions.PassEnv) and ExecOptions.Env. They are stable: programs in
// any language may rely on them.
const (
	// EnvMessageID is the message id, the same on every delivery: the key
	// for idempotent processing.
	EnvMessageID = "ADAPTQ_MESSAGE_ID"
	// EnvDequeueCount is how many times the message has been got, this
	// delivery included (decimal).
	EnvDequeueCount = "ADAPTQ_DEQUEUE_COUNT"
	// EnvInsertedAt is when the message was put, in RFC 3339 UTC with
	// whole seconds ("2006-01-02T15:04:05Z"), the resolution Azure reports.
	// It is not set for a message without an insertion time.
	EnvInsertedAt = "ADAPTQ_INSERTED_AT"
	// EnvQueue is the queue's name, set when ExecOptions.Queue is.
	EnvQueue = "ADAPTQ_QUEUE"
)

// ExecBaseEnv are the variables of the worker's environment every Exec
// command gets, whatever ExecOptions.PassEnv says: what a program needs to
// find programs, its home, a temporary directory, its language and its
// time zone, and none that carries a credential. An entry ending in "*"
// stands for every variable that starts with the rest. The Windows names
// (case-insensitive there) are what programs need to start at all.
// Anything else of the worker's, its own ADAPTQ_ variables, the Azure,
// AWS and Redis credentials and a proxy URL (which may hold a password)
// among them, reaches a command only when PassEnv names it (those of
// ExecSecretEnv only when PassEnv names them exactly).
var ExecBaseEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR",
	"SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC", "PATHEXT", "TEMP", "TMP",
	"USERPROFILE", "USERNAME", "HOMEDRIVE", "HOMEPATH", "APPDATA", "LOCALAPPDATA", "PROGRAMDATA",
}

// ExecSecretEnv are the variables of the worker's environment that a
// prefix in ExecOptions.PassEnv (or ExecBaseEnv) never passes, even when it
// matches them: adaptq's own ADAPTQ_ variables (the admin token, the Redis
// password, a queue URL given by environment), the credentials of the
// backends and clouds adaptq talks to (an OTLP collector's headers among
// them), and the proxy URLs (which may hold a password). "AWS_*" passes
// AWS_REGION, not AWS_SECRET_ACCESS_KEY; "OTEL_*" passes
// OTEL_SERVICE_NAME, not OTEL_EXPORTER_OTLP_HEADERS. Only PassEnv naming
// one exactly passes it: the operator asked for that variable. An entry ending in "*" stands for every variable that starts
// with the rest; names are compared without regard to case.
var ExecSecretEnv = []string{
	"ADAPTQ_*",
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
	"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCESS_KEY", "AZURE_STORAGE_SAS_TOKEN",
	"AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH", "AZURE_CLIENT_CERTIFICATE_PASSWORD",
	"AZURE_PASSWORD", "AZURE_FEDERATED_TOKEN_FILE",
	"REDIS_PASSWORD", "REDISCLI_AUTH", "REDIS_URL",
	"PGPASSWORD", "PGPASSFILE", "DATABASE_URL",
	"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
	// The OTLP exporter's headers (`adaptq run` reads them): an API key or
	// a bearer token, as a collector or a tracing vendor asks.
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
	"OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
}

// ExitDataErr is the exit code Exec treats as a permanent failure unless
// ExecOptions.PermanentExitCodes says otherwise: EX_DATAERR from BSD's
// sysexits.h, "the input data was incorrect in some way". A program exits
// with it for a message that no retry can fix (Python: sys.exit(65);
// os.EX_DATAERR on unix).
const ExitDataErr = 65

// MaxStderrTail is how much of a failed command's standard error Exec keeps
// for its error: the last 4 KiB, enough for a stack trace's end (where the
// cause is) and small enough for a log line.
const MaxStderrTail = 4 << 10

// MaxLogLine is the longest line of a command's output that Exec logs
// whole (see ExecOptions.Log): 4 KiB, as MaxStderrTail, so that one line
// cannot swell a log entry.
const MaxLogLine = 4 << 10

const (
	// execWaitDelay bounds how long Exec waits, once the command has exited
	// or been killed, for its stdout and stderr to reach EOF. A background
	// process the command left behind may hold them open; after this delay
	// Exec reads what the pipes hold without waiting for more (on unix:
	// every line the command wrote), closes them and abandons the process.
	// Half a second is ample for a killed process group's pipes to close.
	execWaitDelay = 500 * time.Millisecond

	// execLineMax is how much of an unterminated line Exec buffers before
	// it writes it to ExecOptions.Stdout or Stderr anyway (64 KiB, the
	// default limit of a bufio.Scanner line).
	execLineMax = 64 << 10
)

// ExecOptions tune Exec. The zero value runs the command in the worker's
// directory, with the ExecBaseEnv part of the worker's environment and no
// time limit but the handler's context, discards its standard output, and
// treats exit code ExitDataErr as permanent.
type ExecOptions struct {
	// Queue, if set, is passed to the command as ADAPTQ_QUEUE.
	Queue string

	// PassEnv names the variables of the worker's environment the command
	// gets besides ExecBaseEnv: exact names, or a prefix ending in "*"
	// ("MYAPP_*"). A name listed exactly is passed even if it holds a
	// credential (AWS_SECRET_ACCESS_KEY): the operator asked for it; a
	// prefix never passes the variables of ExecSecretEnv ("AWS_*" passes
	// AWS_REGION, not AWS_SECRET_ACCESS_KEY). "*" alone is refused: list
	// what the program needs.
	PassEnv []string

	// SecretEnv names more variables that a prefix in PassEnv never
	// passes, as if they were in ExecSecretEnv: the worker lists those its
	// queue URLs name for credentials (an Azure URL's key_env=QUEUE_KEY), so
	// pass_env "QUEUE_*" cannot hand the child the key.
	SecretEnv []string

	// Env holds extra "KEY=value" entries for the command's environment,
	// on top of the variables passed from the worker's. The ADAPTQ_
	// variables of the message override both.
	Env []string

	// Dir is the command's working directory; "" is the worker's. A
	// relative command path such as ./worker.py is found relative to Dir.
	Dir string

	// Timeout bounds one run of the command; 0 means no limit but the
	// handler's context. When it passes, the command's process group is
	// killed.
	Timeout time.Duration

	// Stdout, if not nil, receives the command's standard output; nil
	// discards it. Stderr, if not nil, receives the command's standard
	// error as well (the tail Exec keeps for errors is kept either way).
	//
	// Handlers run in parallel: Exec writes whole lines (or 64 KiB chunks
	// of very long ones), and one lock shared by every Exec handler
	// serialises the writes, so lines of concurrent commands do not
	// interleave even when several handlers share os.Stdout. A write error
	// does not fail the message; the output is dropped.
	Stdout, Stderr io.Writer

	// Log, if not nil, receives each line the command writes to its
	// standard output and standard error, at info level, as the field
	// line of the entry "handler: exec output", with the fields msg_id,
	// dequeue_count, queue (if Queue is set) and stream ("stdout" or
	// "stderr"): in JSON logs each line says which message it is about.
	// Lines are redacted as failure reasons are (queue.RedactText).
	// A line longer than MaxLogLine is cut there, and the field
	// truncated_bytes counts what was cut; a last line without a newline
	// is logged too. Log may be set together with Stdout and Stderr.
	//
	// Every line the command writes before it exits is logged, however
	// late the worker gets to read it, unless LogLimit leaves it out.
	Log *zap.Logger

	// LogLimit, if not nil, bounds the lines logged to Log (see LogLimit):
	// those past it are counted and summed up in one warn line per window.
	// Handlers of one queue share one. nil logs every line.
	LogLimit *LogLimit

	// PermanentExitCodes are exit codes that mean "retrying cannot help":
	// the handler marks such a failure Permanent (see there for what the
	// listener does with it). nil means {ExitDataErr}; an empty, non-nil
	// slice means none. Codes must be positive (0 is success).
	PermanentExitCodes []int
}

// ExitError is the error of a command that ran and failed: it exited with a
// non-zero code or was killed by a signal it was not sent by Exec. (A
// command killed because its timeout or context ended returns an error
// wrapping context.DeadlineExceeded or the context's error instead.)
type ExitError struct {
	// Command is argv[0] as configured. The arguments are not recorded:
	// they may hold secrets.
	Command string
	// Code is the exit code, or -1 if the process was killed by a signal.
	Code int
	// Stderr is the tail of the command's standard error, at most
	// MaxStderrTail bytes, with the secrets of URLs and secret parameters
	// in it redacted (queue.RedactText).
	Stderr []byte

	err *exec.ExitError
}

// Error names the command, how it ended ("exit status 3", "signal:
// segmentation fault") and the tail of its standard error.
func (e *ExitError) Error() string {
	how := fmt.Sprintf("exit status %d", e.Code)
	if e.err != nil {
		how = e.err.Error()
	}
	return fmt.Sprintf("handler: exec %q: %s%s", e.Command, how, stderrSuffix(e.Stderr))
}

// Unwrap returns the *exec.ExitError, whose ProcessState has the details.
func (e *ExitError) Unwrap() error {
	if e.err == nil {
		return nil
	}
	return e.err
}

// Exec returns a handler that runs a program for each message: argv[0] with
// the arguments argv[1:] (no shell is involved; see ParseCommand), with
//
//   - the message body, byte for byte, on standard input;
//   - an explicit environment: the variables of the worker's that
//     ExecBaseEnv and o.PassEnv name (never the rest: the worker's own
//     secrets stay with it), then o.Env, then ADAPTQ_MESSAGE_ID,
//     ADAPTQ_DEQUEUE_COUNT, ADAPTQ_INSERTED_AT and, if o.Queue is set,
//     ADAPTQ_QUEUE (see EnvMessageID and the constants after it), then,
//     when the message is traced (package tracing), TRACEPARENT and
//     TRACESTATE (see Propagation);
//   - standard output discarded or copied to o.Stdout, and standard error
//     kept for the error (its last MaxStderrTail bytes) and copied to
//     o.Stderr if set.
//
// Exit code 0 is success: the message is deleted. Any other exit is an
// *ExitError naming the command, the exit code and the tail of standard
// error (never the body), marked Permanent for the codes in
// o.PermanentExitCodes (by default ExitDataErr, 65). A program that cannot
// start is an ordinary failure.
//
// When o.Timeout passes or the handler's context ends, the command and
// every process it started are killed: on unix the command leads a process
// group of its own, and Exec sends SIGKILL to the whole group. The error
// then wraps context.DeadlineExceeded (timeout) or the context's error.
// Processes that leave the group (setsid, daemons) are not killed; on
// other systems only the command itself is. On Linux the command is also
// killed when the worker dies without cancelling it (SIGKILL, a crash),
// so that it does not run on while its message comes back to another
// worker; processes the command started are not (a script should exec
// its last program). Because it has its own group,
// a Ctrl-C at the worker's terminal does not reach the command: the worker
// decides, by draining or by cancelling the context.
//
// Exec waits for the command, not for background processes it leaves
// behind with stdout or stderr still open: those streams are closed
// shortly after the command exits.
//
// Exec checks its arguments at once: argv must name a program that
// exec.LookPath finds (relative to o.Dir for a path like ./worker.py; the
// absolute path is used from then on), o.Dir must be a directory, o.Env
// entries must have the form KEY=value, o.PassEnv entries must be names
// (or prefixes ending in "*", not "*" alone), o.Timeout must not be
// negative and PermanentExitCodes must be positive.
func Exec(argv []string, o ExecOptions) (Func, error) {
	return execHandler(argv, o, execWaitDelay)
}

// execHandler is Exec with the wait delay (execWaitDelay) as a parameter.
func execHandler(argv []string, o ExecOptions, waitDelay time.Duration) (Func, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("handler: exec: empty command")
	}
	name := argv[0]
	bad := func(format string, args ...any) (Func, error) {
		return nil, fmt.Errorf("handler: exec %q: %s", name, fmt.Sprintf(format, args...))
	}
	if o.Timeout < 0 {
		return bad("negative timeout %s", o.Timeout)
	}
	for _, kv := range o.Env {
		// Name the entry only when it has no value that could be a secret.
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return bad("env entry %q is not KEY=value", kv)
		case k == "":
			return bad("env entry with an empty name")
		}
	}
	if err := CheckPassEnv(o.PassEnv); err != nil {
		return nil, fmt.Errorf("handler: exec %q: %w", name, err)
	}
	if o.Dir != "" {
		fi, err := os.Stat(o.Dir)
		if err != nil {
			return nil, fmt.Errorf("handler: exec %q: working directory: %w", name, err)
		}
		if !fi.IsDir() {
			return bad("working directory %q is not a directory", o.Dir)
		}
	}
	path, err := lookPath(name, o.Dir)
	if err != nil {
		return nil, fmt.Errorf("handler: exec %q: %w", name, err)
	}
	permanent := map[int]bool{ExitDataErr: true}
	if o.PermanentExitCodes != nil {
		permanent = make(map[int]bool, len(o.PermanentExitCodes))
		for _, c := range o.PermanentExitCodes {
			if c <= 0 {
				return bad("permanent exit code %d is not positive", c)
			}
			permanent[c] = true
		}
	}

	args := append([]string{name}, argv[1:]...) // a copy: the caller keeps argv
	extraEnv := append([]string(nil), o.Env...)
	pass := append(append([]string(nil), ExecBaseEnv...), o.PassEnv...)
	secret := append([]string(nil), o.SecretEnv...)
	var timeoutErr error
	if o.Timeout > 0 {
		timeoutErr = fmt.Errorf("handler: exec %q: killed after the timeout of %s: %w",
			name, o.Timeout, context.DeadlineExceeded)
	}

	return func(ctx context.Context, m *queue.Message) error {
		runCtx := ctx
		if timeoutErr != nil {
			var cancel context.CancelFunc
			runCtx, cancel = context.WithTimeoutCause(ctx, o.Timeout, timeoutErr)
			defer cancel()
		}

		cmd := exec.CommandContext(runCtx, path)
		cmd.Args = args
		cmd.Dir = o.Dir
		cmd.Env = messageEnv(passedEnv(os.Environ(), pass, secret), extraEnv, o.Queue, m)
		// The message's trace (TRACEPARENT, TRACESTATE) comes last, so it
		// wins over the worker's own and o.Env's.
		cmd.Env = append(cmd.Env, traceEnv(ctx)...)
		cmd.Stdin = bytes.NewReader(m.Body)
		stderr := &tailBuffer{max: MaxStderrTail}
		var stdoutW, stderrW io.Writer = nil, stderr
		var stdoutLines, stderrLines *lineWriter
		if o.Stdout != nil {
			stdoutLines = &lineWriter{w: o.Stdout}
			stdoutW = stdoutLines
		}
		if o.Stderr != nil {
			stderrLines = &lineWriter{w: o.Stderr}
			stderrW = io.MultiWriter(stderrW, stderrLines)
		}
		var stdoutLog, stderrLog *lineLogger
		if o.Log != nil && o.Log.Core().Enabled(zapcore.InfoLevel) {
			log := o.Log.With(messageFields(o.Queue, m)...)
			stdoutLog = &lineLogger{log: log.With(zap.String("stream", "stdout")), limit: o.LogLimit}
			stderrLog = &lineLogger{log: log.With(zap.String("stream", "stderr")), limit: o.LogLimit}
			stdoutW = teeTo(stdoutW, stdoutLog)
			stderrW = io.MultiWriter(stderrW, stderrLog)
		}
		out, err := newExecOutput(cmd, stdoutW, stderrW, waitDelay)
		if err != nil {
			// No pipe: the worker is out of file descriptors, not the
			// message at fault.
			return WorkerFault(fmt.Errorf("handler: exec %q: output pipes: %w", name, err))
		}
		cmd.WaitDelay = waitDelay // for standard input
		killProcessGroupOnCancel(cmd)

		err = cmd.Start()
		out.started()
		if err == nil {
			err = cmd.Wait()
		}
		out.finish(waitDelay)
		stdoutLines.flush()
		stderrLines.flush()
		stdoutLog.flush()
		stderrLog.flush()

		// A command that exited 0 did its work, even if the context ended
		// just then or a background process kept its output open.
		if err == nil || (cmd.ProcessState != nil && cmd.ProcessState.Success()) {
			return nil
		}
		// The tail goes into errors, logs and poison envelopes: a URL the
		// program printed keeps no signature or password.
		tail := stderr.Bytes()
		if tail != nil {
			tail = []byte(queue.RedactText(string(tail)))
		}
		if runCtx.Err() != nil {
			if timeoutErr != nil && context.Cause(runCtx) == timeoutErr {
				return wrapStderr(timeoutErr, tail)
			}
			return wrapStderr(fmt.Errorf("handler: exec %q: killed: %w", name, ctx.Err()), tail)
		}
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			xe := &ExitError{Command: name, Code: ee.ExitCode(), Stderr: tail, err: ee}
			if permanent[xe.Code] {
				return Permanent(xe)
			}
			return xe
		}
		err = wrapStderr(fmt.Errorf("handler: exec %q: %w", name, err), tail)
		if IsWorkerFault(err) || errors.Is(err, syscall.EAGAIN) {
			// The command could not start: no pipe, no memory, no process
			// for it. The worker is short, not the message at fault.
			return WorkerFault(err)
		}
		return err
	}, nil
}

// lookPath resolves name as exec.Command would when run in dir, and
// returns an absolute path so that dir does not apply twice.
func lookPath(name, dir string) (string, error) {
	p := name
	if dir != "" && !filepath.IsAbs(name) && strings.ContainsAny(name, `/`+string(filepath.Separator)) {
		p = filepath.Join(dir, name)
	}
	path, err := exec.LookPath(p)
	if err != nil {
		if ee, ok := errors.AsType[*exec.Error](err); ok {
			return "", ee.Err // exec.Error repeats the name we already give
		}
		return "", err
	}
	return filepath.Abs(path)
}

// CheckPassEnv checks a list of variables to pass (ExecOptions.PassEnv):
// each is a name or a prefix ending in "*", not "*" alone, with no "=".
func CheckPassEnv(names []string) error {
	for _, n := range names {
		switch {
		case n == "" || n == "*":
			return fmt.Errorf("pass_env entry %q: name a variable, or a prefix ending in * (passing every variable would pass the worker's secrets)", n)
		case strings.ContainsAny(n, "= \t\n\x00") || strings.Contains(strings.TrimSuffix(n, "*"), "*"):
			return fmt.Errorf("pass_env entry %q is not a variable name (or a prefix ending in *)", n)
		}
	}
	return nil
}

// passedEnv is the part of environ (KEY=value entries) whose names pass
// matches, in environ's order.
func passedEnv(environ, pass, secret []string) []string {
	out := make([]string, 0, len(pass))
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue // Windows' per-drive "=C:" entries
		}
		for _, p := range pass {
			if envNameMatches(k, p) && (!strings.HasSuffix(p, "*") || !isWorkerSecretEnv(k) && !isNamed(k, secret)) {
				out = append(out, kv)
				break
			}
		}
	}
	return out
}

// isNamed reports whether variable k is one of names (case-insensitive).
func isNamed(k string, names []string) bool {
	for _, n := range names {
		if strings.EqualFold(k, n) {
			return true
		}
	}
	return false
}

// isWorkerSecretEnv reports whether variable k is one of ExecSecretEnv,
// which only an exact name passes.
func isWorkerSecretEnv(k string) bool {
	k = strings.ToUpper(k)
	for _, s := range ExecSecretEnv {
		if prefix, glob := strings.CutSuffix(s, "*"); glob && strings.HasPrefix(k, prefix) || k == s {
			return true
		}
	}
	return false
}

// envNameMatches reports whether variable k is named by p, a name or a
// prefix ending in "*". Names are case-insensitive on Windows.
func envNameMatches(k, p string) bool {
	prefix, glob := strings.CutSuffix(p, "*")
	if runtime.GOOS == "windows" {
		k, prefix = strings.ToUpper(k), strings.ToUpper(prefix)
	}
	if glob {
		return strings.HasPrefix(k, prefix)
	}
	return k == prefix
}

// messageEnv is the environment for one run of the command: base, the
// variables passed from the worker's, then extra and the message's.
func messageEnv(base, extra []string, queueName string, m *queue.Message) []string {
	env := make([]string, 0, len(base)+len(extra)+4)
	env = append(env, base...)
	env = append(env, extra...)
	env = append(env,
		EnvMessageID+"="+m.ID,
		EnvDequeueCount+"="+strconv.Itoa(m.DequeueCount),
	)
	if !m.InsertedAt.IsZero() {
		env = append(env, EnvInsertedAt+"="+m.InsertedAt.UTC().Format(time.RFC3339))
	}
	if queueName != "" {
		env = append(env, EnvQueue+"="+queueName)
	}
	// os/exec keeps the last of duplicate keys, so the message's variables
	// win over the worker's and o.Env.
	return env
}

// wrapStderr appends the stderr tail to err's text, keeping err wrapped.
func wrapStderr(err error, tail []byte) error {
	if s := stderrSuffix(tail); s != "" {
		return fmt.Errorf("%w%s", err, s)
	}
	return err
}

// stderrSuffix formats a stderr tail for an error text: quoted, so that it
// stays one line in a log and control characters cannot forge entries.
func stderrSuffix(tail []byte) string {
	tail = bytes.TrimRight(tail, " \t\r\n")
	if len(tail) == 0 {
		return ""
	}
	return fmt.Sprintf("; stderr: %q", tail)
}

// tailBuffer is an io.Writer that keeps the last max bytes written to it.
// Only the goroutine that copies the command's stderr writes to it, and
// Bytes is called after that goroutine has finished.
type tailBuffer struct {
	max       int
	buf       []byte
	truncated bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if n >= t.max {
		t.truncated = t.truncated || n > t.max || len(t.buf) > 0
		t.buf = append(t.buf[:0], p[n-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + n - t.max; over > 0 {
		t.buf = t.buf[:copy(t.buf, t.buf[over:])]
		t.truncated = true
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// Bytes returns the tail; when older output was dropped, it starts at a
// UTF-8 character boundary.
func (t *tailBuffer) Bytes() []byte {
	b := t.buf
	if t.truncated {
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

// outputMu serialises the writes of every Exec handler to ExecOptions.Stdout
// and Stderr: commands run in parallel and commonly share os.Stdout.
var outputMu sync.Mutex

// lineWriter passes one command's output on to w in whole lines, under
// outputMu. Its own buffer is used by one copying goroutine only.
type lineWriter struct {
	w   io.Writer
	buf []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	n := bytes.LastIndexByte(l.buf, '\n') + 1
	if n == 0 && len(l.buf) >= execLineMax {
		n = len(l.buf)
	}
	if n > 0 {
		l.emit(l.buf[:n])
		l.buf = l.buf[:copy(l.buf, l.buf[n:])]
	}
	return len(p), nil
}

// flush writes what is left, an unterminated last line. It is a no-op on a
// nil *lineWriter.
func (l *lineWriter) flush() {
	if l == nil || len(l.buf) == 0 {
		return
	}
	l.emit(l.buf)
	l.buf = nil
}

func (l *lineWriter) emit(b []byte) {
	outputMu.Lock()
	defer outputMu.Unlock()
	_, _ = l.w.Write(b) // the output is a side channel: its failure does not fail the message
}

// teeTo adds w to a command's output writer, which may be nil (discarded).
func teeTo(out io.Writer, w io.Writer) io.Writer {
	if out == nil {
		return w
	}
	return io.MultiWriter(out, w)
}

// messageFields name the message a command's output lines are about.
func messageFields(queueName string, m *queue.Message) []zap.Field {
	fields := []zap.Field{zap.String(LogKeyMsgID, m.ID), zap.Int(LogKeyDequeueCount, m.DequeueCount)}
	if queueName != "" {
		fields = append(fields, zap.String("queue", queueName))
	}
	return fields
}

// lineLogger logs one stream of one command's output a line at a time,
// keeping at most MaxLogLine bytes of each. Only the goroutine that copies
// the stream writes to it; flush is called after that goroutine has
// finished.
type lineLogger struct {
	log     *zap.Logger
	limit   *LogLimit // nil: no limit
	buf     []byte    // the current line, up to MaxLogLine bytes
	dropped int       // bytes of the current line past MaxLogLine
}

func (l *lineLogger) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		part, rest, eol := bytes.Cut(p, []byte{'\n'})
		keep := min(len(part), MaxLogLine-len(l.buf))
		l.buf = append(l.buf, part[:keep]...)
		l.dropped += len(part) - keep
		if !eol {
			break
		}
		l.emit()
		p = rest
	}
	return n, nil
}

// flush logs an unterminated last line. It is a no-op on a nil *lineLogger.
func (l *lineLogger) flush() {
	if l != nil && (len(l.buf) > 0 || l.dropped > 0) {
		l.emit()
	}
}

func (l *lineLogger) emit() {
	if !l.limit.Allow() {
		l.buf, l.dropped = l.buf[:0], 0
		return
	}
	line := bytes.TrimSuffix(l.buf, []byte{'\r'})
	if l.dropped > 0 {
		// Do not end on half a character.
		line = cutToRune(line)
	}
	// A copy (buf is reused), redacted: the line that becomes a failure's
	// reason is logged here too, and must not carry what the reason hides.
	fields := []zap.Field{zap.String("line", queue.RedactText(string(line)))}
	if l.dropped > 0 {
		fields = append(fields, zap.Int("truncated_bytes", l.dropped+len(l.buf)-len(line)))
	}
	l.log.Info("handler: exec output", fields...)
	l.buf, l.dropped = l.buf[:0], 0
}

// cutToRune drops a last character that a cut split in two.
func cutToRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}
