//go:build race

package sqsconsumer

// raceEnabled: the race detector allows at most 8128 live goroutines, so
// scale tests shrink under it.
const raceEnabled = true
