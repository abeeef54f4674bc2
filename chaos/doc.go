// Package chaos is a process-level test suite for the sqsconsumer library: a
// worker binary built from the library (chaos/worker) consumes from a
// standalone cmd/sqstest over loopback, through a fault-injecting proxy
// (chaos/proxy), while the test kills it with SIGKILL, stops it with SIGTERM
// and breaks its connections. Each run is checked for lost messages, messages
// held by a dead process that do not come back within a lease, duplicates
// with no recorded cause, and a graceful stop that overruns its budget or
// strands messages.
//
// The suite needs real processes, sockets and time, so unlike the library's
// own tests it does not run in testing/synctest; it asserts on properties with
// generous slack, never on tight timings. Run it with
//
//	go test ./chaos/ -run TestChaos -v -chaos.report
//
// -chaos.seed=N replays a run's random choices (the seed is printed),
// -chaos.long runs a longer version.
package chaos
