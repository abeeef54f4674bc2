// Package sqstest is an in-memory Amazon SQS server for tests, in the spirit of
// net/http/httptest: it speaks the AWS JSON 1.0 protocol exactly as the aws-sdk-go-v2
// sqs client uses it, and its time comes only from time.Now and timers, so inside a
// testing/synctest bubble hours of virtual time pass in milliseconds.
package sqstest
