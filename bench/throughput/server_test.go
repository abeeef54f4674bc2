package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// TestServerCounts checks what the server side counts, for each protocol:
// a burst of concurrent calls through the SDK's default client opens more
// connections than its pool keeps, and over TLS every new connection is
// one full handshake (the client keeps no session cache, so none resume).
// TLS needs real sockets, so this cannot run in a synctest bubble; the
// calls are long enough (a 100 ms RTT) to overlap, and a minute bounds
// the whole test.
func TestServerCounts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		proto protocol
	}{
		{"HTTPS, HTTP/1.1", protoHTTPS},
		{"HTTPS offering HTTP/2", protoHTTPS2},
		{"plain HTTP", protoHTTP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			srv, err := startServer(serverOptions{Proto: tt.proto}, placeInProcess)
			require.NoError(t, err)
			defer func() { require.NoError(t, srv.close()) }()
			require.NoError(t, srv.fresh(ctx, 100*time.Millisecond))
			url, err := srv.createQueue(ctx, "counted", 0, nil)
			require.NoError(t, err)
			require.NoError(t, srv.reset(ctx))

			client := newSQSClient(srv.urls.URL, clientSpec{}.httpClient(srv.roots))
			const calls = 30
			var wg sync.WaitGroup
			for range calls {
				wg.Go(func() {
					_, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url)})
					require.NoError(t, err)
				})
			}
			wg.Wait()
			st, err := srv.stats(ctx)
			require.NoError(t, err)
			t.Logf("%+v", st)
			require.Equal(t, int64(calls), st.Requests)
			require.Equal(t, map[string]int{"GetQueueAttributes": calls}, st.Calls)
			require.Empty(t, st.Failed)
			require.Positive(t, st.Conns)
			switch tt.proto {
			case protoHTTPS:
				require.Equal(t, st.Conns, st.Handshakes, "one full handshake per new connection")
				require.Greater(t, st.Conns, int64(10), "30 calls at once need more connections than the 10 the pool keeps")
				require.Zero(t, st.HTTP2)
			case protoHTTPS2:
				require.Equal(t, st.Conns, st.Handshakes, "one full handshake per new connection")
				require.Equal(t, int64(calls), st.HTTP2, "the SDK's client takes HTTP/2 when offered")
			case protoHTTP:
				require.Zero(t, st.Handshakes)
				require.Greater(t, st.Conns, int64(10))
				require.Zero(t, st.HTTP2)
			}
			require.Zero(t, st.Resumed)

			// A new window counts from zero; a fresh server closes the
			// connections, so the next call dials again.
			require.NoError(t, srv.fresh(ctx, 0))
			url, err = srv.createQueue(ctx, "counted", 0, nil)
			require.NoError(t, err)
			require.NoError(t, srv.reset(ctx))
			st, err = srv.stats(ctx)
			require.NoError(t, err)
			require.Zero(t, st.Conns+st.Handshakes+st.Requests)
			require.Eventually(t, func() bool {
				_, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url)})
				return err == nil
			}, 10*time.Second, 10*time.Millisecond, "a call on a new connection")
			st, err = srv.stats(ctx)
			require.NoError(t, err)
			require.Positive(t, st.Conns)
			if tt.proto.tls() {
				require.Equal(t, st.Conns, st.Handshakes)
			}
		})
	}
}

// TestDrainCountsHandshakes drains a queue over HTTPS with the raw loop and
// with the Consumer, the server side in a child process, as the bench
// does by default, and checks each measurement's counts: new connections
// and TLS handshakes are equal and above zero, every request went over
// HTTP/1.1, and the calls per message are those of batched receives and
// deletes. Real sockets (TLS, a child process); a minute bounds it.
func TestDrainCountsHandshakes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := defaultConfig()
	cfg.Wait = time.Second
	srv, err := startServer(serverOptions{Proto: protoHTTPS}, placeChild)
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.close()) }()
	b := newBench(cfg, srv, 2*time.Millisecond, clientSpec{})
	for _, name := range []string{"raw", "sqsconsumer"} {
		c := contenderNames[name]
		w := workload{concurrency: 20, visibility: benchVisibility, wait: cfg.Wait, pollers: 4}
		m, err := b.measureRow(ctx, c, 400, w)
		require.NoError(t, err, name)
		t.Logf("%s: %d conns, %d handshakes, %d unused, %d requests, calls %v, server CPU %v", name, m.conns, m.handshakes, m.unused, m.requests, m.calls, m.serverCPU)
		require.Positive(t, m.conns, name)
		require.Equal(t, m.conns, m.handshakes, name)
		require.Equal(t, 200, m.lateMessages, name)
		require.LessOrEqual(t, m.lateConns, m.conns, "%s: the second half's connections are some of all", name)
		require.Zero(t, m.http2, name)
		require.Positive(t, m.serverCPU, "the child's CPU is measured apart")
		// A receive and a delete batch per 10 messages, and on 400 messages
		// a few receives more at the start and the end.
		require.GreaterOrEqual(t, m.callsPerMessage(), 0.2, name)
		require.Less(t, m.callsPerMessage(), 0.3, name)
		require.Zero(t, m.redelivered, name)
		require.Zero(t, m.receivedAgain, name)
	}
	st, err := srv.stats(ctx)
	require.NoError(t, err)
	require.Empty(t, st.failures())
	require.False(t, strings.Contains(st.cancellations(), "Delete"), "only long polls are cut short: %s", st.cancellations())
}

// TestServerCountsReceivedAgain checks the server side's count of messages
// received more than once, the sign of a drain that stalled: two receives
// from a queue whose visibility timeout is 0 deliver the same three
// messages twice. A
// fresh server starts from none. Real sockets (a loopback listener); a
// minute bounds it.
func TestServerCountsReceivedAgain(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := startServer(serverOptions{Proto: protoHTTP}, placeInProcess)
	require.NoError(t, err)
	defer func() { require.NoError(t, srv.close()) }()
	require.NoError(t, srv.fresh(ctx, 0))
	url, err := srv.createQueue(ctx, "again", 3, map[string]string{"VisibilityTimeout": "0"})
	require.NoError(t, err)
	client := newSQSClient(srv.urls.URL, clientSpec{}.httpClient(nil))
	for range 2 {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10})
		require.NoError(t, err)
		require.Len(t, out.Messages, 3)
	}
	st, err := srv.stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.ReceivedAgain)

	require.NoError(t, srv.fresh(ctx, 0))
	st, err = srv.stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.ReceivedAgain)
}
