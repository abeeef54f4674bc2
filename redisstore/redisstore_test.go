package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/redisstore"
	"github.com/sqskit/sqsconsumer/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client connects to the server named by SQSCONSUMER_REDIS_URL, or skips.
// It deletes the keys under prefix when the test ends.
func client(t testing.TB) (c *redis.Client, prefix string) {
	t.Helper()
	url := os.Getenv("SQSCONSUMER_REDIS_URL")
	if url == "" {
		t.Skip("SQSCONSUMER_REDIS_URL is not set; run `source .ci/setup.d/20-redis.sh` (or bash .ci/run), or point it at a scratch Redis, e.g. redis://127.0.0.1:6379/0")
	}
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	c = redis.NewClient(opts)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix = "sqsconsumer-test:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := c.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		_ = c.Close()
	})
	require.NoError(t, c.Ping(t.Context()).Err(), "Redis at %s", url)
	return c, prefix
}

// The suite's expiry cases wait on the real clock: Redis expires keys by
// its own clock. A 500 ms tick keeps the suite short while staying far
// above a loopback round trip.
func TestConformance(t *testing.T) {
	c, prefix := client(t)
	storetest.Run(t, func(t *testing.T) sqsconsumer.IdempotencyStore {
		return redisstore.New(c, redisstore.WithPrefix(prefix))
	}, storetest.WithTick(500*time.Millisecond))
}

// The record layout is documented; check it so it does not drift.
func TestRecordLayout(t *testing.T) {
	c, prefix := client(t)
	ctx := t.Context()
	s := redisstore.New(c, redisstore.WithPrefix(prefix))
	_, err := s.Claim(ctx, "inv_1", "tok", time.Now().Add(time.Minute), "h1")
	require.NoError(t, err)
	got, err := c.HGetAll(ctx, prefix+"inv_1").Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"t": "tok", "s": "p", "h": "h1"}, got)
	ttl, err := c.PTTL(ctx, prefix+"inv_1").Result()
	require.NoError(t, err)
	require.InDelta(t, time.Minute, ttl, float64(5*time.Second))

	require.NoError(t, s.Complete(ctx, "inv_1", "tok", []byte("r"), time.Hour))
	got, err = c.HGetAll(ctx, prefix+"inv_1").Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"t": "tok", "s": "c", "h": "h1", "r": "r"}, got)
	ttl, err = c.PTTL(ctx, prefix+"inv_1").Result()
	require.NoError(t, err)
	require.InDelta(t, time.Hour, ttl, float64(5*time.Second))
}

func BenchmarkRedisStore(b *testing.B) {
	c, prefix := client(b)
	storetest.RunBenchmarks(b, redisstore.New(c, redisstore.WithPrefix(prefix)))
}
