package sqsclient

import "github.com/aws/aws-sdk-go-v2/aws"

// Unwrap returns the HTTP client under one this package wrapped, and false
// for any other.
func Unwrap(c aws.HTTPClient) (aws.HTTPClient, bool) {
	r, ok := c.(rebuffering)
	return r.next, ok
}
