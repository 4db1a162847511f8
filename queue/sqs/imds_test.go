package sqs_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/sqs"
)

// countingListener accepts connections on loopback, counts them and closes
// them at once.
func countingListener(t *testing.T) (addr string, count func() int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String(), n.Load
}

// noAWSEnvironment leaves the AWS credential chain nothing to find but the
// EC2 metadata service, which it points at imds.
func noAWSEnvironment(t *testing.T, imds string) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":                      "",
		"AWS_SECRET_ACCESS_KEY":                  "",
		"AWS_SESSION_TOKEN":                      "",
		"AWS_PROFILE":                            "",
		"AWS_DEFAULT_PROFILE":                    "",
		"AWS_ROLE_ARN":                           "",
		"AWS_WEB_IDENTITY_TOKEN_FILE":            "",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI":     "",
		"AWS_EC2_METADATA_DISABLED":              "",
		"AWS_CONFIG_FILE":                        filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE":            filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_SERVICE_ENDPOINT":      "http://" + imds,
	} {
		t.Setenv(k, v)
	}
}

// TestEndpointWithoutCredentialsNeverAsksIMDS: with an endpoint override (an
// emulator) and no credentials anywhere, opening a queue asks neither the
// EC2 metadata service nor the endpoint, and the error says that the
// credentials are missing and how to give them. The SDK asked the metadata
// service twice and failed with "request to EC2 IMDS failed".
func TestEndpointWithoutCredentialsNeverAsksIMDS(t *testing.T) {
	imds, imdsConns := countingListener(t)
	endpoint, endpointConns := countingListener(t)
	noAWSEnvironment(t, imds)

	_, err := queue.Open(context.Background(), "sqs://us-east-1/000000000000/orders?endpoint=http://"+endpoint)
	if err == nil {
		t.Fatal("opened a queue without credentials")
	}
	if n := imdsConns(); n != 0 {
		t.Errorf("the EC2 metadata service was asked %d times", n)
	}
	if n := endpointConns(); n != 0 {
		t.Errorf("the endpoint was called %d times without credentials", n)
	}
	if !errors.Is(err, sqs.ErrNoCredentials) {
		t.Errorf("error %v is not ErrNoCredentials", err)
	}
	for _, want := range []string{"no AWS credentials", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "anonymous=true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	// anonymous=true needs no credentials: the driver calls the endpoint,
	// still never the metadata service.
	_, err = queue.Open(context.Background(), "sqs://us-east-1/000000000000/orders?anonymous=true&timeout=5s&endpoint=http://"+endpoint)
	if err == nil || errors.Is(err, sqs.ErrNoCredentials) {
		t.Errorf("anonymous open against a listener that closes: %v", err)
	}
	if n := imdsConns(); n != 0 {
		t.Errorf("the EC2 metadata service was asked %d times", n)
	}
	if n := endpointConns(); n == 0 {
		t.Error("the anonymous open never called the endpoint")
	}
}

// TestIMDSStaysOnWhenAsked: AWS_EC2_METADATA_DISABLED=false asks for the
// SDK's own behaviour with an endpoint override too (an instance role
// through a VPC endpoint): the metadata service is asked.
func TestIMDSStaysOnWhenAsked(t *testing.T) {
	imds, imdsConns := countingListener(t)
	endpoint, _ := countingListener(t)
	noAWSEnvironment(t, imds)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "false")

	_, err := queue.Open(context.Background(), "sqs://us-east-1/000000000000/orders?timeout=5s&endpoint=http://"+endpoint)
	if err == nil {
		t.Fatal("opened a queue without credentials")
	}
	if imdsConns() == 0 {
		t.Errorf("the metadata service was not asked with AWS_EC2_METADATA_DISABLED=false: %v", err)
	}
}
