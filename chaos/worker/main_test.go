package main

import (
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	base := []string{"-endpoint", "http://127.0.0.1:1", "-queue", "http://127.0.0.1:1/1/q", "-journal", "/tmp/j"}
	c, err := parse(append(base, "-lease", "5s", "-broken", "ignore-cancel"), io.Discard)
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, c.lease)
	require.Equal(t, "ignore-cancel", c.broken)

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing", nil, "-endpoint, -queue and -journal are required"},
		{"work range", append(base, "-min", "2s", "-max", "1s"), "need 0 <= min <= max"},
		{"broken mode", append(base, "-broken", "explode"), `-broken "explode": unknown mode`},
		{"client", append(base, "-client", "v1"), `-client "v1": must be wire, sdk or sqsclient`},
		{"arguments", append(base, "extra"), "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(tt.args, io.Discard)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestWork(t *testing.T) {
	t.Parallel()
	h := &handler{c: config{minWork: 10 * time.Millisecond, maxWork: 20 * time.Millisecond}, rng: rand.New(rand.NewPCG(1, 2))}
	d, hang := h.work("n=1 sleep=1.5s")
	require.Equal(t, 1500*time.Millisecond, d)
	require.False(t, hang)
	_, hang = h.work("sleep=hang")
	require.True(t, hang)
	for range 100 {
		d, hang = h.work("n=2")
		require.False(t, hang)
		require.GreaterOrEqual(t, d, 10*time.Millisecond)
		require.LessOrEqual(t, d, 20*time.Millisecond)
	}
}
