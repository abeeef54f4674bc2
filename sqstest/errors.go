package sqstest

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Fault is an AWS error answer: the HTTP status, the error shape's short name (sent as
// __type "com.amazonaws.sqs#<Type>"), the legacy query code (sent in the
// x-amzn-query-error header; empty sends no header) and the message. Delay, when set,
// is waited before the answer (respecting the request's context).
//
// The aws-sdk-go-v2 client maps Type to a typed error (*types.QueueDoesNotExist, ...)
// when the SDK models it, else to *smithy.GenericAPIError whose ErrorCode() is
// QueryCode (or Type when QueryCode is empty).
type Fault struct {
	Status    int
	Type      string
	QueryCode string
	Message   string
	Delay     time.Duration
}

// Error makes a Fault usable as an error: the helpers of [Server] return faults.
func (f Fault) Error() string {
	return fmt.Sprintf("sqstest: %s: %s", f.Code(), f.Message)
}

// Code is what the Go SDK's ErrorCode() reports for this fault: the query code when
// there is one, else the shape name.
func (f Fault) Code() string {
	if f.QueryCode != "" {
		return f.QueryCode
	}
	return f.Type
}

// senderFault reports whether the fault is the caller's (4xx), as in SenderFault of a
// batch result entry and the ";Sender" suffix of x-amzn-query-error.
func (f Fault) senderFault() bool { return f.Status < 500 }

func (f Fault) withMessage(format string, args ...any) Fault {
	f.Message = fmt.Sprintf(format, args...)
	return f
}

// Ready-made faults with the status, shape and query code AWS uses: the HTTP status
// and awsQueryError code of each error shape in the SQS Smithy model (aws-sdk-go-v2
// service/sqs schemas/schemas.go).
// Use them with [Server.FailNext] and [Server.FailNextEntries]; change Message or Delay
// on a copy as needed.
var (
	FaultThrottled = Fault{Status: http.StatusForbidden, Type: "RequestThrottled",
		QueryCode: "RequestThrottled", Message: "Rate exceeded"}
	FaultInternalError = Fault{Status: http.StatusInternalServerError, Type: "InternalError",
		QueryCode: "InternalError", Message: "We encountered an internal error. Please try again."}
	FaultServiceUnavailable = Fault{Status: http.StatusServiceUnavailable, Type: "ServiceUnavailable",
		QueryCode: "ServiceUnavailable", Message: "Service is unable to handle request."}
	FaultMessageNotInflight = Fault{Status: http.StatusBadRequest, Type: "MessageNotInflight",
		QueryCode: "AWS.SimpleQueueService.MessageNotInflight"}
	FaultReceiptHandleIsInvalid = Fault{Status: http.StatusNotFound, Type: "ReceiptHandleIsInvalid",
		QueryCode: "ReceiptHandleIsInvalid", Message: "The input receipt handle is not a valid receipt handle."}
	FaultAccessDenied = Fault{Status: http.StatusForbidden, Type: "AccessDeniedException",
		QueryCode: "AccessDenied", Message: "Access to the resource https://sqs.us-east-1.amazonaws.com/ is denied."}
	FaultQueueDoesNotExist = Fault{Status: http.StatusBadRequest, Type: "QueueDoesNotExist",
		QueryCode: "AWS.SimpleQueueService.NonExistentQueue", Message: "The specified queue does not exist."}
	FaultOverLimit = Fault{Status: http.StatusForbidden, Type: "OverLimit",
		QueryCode: "OverLimit", Message: "Too many messages in flight."}
	FaultKmsThrottled = Fault{Status: http.StatusBadRequest, Type: "KmsThrottled",
		QueryCode: "KMS.ThrottlingException", Message: "Rate exceeded for KMS key."}
	FaultInvalidParameterValue = Fault{Status: http.StatusBadRequest, Type: "InvalidParameterValueException",
		QueryCode: "InvalidParameterValue", Message: "Invalid parameter value."}
)

// Error shapes the server answers with on its own. The texts are AWS's where a real
// AWS response has been recorded (LocalStack's AWS-validated SQS tests); the rest are
// guesses listed in unconfirmed.go.
var (
	errQueueDoesNotExist = FaultQueueDoesNotExist
	errInvalidParameter  = Fault{Status: http.StatusBadRequest, Type: "InvalidParameterValueException",
		QueryCode: "InvalidParameterValue"}
	errMissingParameter = Fault{Status: http.StatusBadRequest, Type: "MissingRequiredParameterException",
		QueryCode: "MissingParameter"}
	errReceiptHandleIsInvalid = Fault{Status: http.StatusNotFound, Type: "ReceiptHandleIsInvalid",
		QueryCode: "ReceiptHandleIsInvalid"}
	errTooManyEntries = Fault{Status: http.StatusBadRequest, Type: "TooManyEntriesInBatchRequest",
		QueryCode: "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"}
	errEmptyBatch = Fault{Status: http.StatusBadRequest, Type: "EmptyBatchRequest",
		QueryCode: "AWS.SimpleQueueService.EmptyBatchRequest"}
	errIDsNotDistinct = Fault{Status: http.StatusBadRequest, Type: "BatchEntryIdsNotDistinct",
		QueryCode: "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"}
	errInvalidBatchEntryID = Fault{Status: http.StatusBadRequest, Type: "InvalidBatchEntryId",
		QueryCode: "AWS.SimpleQueueService.InvalidBatchEntryId",
		Message:   "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long."}
	errBatchTooLong = Fault{Status: http.StatusBadRequest, Type: "BatchRequestTooLong",
		QueryCode: "AWS.SimpleQueueService.BatchRequestTooLong"}
	errInvalidAttributeName = Fault{Status: http.StatusBadRequest, Type: "InvalidAttributeName",
		QueryCode: "InvalidAttributeName"}
	errInvalidAttributeValue = Fault{Status: http.StatusBadRequest, Type: "InvalidAttributeValue",
		QueryCode: "InvalidAttributeValue"}
	errQueueNameExists = Fault{Status: http.StatusBadRequest, Type: "QueueNameExists",
		QueryCode: "QueueAlreadyExists"}
	errQueueDeletedRecently = Fault{Status: http.StatusBadRequest, Type: "QueueDeletedRecently",
		QueryCode: "AWS.SimpleQueueService.QueueDeletedRecently",
		Message:   "You must wait 60 seconds after deleting a queue before you can create another with the same name."}
	errPurgeInProgress = Fault{Status: http.StatusForbidden, Type: "PurgeQueueInProgress",
		QueryCode: "AWS.SimpleQueueService.PurgeQueueInProgress"}
	errInvalidMessageContents = Fault{Status: http.StatusBadRequest, Type: "InvalidMessageContents",
		Message: "Invalid characters found. Valid characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF"}
	errServerClosed = Fault{Status: http.StatusServiceUnavailable, Type: "ServiceUnavailable",
		QueryCode: "ServiceUnavailable", Message: "sqstest: server closed"}
)

// invalidValue is AWS's InvalidParameterValue wording for one parameter value.
func invalidValue(value any, param, reason string) Fault {
	return errInvalidParameter.withMessage("Value %v for parameter %s is invalid. Reason: %s", value, param, reason)
}

func missingParam(name string) Fault {
	return errMissingParameter.withMessage("The request must contain the parameter %s.", name)
}

// Receipt-handle answers; the cases are listed in the package documentation (doc.go).
func errHandleNotValid(h string) Fault {
	return errReceiptHandleIsInvalid.withMessage("The input receipt handle %q is not a valid receipt handle.", h)
}

func errHandleNotAvailable(h string) Fault {
	return invalidValue(h, "ReceiptHandle", "Message does not exist or is not available for visibility timeout change.")
}

func errHandleExpired(h string) Fault {
	return invalidValue(h, "ReceiptHandle", "The receipt handle has expired.")
}

func errCeiling(timeout int64) Fault {
	return invalidValue(timeout, "VisibilityTimeout", "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]")
}

// batchEntryFault is how a per-entry failure is reported in a batch result's Failed[].
type batchEntryFault struct {
	ID          string `json:"Id"`
	SenderFault bool   `json:"SenderFault"`
	Code        string `json:"Code"`
	Message     string `json:"Message,omitempty"`
}

func entryFault(id string, f Fault) batchEntryFault {
	return batchEntryFault{ID: id, SenderFault: f.senderFault(), Code: f.Code(), Message: f.Message}
}

// errorBody is the AWS JSON 1.0 error document.
type errorBody struct {
	Type    string `json:"__type"`
	Message string `json:"message,omitempty"`
}

func (f Fault) header(h http.Header) {
	if f.QueryCode != "" {
		fault := "Sender"
		if !f.senderFault() {
			fault = "Receiver"
		}
		h.Set("x-amzn-query-error", f.QueryCode+";"+fault)
	}
}

func (f Fault) wireType() string {
	if f.Type == "" {
		return errorTypePrefix + "InternalError"
	}
	if containsHash(f.Type) {
		return f.Type
	}
	return errorTypePrefix + f.Type
}

func containsHash(s string) bool {
	for i := range len(s) {
		if s[i] == '#' {
			return true
		}
	}
	return false
}

const errorTypePrefix = "com.amazonaws.sqs#"

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
