//go:build !race

package sqsconsumer

const raceEnabled = false
