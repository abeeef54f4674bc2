// Package scalesim simulates a worker service that an autoscaler scales on one SQS
// queue, in virtual time, to compare scaling policies (issue 26): our signal
// (sqsconsumer's Consumer.Scaling), KEDA's aws-sqs-queue formula and AWS's
// backlog-per-instance target tracking.
//
// A run ([Run]) happens in a testing/synctest bubble against one in-memory sqstest
// queue. Each replica is a real sqsconsumer.Consumer, started in a goroutine of its
// own and joined before Run returns; its handler records the wait from the
// message's SentTimestamp to its start and sleeps (in virtual time) for a lognormal
// handler time. Producers send at the [Trace]'s rate as a Poisson process. The
// autoscaler model is ECS-like: a decision every minute; a new replica serves after
// a start delay of 30–60 s (seeded, uniform); scale-out at once; scale-in only after
// a cooldown of 5 min since the last scaling activity (ECS target tracking's default
// cooldowns), newest replicas first, each stopped gracefully (its Run's context
// cancelled: the Consumer releases the messages it holds and lets running handlers
// finish); 1 to 100 replicas.
//
// The queue counts for the baselines come from GetQueueAttributes on the sqstest
// queue, as the real scalers read them. Both baselines take AWS's "acceptable
// backlog per instance" (acceptable latency / average processing time) times the
// replica's concurrency, since a replica works on that many messages at once: KEDA
// as its queueLength, target tracking as its target value.
//
// Cost: a run sustains about 4,000 messages of virtual throughput per CPU second at
// full rate without the race detector, and about a third of that per message with
// one handler slot per replica (each message then takes a receive and a delete of
// its own through the SDK, whose middleware is most of the CPU). [Config.Scale]
// divides rates, bursts and slots by k, which keeps replica counts and waits about
// the same: the tests run at 1/80 (one slot per replica, 25 msg/s for a 2,000 msg/s
// step); bench/scaling runs any scale and prints the README's table.
package scalesim
