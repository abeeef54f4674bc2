package sqsconsumer

// maxGroupLimit is the largest WithGroupLimit.
const maxGroupLimit = 100_000

// WithFairDispatch chooses how a standard queue's messages that carry a
// MessageGroupId (a fair queue: each group is a tenant) share the handler
// slots. On (the default):
//
//   - A free slot goes to a waiting message of the group with the fewest
//     handlers running in this Consumer, ties to the message that arrived
//     first. A message without a group is a tenant of its own, running
//     none, so such messages start in arrival order. No group waits for a
//     slot while another holds more than its share and its own messages
//     wait: a burst of one group read ahead into the process no longer
//     makes the others' messages wait behind it.
//   - The group holding the most slot time leaves headroom while other
//     tenants are active: it may hold at most the concurrency less 1 +
//     twice the slots the others held on average over about the last
//     minute (rounded up), and never less than half the slots. Handlers a
//     burst started together finish together, so without it a quiet
//     tenant's message could wait a whole handler time for a slot. The
//     headroom is worked out at most once a second; a Consumer fed by one
//     group alone keeps every slot for it.
//
// It costs no SQS call: a few map and heap operations under the
// Consumer's flow lock for each message with a group. Off, every message
// starts in arrival order, whatever its group. On a FIFO queue each
// group's order rules, so the option would do nothing there: New refuses
// it for a URL ending in ".fifo", and Run for a queue whose FifoQueue
// attribute is true. Off, WithGroupLimit is refused (it needs fair
// dispatch). See also WithGroupLimit, and Stats.TopGroups for the groups
// holding the most.
func WithFairDispatch(on bool) Option {
	return option(func(s *settings) { s.fifoDispatch, s.fairSet = !on, true })
}

// WithGroupLimit caps how many handlers the messages of one message group
// may run at once in this Consumer, on a standard queue with fair
// dispatch (WithFairDispatch). Range 1 to 100,000, and below
// WithConcurrency (a cap at or above it would do nothing); default none
// (0: fair dispatch and its headroom alone). Refused with
// WithFairDispatch(false), and on a FIFO queue (at New for a URL ending in
// ".fifo", else at Run), where it would do nothing.
//
// It is a hard cap: with n handlers of a group running, the group's next
// messages wait in the process, leased (their visibility renewed), even
// while slots are free, until one of the group's handlers returns. (They
// are not handed back: measured by bench/fairness, handing them back
// made them wait longer and nearly doubled the calls per message.) They
// count as read ahead, so the group's backlog is received only as fast
// as it runs; while slots stay free that only other groups may take, one
// receive at a time still goes out, at most one every mean handler time
// (at least a round trip, at most a second), within WithMaxReadAhead's
// bound, so that the other groups' messages keep coming. A Consumer fed
// by one group only then runs at most n handlers. It bounds one Consumer:
// k Consumers let a group run up to k×n. Messages without a group are
// not capped.
func WithGroupLimit(n int) Option {
	return option(func(s *settings) {
		if n < 1 || n > maxGroupLimit {
			s.fail("WithGroupLimit(%d): must be from 1 to %d", n, maxGroupLimit)
			return
		}
		s.groupLimit = n
	})
}
