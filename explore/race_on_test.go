//go:build race

package explore

// raceEnabled: the race detector slows each seed down about tenfold, so
// fewer seeds run by default.
const raceEnabled = true
