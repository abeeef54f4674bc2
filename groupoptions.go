package sqsconsumer

// maxGroupLimit is the largest WithGroupLimit.
const maxGroupLimit = 100_000

// WithFairDispatch chooses how a standard queue's messages that carry a
// MessageGroupId (a fair queue) share the handler slots. On (the default),
// a free slot goes to a waiting message of the group with the fewest
// handlers running in this Consumer, ties to the message that arrived
// first; a message without a group is a group of its own (none running),
// so such messages start in arrival order. A group's burst read ahead
// into the process then does not make the other groups' messages wait
// behind it: no group waits for a slot while another holds more than its
// share. It costs no SQS call, and a few map and heap operations (under
// the Consumer's flow lock) for each message with a group. Off, every
// message starts in arrival order, whatever its group. FIFO queues are
// not affected either way: each group's order rules them.
func WithFairDispatch(on bool) Option {
	return option(func(s *settings) { s.fifoDispatch = !on })
}

// WithGroupLimit caps how many handlers the messages of one message group
// may run at once in this Consumer, on a standard queue with fair
// dispatch (WithFairDispatch). Range 1 to 100,000; default none (0: fair
// dispatch alone, any group may take every free slot when nothing else
// waits).
//
// It is a hard cap: with n handlers of a group running, the group's next
// messages wait in the process, leased (their visibility renewed), even
// while slots are free, until one of the group's handlers returns. They
// count in the read-ahead bound (WithMaxReadAhead) but not in the
// read-ahead the Consumer keeps for its free slots, so the other groups'
// messages keep coming. A Consumer fed by one group only then runs at
// most n handlers. It bounds one Consumer: n across a fleet of k
// Consumers lets a group run up to k×n. Messages without a group are not
// capped, and FIFO queues ignore the cap.
func WithGroupLimit(n int) Option {
	return option(func(s *settings) {
		if n < 1 || n > maxGroupLimit {
			s.fail("WithGroupLimit(%d): must be from 1 to %d", n, maxGroupLimit)
			return
		}
		s.groupLimit = n
	})
}
