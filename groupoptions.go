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
//   - The heavy groups leave headroom while other tenants are active,
//     however many heavy groups there are. A group is heavy while it
//     holds more than a tenth of the slot time over about the last minute
//     (the groups Stats.NoisyGroups counts). The heavy groups together
//     may hold at most the concurrency less a reserve of 1 + twice the
//     slots the other tenants (every other group, and the messages
//     without a group) held on average over that minute (rounded up),
//     and never less than half the slots; among themselves they share
//     those slots by the rule above. Handlers a burst started together
//     finish together, so without the reserve a quiet tenant's message
//     could wait a whole handler time for a slot. It is worked out at
//     most every 100 ms; heavy groups alone (no other tenant active:
//     under 0.05 slots on average) keep every slot.
//   - While the reserve holds the heavy groups' messages back and its
//     slots are free, the next receive goes out at most 20 ms after the
//     last one was sent (or once it is answered, if later: one at a
//     time), asking for what the
//     read-ahead lacks and at least 1 message: SQS hands a fair queue's
//     quiet tenants out first, so a quiet tenant's message waits in SQS
//     at most that long rather than until the next wave of slots. It
//     costs receives of fewer messages during a heavy tenant's backlog
//     (measured by bench/fairness: 1.16 to 1.26 times the calls per
//     message of arrival order, at the same throughput).
//
// It costs a few map and heap operations under the Consumer's flow lock
// for each message with a group (O(log groups)). Off, every message
// starts in arrival order, whatever its group, and receives keep the
// read-ahead's pace. FIFO queues are not affected either way: each
// group's order rules them. See also WithGroupLimit, and Stats.TopGroups
// for the groups holding the most.
func WithFairDispatch(on bool) Option {
	return option(func(s *settings) { s.fifoDispatch = !on })
}

// WithGroupLimit caps how many handlers the messages of one message group
// may run at once in this Consumer, on a standard queue with fair
// dispatch (WithFairDispatch). Range 1 to 100,000; default none (0: fair
// dispatch and its headroom alone).
//
// It is a hard cap: with n handlers of a group running, the group's next
// messages wait in the process, leased (their visibility renewed), even
// while slots are free, until one of the group's handlers returns. (They
// are not handed back: measured by bench/fairness, handing them back
// made them wait longer and cost 1.3 to 1.4 times the calls per message.) They
// count as read ahead, so the group's backlog is received only as fast
// as it runs; while slots stay free that only other groups may take, one
// receive at a time still goes out, asking for what the read-ahead lacks
// and at least 1 message, within WithMaxReadAhead's bound, so that the
// other groups' messages keep coming: 20 ms after the last one while
// other tenants are active (as for fair dispatch's reserve), otherwise a
// mean handler time after it (at least a round trip, at most a second).
// A Consumer fed by one group only then runs at most n handlers. It
// bounds one Consumer: k Consumers let a group run up to k×n. The heavy
// groups' shared cap (WithFairDispatch) applies as well; the lower
// binds. Messages without a group are not capped, and FIFO queues ignore
// the cap.
func WithGroupLimit(n int) Option {
	return option(func(s *settings) {
		if n < 1 || n > maxGroupLimit {
			s.fail("WithGroupLimit(%d): must be from 1 to %d", n, maxGroupLimit)
			return
		}
		s.groupLimit = n
	})
}
