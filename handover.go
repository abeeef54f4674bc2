package sqsconsumer

import "time"

// handoverSlack bounds how long before its answer reached this process SQS
// may have handed a message over: the answer's way back, SQS's own work
// after the hand-over, and the client's decoding. Real SQS answers in
// 5-30 ms, so a second is a wide margin; it only shortens the first lease
// of a message that waited in a long poll by that much.
const handoverSlack = time.Second

// HandoverTime estimates, conservatively, when SQS handed over the messages
// of a ReceiveMessage request sent at sent whose answer arrived at answered:
// SQS starts a message's visibility timeout at that moment. A long poll
// answers as soon as it has a message (see "Amazon SQS short and long
// polling" in the SQS Developer Guide), so the hand-over lies just before
// the answer, not at the request: the estimate is one second before the
// answer, but never before the request was sent. It is never later than the
// real hand-over while the answer took less than a second to travel back,
// which covers any working network by a wide margin.
//
// A Consumer uses it for every lease; give it to WithReceivedAt when you
// receive messages yourself. It is a pure function, safe anywhere.
func HandoverTime(sent, answered time.Time) time.Time {
	t := answered.Add(-handoverSlack)
	if t.Before(sent) {
		return sent
	}
	return t
}
