package scalesim_test

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/scalesim"
)

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var scaleFlag = func() int {
	if s := os.Getenv("SCALESIM_K"); s != "" {
		k, _ := strconv.Atoi(s)
		return k
	}
	return 40
}()

func TestMeasureCost(t *testing.T) {
	c0, w0 := cpu(), time.Now()
	res, err := scalesim.Run(t, scalesim.Config{
		Trace:  scalesim.Step(20, 2000, 2*time.Minute, 8*time.Minute),
		Policy: scalesim.KEDA{}, Scale: scaleFlag,
	})
	require.NoError(t, err)
	c := cpu() - c0
	t.Logf("%+v", *res)
	t.Logf("sent %d in %v virtual: cpu %v wall %v: %.0f msg per cpu-second", res.Sent, res.Virtual, c, time.Since(w0), float64(res.Sent)/c.Seconds())
}
