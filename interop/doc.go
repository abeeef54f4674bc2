// Package interop is a differential test suite: it runs the same SQS
// scenarios against [github.com/sqskit/sqsconsumer/sqstest] and against
// fauxqs, an independent SQS emulator, each through a real *sqs.Client over
// real loopback sockets, and compares what the client observes.
//
// The differential tests run only when SQSCONSUMER_FAUXQS_ENDPOINT holds
// fauxqs's endpoint; .ci/setup.d/10-fauxqs.sh installs and starts fauxqs and
// sets it. Without it they skip, and TestRecordedAnswers, the table of answers
// recorded from real AWS (recorded_test.go), runs against sqstest alone:
//
//	source .ci/setup.d/10-fauxqs.sh && go test -race ./interop/
//
// Rules (see compareRecords in harness_test.go): where AWS's answer is known
// (from AWS's documentation, the SQS model in aws-sdk-go-v2, or real AWS
// responses recorded by LocalStack's AWS-validated tests), sqstest must give
// it; fauxqs must agree with sqstest unless the difference is a known fauxqs
// divergence, listed with its source in divergences_test.go and logged rather
// than failed.
//
// Since the servers run on the wall clock, scenarios use real visibility
// timeouts and delays of 1–2 s; the package has no non-test code.
package interop
