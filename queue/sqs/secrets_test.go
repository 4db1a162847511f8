package sqs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// The secret access key never reaches an error or a log line: not when the
// server refuses calls, not when it cannot be reached.
func TestSecretsNeverReachErrorsOrLogs(t *testing.T) {
	t.Parallel()
	const secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
	srv := sqstest.Shared(t)
	logs := &testutil.SyncBuffer{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), logs, zap.DebugLevel))
	creds := credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", secret, "")
	p := newFaultProxy(t, srv.Endpoint)
	c := newClient(t, srv, sqs.Config{Endpoint: p.URL, Credentials: creds, Logger: log})
	q := openQueue(t, c, "secrets")
	p.Arm(3, faultInternal) // every call fails now
	var errs []error
	_, err := q.Put(ctx, []byte("x"), queue.PutOptions{})
	errs = append(errs, err)
	_, err = q.Get(ctx, 10, 30*time.Second)
	errs = append(errs, err)
	err = q.Delete(ctx, "id", "0|secrets|handle")
	errs = append(errs, err)

	gone := newClient(t, srv, sqs.Config{Endpoint: "http://127.0.0.1:1", Credentials: creds, Logger: log})
	_, err = gone.Queue(ctx, "secrets")
	errs = append(errs, err)
	for i, err := range errs {
		if err == nil {
			t.Fatalf("call %d succeeded through a proxy failing every call", i)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %d shows the secret key: %v", i, err)
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the logs show the secret key:\n%s", logs.String())
	}
	if cfg := c.Config(); cfg.Credentials != nil {
		t.Error("Client.Config hands out the credentials provider")
	}
}

// A server that cannot be reached is a transient failure; credentials
// that cannot be found are not (no retry finds them).
func TestTransportAndCredentialFailures(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	c := newClient(t, srv, sqs.Config{Endpoint: "http://127.0.0.1:1"})
	_, err := c.Queue(ctx, "unreachable")
	if err == nil || !queue.IsTransient(err) {
		t.Fatalf("an unreachable endpoint: %v (transient %v), want a transient error", err, queue.IsTransient(err))
	}
	none := newClient(t, srv, sqs.Config{Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, errors.New("no credentials here")
	})})
	_, err = none.Queue(ctx, "no-credentials")
	if err == nil || queue.IsTransient(err) || !strings.Contains(err.Error(), "no credentials here") {
		t.Fatalf("missing credentials: %v (transient %v), want a permanent error saying so", err, queue.IsTransient(err))
	}
}
