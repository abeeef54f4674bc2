package payload

// Fixtures follow the structures AWS documents, with values of our own:
//
//   - SNS to SQS, raw delivery off:
//     https://docs.aws.amazon.com/sns/latest/dg/sns-message-and-json-formats.html
//     and https://docs.aws.amazon.com/sns/latest/dg/sns-sqs-as-subscriber.html
//   - raw delivery: https://docs.aws.amazon.com/sns/latest/dg/sns-large-payload-raw-message-delivery.html
//   - EventBridge: https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-events-structure.html
//   - S3 notifications and the test event:
//     https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html

// snsOrder is an SNS notification as a queue subscribed to a standard
// topic receives it: pretty-printed as SNS sends it, with a subject and
// three message attributes, one binary.
const snsOrder = `{
  "Type" : "Notification",
  "MessageId" : "6b1f0a52-41d7-5c3e-9a0e-2f7c1d9e8b40",
  "TopicArn" : "arn:aws:sns:eu-west-1:210987654321:orders",
  "Subject" : "order placed",
  "Message" : "{\"order_id\":\"o-77\",\"amount_cents\":1250,\"note\":\"caf\u00e9 \\\"deluxe\\\"\"}",
  "Timestamp" : "2026-03-14T09:26:53.589Z",
  "SignatureVersion" : "1",
  "Signature" : "c2lnbmF0dXJlIG9mIG91ciBvd24gbWFraW5nLCBub3QgYSByZWFsIG9uZQ==",
  "SigningCertURL" : "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-0000000000000000000000000000000a.pem",
  "UnsubscribeURL" : "https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=arn:aws:sns:eu-west-1:210987654321:orders:0e8a4c1f-9d3b-4a7e-b2c5-6f1d8e9a0b3c",
  "MessageAttributes" : {
    "tenant" : {"Type":"String","Value":"acme"},
    "priority" : {"Type":"Number","Value":"3"},
    "checksum" : {"Type":"Binary","Value":"AQID"}
  }
}`

// snsFIFO is a notification from a FIFO topic: a sequence number, no
// subject, no attributes.
const snsFIFO = `{"Type":"Notification","MessageId":"0d2c1b4a-7e6f-5a8b-9c0d-1e2f3a4b5c6d","SequenceNumber":"10000000000000003000","TopicArn":"arn:aws:sns:us-east-2:210987654321:ledger.fifo","Message":"entry 3","Timestamp":"2026-03-14T09:30:00.001Z","UnsubscribeURL":"https://sns.us-east-2.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=arn:aws:sns:us-east-2:210987654321:ledger.fifo:7a8b9c0d-1e2f-3a4b-5c6d-7e8f9a0b1c2d","SignatureVersion":"2","Signature":"b3RoZXIgc2lnbmF0dXJl","SigningCertURL":"https://sns.us-east-2.amazonaws.com/SimpleNotificationService-0000000000000000000000000000000b.pem"}`

// snsConfirmation is the message a queue in another account receives
// when it is subscribed to a topic.
const snsConfirmation = `{"Type":"SubscriptionConfirmation","MessageId":"3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f","Token":"2336412f37fb687f5d51e6e2425a8a5873f0d6e4","TopicArn":"arn:aws:sns:us-east-1:210987654321:shared","Message":"You have chosen to subscribe to the topic arn:aws:sns:us-east-1:210987654321:shared.\nTo confirm the subscription, visit the SubscribeURL included in this message.","SubscribeURL":"https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=arn:aws:sns:us-east-1:210987654321:shared&Token=2336412f37fb687f5d51e6e2425a8a5873f0d6e4","Timestamp":"2026-03-14T08:00:00.000Z","SignatureVersion":"1","Signature":"Y29uZmlybQ==","SigningCertURL":"https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000000000000000000000000000000c.pem"}`

// ebEvent is an EventBridge event from a custom application source, as a
// rule's SQS target receives it.
const ebEvent = `{"version":"0","id":"5e9a1c3b-2d4f-6a8b-0c1e-3f5a7b9d1e2f","detail-type":"Invoice Paid","source":"com.example.billing","account":"210987654321","time":"2026-03-14T10:15:30Z","region":"ap-southeast-2","resources":["arn:aws:billing::210987654321:invoice/inv-9"],"detail":{"invoice_id":"inv-9","amount_cents":4200}}`

// s3Put is a notification for an object created with PUT, whose key has
// a space and a plus sign, as S3 encodes them.
const s3Put = `{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-west-2","eventTime":"2026-03-14T11:00:00.123Z","eventName":"ObjectCreated:Put","userIdentity":{"principalId":"AWS:AIDAEXAMPLEPRINCIPAL"},"requestParameters":{"sourceIPAddress":"198.51.100.7"},"responseElements":{"x-amz-request-id":"C3D13FE58DE4C810","x-amz-id-2":"FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V5Wp6S7S/JRWeUWerMUE5JgHvANOjpD"},"s3":{"s3SchemaVersion":"1.0","configurationId":"uploads-to-queue","bucket":{"name":"incoming-scans","ownerIdentity":{"principalId":"A3NL1KOZZKExample"},"arn":"arn:aws:s3:::incoming-scans"},"object":{"key":"2026/red+flower%2Bleaf.jpg","size":52431,"eTag":"0f1e2d3c4b5a69788796a5b4c3d2e1f0","versionId":"096fKKXTRTtl3on89fVO.nfljtsv6qko","sequencer":"0055AED6DCD90281E5"}}}]}`

// s3Test is the message S3 sends once when a notification configuration
// is saved.
const s3Test = `{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2026-03-14T10:59:58.012Z","Bucket":"incoming-scans","RequestId":"7A1B2C3D4E5F6A7B","HostId":"Zm9yIHRlc3RzIG9ubHksIG5vdCBhIHJlYWwgaG9zdCBJRA=="}`
