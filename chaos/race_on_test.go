//go:build race

package chaos

// raceEnabled: build the worker with -race too.
const raceEnabled = true
