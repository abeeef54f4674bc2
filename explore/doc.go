// Package explore is the Consumer's explorer: a seeded simulation, in
// virtual time, that draws a whole scenario from each seed and checks, after
// every run, the invariants every combination of options must keep. It has
// no API; it is its tests.
//
// Each seed draws a queue (standard, standard with message groups, FIFO), a
// handler (single or Batch, with or without middleware, behind
// NewIdempotent on the memory store, with or without its options: TTL,
// in-progress retry, duplicate hook, payload validation), the Consumer's
// options across their ranges (given directly, or through Options
// bundles whose values later options override), bodies of a size or of
// varied sizes, what the handler does with each message (succeed, fail,
// a Permanent error, RetryAfter with or without an error, Throttled with
// no delay, a sub-second one or minutes, Neutral, panic, run past its
// lease, ignore its cancelled context for a bounded time, release or
// extend its own lease, return RetryAfter(err, 0) when the drain begins
// (Draining)), faults on the calls to SQS (every class the in-memory
// sqstest server answers with, failed batch entries, delays, lost
// answers), a first contact that cannot succeed (no such host, TLS,
// access denied, no such queue, a signature for another region) or that
// heals (a refused connection, a timeout, a failing DNS server, 5xx,
// throttling), an HTTP client whose connection pool the wire plays
// (through httptrace, so the calls in flight adapt), an ECS agent for
// WithScaleInProtection, leases the server expires, and events at random
// instants or at chosen moments (a receive in flight, a batch or a
// handler running, a pause, the shutdown): Pause, Resume (at one instant
// they race; during the drain, after Run returned), a second Consumer on
// the queue, and the shutdown (Run's context cancelled). Everything runs inside testing/synctest against sqstest
// reached through an in-memory http.RoundTripper, so minutes of virtual
// time take milliseconds, and it uses only the public API of sqsconsumer
// and sqstest.
//
// The checks, after each run (and some while it runs):
//
//   - a message is deleted only after its handler (its batch entry)
//     succeeded, or after its Permanent error moved it to the dead-letter
//     queue;
//   - when Run returns, nothing the process received is hidden with nobody
//     holding it: each message is deleted, visible within a second, moved
//     to the dead-letter queue, or waiting out a retry visibility its
//     handler asked for (or an injected fault or lease loss explains it);
//   - Run returns within the shutdown timeout plus the 5 s call timeout
//     (plus the time a handler ignores its context), no handler runs after
//     it, and no goroutine outlives it;
//   - every Deleted, Released and Renewed event matches a call SQS answered
//     with success before it (and the server's history); Stats balance;
//   - a FIFO group never runs two messages at once in one process, nor one
//     before every earlier message of its group left the queue; a group
//     limit is never exceeded; no message runs in two handlers of one
//     process at once;
//   - the breaker opens only after enough failures of the downstream
//     (not Permanent, Throttled or Neutral errors, RetryAfter(nil),
//     idempotency duplicates in progress, lease losses, the shutdown);
//   - a message whose handler asked for a delay (RetryAfter, Throttled,
//     a duplicate in progress) is released for it, in whole seconds; a
//     Throttled pauses receiving and starting for its delay (without
//     WithAdaptiveConcurrency, or at its floor);
//   - handlers never run above WithConcurrency, nor, started, above
//     WithAdaptiveConcurrency's limit, which stays within its range;
//   - the bytes held (Stats.Bytes) stay within WithMaxBytes, or one
//     message alone, by as much more as the spread of the sizes allows;
//     none after Run;
//   - the receives in flight stay within the pollers, and within the
//     limit on calls in flight that follows the client's pool;
//   - Health is healthy while idle or paused (Status "paused", not
//     ready), and unhealthy only for a reason the run explains; a
//     Consumer that is not paused keeps receiving, and one that stays
//     paused sends no receive;
//   - a first contact that cannot succeed fails Run at once, naming the
//     queue; one that heals never does, and Health says why it retries;
//   - once Run has run, Settings shows every option as given (the later
//     value of one given twice, through bundles too);
//   - the task is protected from scale-in while a message is held, and
//     not after Run;
//   - Run returns an error only after a permanent error was injected.
//
// Options that cannot act together are refused at New naming both (at Run
// for what only the queue tells: a stall limit under the heartbeat of the
// queue's own VisibilityTimeout, a dead-letter queue that is the source by
// its ARN): a seed may draw such a pair on purpose (conflicts), and the
// explorer checks the refusal; every other scenario avoids them.
//
// # Running it
//
//	go test ./explore                          # 2,000 seeds (300 with -race or -short)
//	go test ./explore -explore.seeds=50000     # a deep run (-explore.from=N: the first seed)
//	go test ./explore -run 'TestExplore$' -explore.seed=N   # replay one seed
//	go test ./explore -run 'TestExplore$' -explore.replay='{...}' # replay a scenario
//	go test ./explore -v                       # the coverage and control tables
//
// A failing seed prints one line that replays it, the scenario, what went
// wrong with the story of each message concerned (the events its Consumer
// reported, its handler's outcomes, the server's receives and visibility
// changes; -explore.story=N lines), and a smaller scenario (fewer messages,
// options at their defaults, fewer events, faults and behaviours) that
// still fails, with its own replay line (-explore.shrink=N: how many
// failing seeds to shrink). A seed fixes the scenario; the goroutines'
// interleaving at one virtual instant is the runtime's, so a failure that
// depends on it may need a few runs (-explore.repeat=N runs each seed N
// times).
//
// Bugs already diagnosed and being fixed are set aside by knownIssue
// (known_test.go), each under its name, and listed at the end of a run;
// -explore.known=false fails on them (still labelled, and the seeds no
// known issue explains are listed and reported first). Each entry goes
// once its fix lands.
// -explore.strict (on by default) fails when New, or Run for what only the
// queue tells, accepts a pair of conflicting options.
//
// # Adding to it
//
// A new option joins the drawing in three places: a field of Options
// (scenario_test.go; nil is the default, which the shrinker restores),
// its draw in drawScenario, and its Option in consumerConfig
// (run_test.go, scenarioOptions, with another value in its range that a
// bundle gives first); a pair New (or Run) must refuse goes in conflicts,
// with the Options fields it is made of (the shrinker keeps them), its
// draw in drawConflict; what New would refuse, drawScenario avoids (and
// the shrinker's steps must not bring back: fitsConcurrency). A
// new behaviour of a handler joins behaviours and planFor. A new
// invariant is a check that can fail: give it a negative control.
//
// TestExploreControls switches on, one at a time, deliberately broken
// variants of the library (package internal/broken) and requires the right
// check to catch each within the seeds CI runs, on a seed whose scenario
// passes that check with the control off. A control is a broken.Mode, one
// broken.Is at the code path it breaks, and a row of controls
// (controls_test.go).
package explore
