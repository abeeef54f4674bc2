package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain lets the test binary serve as the server side of a bench, as the
// program does (the default -server child runs os.Executable(), which under
// go test is this binary), and otherwise runs the tests and checks that no
// goroutine outlives them.
func TestMain(m *testing.M) {
	if opts, ok := os.LookupEnv(serverEnv); ok {
		os.Exit(serveChild(opts, os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
