// Package longhandlers holds a measurement, not a library: its test runs a
// Consumer over 1,000 messages whose handlers each take five times the lease,
// inside a testing/synctest bubble against the in-memory sqstest server, and
// checks that no message is handled twice while the renewals go out in
// 10-entry batches.
//
//	go test -v -run LongHandlers ./bench/longhandlers
//
// prints, for each scenario, the renewals, the ChangeMessageVisibilityBatch
// calls they took and the ratio of the two. A synctest bubble needs a
// *testing.T, so the figures come from a test's log rather than from a
// benchmark's metrics; virtual time makes the hours of simulated work take
// a second or two.
package longhandlers
