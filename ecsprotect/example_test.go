package ecsprotect_test

import (
	"log"
	"log/slog"

	"github.com/sqskit/sqsconsumer/ecsprotect"
)

// One Protector per process: every Consumer of the process shares it,
// since ECS protects a task, not a Consumer. Each message held is one
// Acquire and, once it is deleted or released, one Release.
func Example() {
	p, err := ecsprotect.New(ecsprotect.WithLogger(slog.Default())) // reads ECS_AGENT_URI
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	// Close after the Consumers have drained: it clears the protection.
	defer p.Close()

	handle := func(body string) {
		p.Acquire()       // never waits on the network
		defer p.Release() // the quiet period starts when nothing is held
		_ = body          // … the handler's work …
	}
	handle("hello")
}
