package doctor

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The package's one duration formatter is fmtDur; fmtFig is fmtDur at the
// precision a measured figure is shown with.

// fmtDur formats d compactly without rounding: "6ms", "8.5s", "118.75s",
// "620s", "2m", "1h2m3s", "30h", "4d", "2d12h". Seconds up to 20 minutes
// (unless a whole number of minutes), h/m/s above, days for whole days
// and for whole hours from two days.
func fmtDur(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d < time.Second:
		return d.String() // "6ms", "250µs", "1.25ms", "0s"
	case d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + "d"
	case d >= 2*day && d%time.Hour == 0:
		return fmt.Sprintf("%dd%dh", d/day, d%day/time.Hour)
	case d%time.Minute != 0 && d < 20*time.Minute:
		sec := strconv.FormatInt(int64(d/time.Second), 10)
		if frac := d % time.Second; frac != 0 {
			sec += strings.TrimRight(fmt.Sprintf(".%09d", int64(frac)), "0")
		}
		return sec + "s"
	}
	s := d.String() // "10m0s", "1h0m0s", "1h30m0s", "1h2m3s"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// fmtFig formats a measured duration at the precision figures are shown
// with (figureStep, rounded to nearest): 250ms, 8.44s, 95s, 2m.
func fmtFig(d time.Duration) string {
	return fmtDur(d.Round(figureStep(d)))
}

// figureStep is the precision a measured duration is shown with, about
// three significant digits: 1 µs below 1 ms, then a hundredth of the
// decade (10 µs from 1 ms, 100 µs from 10 ms, ... 100 ms from 10 s) up to
// a minute, 1 s above.
func figureStep(d time.Duration) time.Duration {
	if d >= time.Minute {
		return time.Second
	}
	step := time.Microsecond
	for decade := time.Millisecond; d >= decade; decade *= 10 {
		step *= 10
	}
	return step
}

// figure rounds a measured duration up to figureStep. Rounding up keeps
// what a finding says true of the number it prints ("budget 10s is below
// p99 (10.1s)", never "(10s)"), and keeps the lease what it would be from
// the exact figure: twice a figure is a multiple of twice its step (2 µs
// to 200 ms below a minute, 2 s above), which divides the step roundLease
// rounds twice that figure to (1 s, and 10 s or more above a minute), so
// rounding up first changes nothing.
func figure(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return ceilTo(d, figureStep(d))
}

// ceilTo rounds d up to a multiple of step, saturating near the largest
// duration.
func ceilTo(d, step time.Duration) time.Duration {
	if t := d.Truncate(step); t != d {
		if t > maxDuration-step {
			return t
		}
		return t + step
	}
	return d
}

// roundLease rounds d up to a figure a person would configure: whole
// seconds up to a minute, 10 s steps up to 15 minutes, whole minutes up to
// two hours, 5-minute steps above.
func roundLease(d time.Duration) time.Duration {
	step := time.Second
	switch {
	case d > 2*time.Hour:
		step = 5 * time.Minute
	case d > 15*time.Minute:
		step = time.Minute
	case d > time.Minute:
		step = 10 * time.Second
	}
	return ceilTo(d, step)
}

// mulDur returns d × n, saturating instead of overflowing.
func mulDur(d time.Duration, n int) time.Duration {
	if d <= 0 || n <= 0 {
		return 0
	}
	if d > maxDuration/time.Duration(n) {
		return maxDuration
	}
	return d * time.Duration(n)
}

// farBelow reports whether x is under a quarter of y (exactly, without
// rounding).
func farBelow(x, y time.Duration) bool { return cmpScaled(x, 4, y) < 0 }

// farAbove reports whether x is over four times y (exactly).
func farAbove(x, y time.Duration) bool { return cmpScaled(y, 4, x) < 0 }

// cmpScaled compares a × k with b, for non-negative a and b, without
// overflow: -1, 0 or +1.
func cmpScaled(a time.Duration, k uint64, b time.Duration) int {
	hi, lo := bits.Mul64(uint64(max(a, 0)), k)
	switch bb := uint64(max(b, 0)); {
	case hi > 0 || lo > bb:
		return 1
	case lo < bb:
		return -1
	}
	return 0
}

// relation says in words how x compares with y; the words follow the
// ratio x / y: "far below" under 1/4, "below" under 1, "equal to",
// "above" up to 4, "far above" over 4.
func relation(x, y time.Duration) string {
	switch {
	case x == y:
		return "equal to"
	case x < y && farBelow(x, y):
		return "far below"
	case x < y:
		return "below"
	case farAbove(x, y):
		return "far above"
	}
	return "above"
}

// compare describes x against y, named what: "far below what (0.043%)",
// "below what (80%)", "equal to what", "above what (1.25×)", "far above
// what (90×)".
func compare(x, y time.Duration, what string) string {
	r := relation(x, y)
	if r == "equal to" || y <= 0 {
		return r + " " + what
	}
	return r + " " + what + " (" + fmtRatio(x, y) + ")"
}

// fmtRatio formats x / y (y > 0) so that it never contradicts the
// relation: under 1 as a percentage rounded down, with two significant
// digits below 10% ("99%" for 0.999, "0.043%", "<0.01%" when smaller);
// from 1 as a multiple rounded up ("1.01×" for 1.001, "90×").
func fmtRatio(x, y time.Duration) string {
	x, y = max(x, 0), max(y, 1)
	switch {
	case cmpScaled(y, 10, x) <= 0: // x >= 10y
		return strconv.FormatUint(mulDiv(x, 1, y, true), 10) + "×"
	case x >= y:
		return fixed(mulDiv(x, 100, y, true), 2) + "×"
	case cmpScaled(x, 10, y) >= 0:
		return strconv.FormatUint(mulDiv(x, 100, y, false), 10) + "%"
	}
	for d, scale := 1, uint64(1000); d <= 3; d, scale = d+1, scale*10 {
		if n := mulDiv(x, scale, y, false); n >= 10 {
			return fixed(n, d) + "%"
		}
	}
	return "<0.01%"
}

// mulDiv returns a × k / b (b > 0) rounded down or up, computed in 128
// bits; math.MaxUint64 when the quotient does not fit.
func mulDiv(a time.Duration, k uint64, b time.Duration, up bool) uint64 {
	hi, lo := bits.Mul64(uint64(a), k)
	if hi >= uint64(b) {
		return math.MaxUint64
	}
	q, rem := bits.Div64(hi, lo, uint64(b))
	if up && rem != 0 && q < math.MaxUint64 {
		q++
	}
	return q
}

// fixed formats n / 10^d with d decimals, trailing zeros dropped.
func fixed(n uint64, d int) string {
	s := strconv.FormatUint(n, 10)
	if len(s) <= d {
		s = strings.Repeat("0", d-len(s)+1) + s
	}
	whole, frac := s[:len(s)-d], strings.TrimRight(s[len(s)-d:], "0")
	if frac == "" {
		return whole
	}
	return whole + "." + frac
}

// pct formats a share of messages (0 to 1) as a percentage: "0%",
// "<0.1%", "1.9%", "50%".
func pct(f float64) string {
	p := 100 * f
	switch {
	case p == 0:
		return "0%"
	case p < 0.1:
		return "<0.1%"
	case p < 10:
		return strconv.FormatFloat(math.Round(p*10)/10, 'f', -1, 64) + "%"
	}
	return strconv.FormatFloat(math.Round(p), 'f', -1, 64) + "%"
}

// about formats an estimated share: "about 8.2%", "under 0.1%".
func about(f float64) string {
	if p := 100 * f; p > 0 && p < 0.1 {
		return "under 0.1%"
	}
	return "about " + pct(f)
}

// sig2 formats f with two significant digits (whole above 10): "0.043",
// "1.5", "12".
func sig2(f float64) string {
	if f >= 9.95 {
		return strconv.FormatFloat(math.Round(f), 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', 2, 64)
}

// count formats n with noun, plural when n is not 1: "1 message", "3
// leases", "0 redeliveries".
func count(n int64, noun string) string {
	if n != 1 {
		if strings.HasSuffix(noun, "y") {
			noun = strings.TrimSuffix(noun, "y") + "ies"
		} else {
			noun += "s"
		}
	}
	return strconv.FormatInt(n, 10) + " " + noun
}

// fmtCounts formats a receive-count distribution as "1:9812 2:31 3:2".
func fmtCounts(m map[int]int64) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = strconv.Itoa(k) + ":" + strconv.FormatInt(m[k], 10)
	}
	return strings.Join(parts, " ")
}

// arnName returns the queue name of an SQS ARN (the ARN itself if it has
// no colon).
func arnName(arn string) string {
	return arn[strings.LastIndexByte(arn, ':')+1:]
}
