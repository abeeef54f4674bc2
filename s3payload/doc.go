// Package s3payload reads and writes message payloads stored in Amazon S3
// in the format of the Amazon SQS Extended Client Libraries for Java
// (github.com/awslabs/amazon-sqs-java-extended-client-lib) and Python
// (github.com/awslabs/amazon-sqs-python-extended-client-lib), so Go
// consumers read what Java and Python producers offload, and the other way
// round.
//
// A producer whose message is over SQS's size limit (or a threshold)
// stores the body in S3 and sends a pointer instead: a body such as
//
//	["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"BUCKET","s3Key":"KEY"}]
//
// with a Number message attribute, ExtendedPayloadSize or (the original
// name, still the Java client's default) SQSLargePayloadSize, holding the
// payload's size in bytes. [Reader] turns such messages back into their
// payloads before the handler runs; [Sender] writes them.
//
//	r, err := s3payload.NewReader(s3.NewFromConfig(cfg), s3payload.WithBuckets("my-payloads"))
//	c, err := sqsconsumer.New(client, queueURL, handler,
//		sqsconsumer.WithMiddleware(r.Middleware()), sqsconsumer.WithObserver(r))
//
// A Reader reads only from the buckets it is given ([WithBuckets]) and
// only up to a size ([WithMaxSize]): the body of a message is untrusted
// input, and must never make the consumer read an arbitrary object with
// its credentials. Messages without the size attribute cost nothing. A
// payload that cannot be read fails the message (permanently when the
// object is gone or the pointer is bad, see [FetchError]); the message is
// never deleted for it. The S3 object is deleted only with
// [WithDeleteAfterDelete], and only after SQS confirmed the deletion of
// its message.
//
// Messages from an SNS topic whose publisher used the SNS extended client
// carry the same pointer; with raw message delivery off, put
// payload.Unwrap(payload.SNS) before the Reader's middleware.
//
// The module is separate from github.com/sqskit/sqsconsumer so that only
// programs that use it depend on the S3 SDK.
package s3payload
