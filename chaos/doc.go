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
// TestChaosReleased (released_test.go) stops a worker whose handlers all run
// until cancelled with SIGTERM, under CPU load, and compares what it reported
// (ev:released, ev:deleted) with what the server holds: a message reported
// released must be visible (or taken by a second consumer polling the
// queue), one reported deleted must be deleted. A few runs of a short
// setting by default (about 6 s); -chaos.long adds more runs and the
// setting issue 29 reported.
//
// TestChaosShutdownStrands (strand_test.go) is issue 35's case 1: a worker
// on a backlog of 200 (3 s handlers, 10 s budget), a FIFO backlog, 30 s
// handlers cut at a 5 s budget, and a trickle, each stopped with SIGTERM a
// second in under CPU load while a second consumer polls; after the exit
// no message may stay hidden by a receive of the worker's. A stranded one
// is reported with its server history, as reported received by the worker
// or never seen (a receive answer lost before it reached the library).
// -chaos.client picks the worker's SQS client (wire, sdk: the SDK's
// default HTTP client, sqsclient), -chaos.other the second consumer's,
// -chaos.stall=D (sdk) holds the worker's connection writer after a
// receive's body while its answer is read (the moment the SDK's
// lost-answer race needs), -chaos.strand.broken the worker's -broken mode,
// -chaos.strand.runs the rounds of the four modes (default 1, about 20 s).
// A control runs first: the sdk client, a stalled receive and the
// library's request-body guard off (unguarded-bodies) must strand one
// receive's worth, never reported received.
//
// -chaos.seed=N replays a run's random choices (the seed is printed),
// -chaos.long runs a longer version.
//
// # The seeded simulation
//
// TestSimulation (sim_test.go) runs the library at scale in virtual time,
// inside testing/synctest, against the in-memory sqstest server, through the
// public API only: four Consumers ("processes", 50 handlers each, 30 s
// lease, 80 s maximum lease) share one queue. Every call goes through a wire
// that injects, on 1 % of calls, a fault of every class sqstest offers
// (throttling, 500 and 503, OverLimit, KMS throttling, the permanent
// AccessDenied, QueueDoesNotExist and InvalidParameterValue, refused
// handles for whole batch calls and single entries, delays of 1-40 s,
// answers lost after the server acted), and 1 % of handler calls see the
// server expire their lease early (sqstest Expire). Handlers take up to
// three leases (most under 2 s) and honour their context; now and then a
// process crashes: its wire fails every call from that instant, its
// handlers stop dead, and what it held comes back after its leases. A
// process whose Run ends on a permanent receive error is replaced too.
//
// Asserted: no message lost (deleted without a completed handling); each
// duplicate completion explained by evidence recorded between the two
// deliveries (from the earlier one's hand-over, since a message read ahead
// waits in its process before its handler starts, to the later handler's
// start) — its process crashed or quit before the delete was confirmed,
// the server expired its lease, a delete answer was lost, a delete or
// renewal naming its handle failed or was delayed; no two
// handlers of a message at once, unless the server expired the older
// delivery's lease between the two hand-overs, and then the older
// delivery's handler (which may start second, after waiting) ends within a
// lease of the other's start; the heap after GC flat as
// messages flow
// (sqstest keeps the history of the last 1,000 departed messages,
// sqstest.WithHistoryLimit). TestSimulationControls shows each check
// failing on a broken variant.
//
//	go test ./chaos/ -run 'TestSimulation$' -v                  # 100,000 messages, about a minute (10,000 with -race or -short)
//	go test ./chaos/ -run 'TestSimulation$' -v -sim.n=1000000   # 10^6 messages, 8-25 minutes
//	go test ./chaos/ -run 'TestSimulation$' -v -sim.seed=N      # replay a run's draws (the seed is printed)
//
// Every random draw (fault per call number, handler time per message and
// delivery, crash moments) hashes the seed with its own keys, so a replay
// makes the same draws; goroutine scheduling is not fixed, so a replay
// follows the same schedule but its figures may differ slightly.
// -sim.history=0 keeps every message's history in the server (the memory
// figures below), -sim.heapprofile=FILE writes heap profiles.
//
// Measured (2-core machine, shared): 10^5 messages in 56 s (5.5 min with
// -race), 28 min of virtual time, 40 processes (8 crashes, 28 exits on a
// permanent receive error), 1,749 faults over 117,356 calls, 0 lost, 548
// duplicates (319 after a server expiry, 192 after a failed delete, 27
// process exits, 10 crashes), heap after GC 5.2-7.3 MB throughout with
// about 200 messages held. 10^6 messages: 4.5 h of virtual time in 25 min
// on the loaded machine (7.6 min of CPU), 331 processes (92 crashes, 235
// exits), 17,223 faults over 1,172,561 calls, 0 lost, 5,637 duplicates
// (3,299 expiry, 1,975 failed delete, 232 exit, 129 crash, 2 lost or
// expired lease), heap 6.3-8.1 MB throughout. A lost delete answer causes
// no duplicate here: the lease retries, and deleting a deleted message
// succeeds. With the server keeping every message's history the heap grew
// by 0.8 KB per message (87.5 MB after 10^5 messages): that history, not
// the library, is what grows.
package chaos
