package payload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/sqskit/sqsconsumer"
)

// Codec decodes a message body into a value. Decode must be safe for
// concurrent use; v is a non-nil pointer.
type Codec interface {
	Decode(data []byte, v any) error
}

// CodecFunc adapts a function to a Codec.
type CodecFunc func(data []byte, v any) error

// Decode calls f(data, v).
func (f CodecFunc) Decode(data []byte, v any) error { return f(data, v) }

// JSON is the default Codec: encoding/json. With DisallowUnknownFields, an
// object member that matches no field of the target is an error. Exactly
// one JSON value is allowed; trailing data is an error. The zero value is
// ready to use and safe for concurrent use.
type JSON struct {
	DisallowUnknownFields bool
}

// Decode decodes data into v.
func (c JSON) Decode(data []byte, v any) error {
	if !c.DisallowUnknownFields {
		return json.Unmarshal(data, v)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("data after the top-level value at byte %d", d.InputOffset())
	}
	return nil
}

// DecodeError says why a body could not be decoded into the handler's
// type. Handle returns it wrapped in sqsconsumer.Permanent: the same body
// fails the same way on every delivery.
type DecodeError struct {
	// Type is the Go type the body was decoded into, e.g. "main.Order".
	Type string
	// Field is the dotted path of the field that failed, e.g.
	// "items.qty", when the codec says (encoding/json does for type
	// errors); "" otherwise.
	Field string
	// Offset is the byte offset in the body where decoding failed, as the
	// codec reports it (encoding/json: the bytes read when it failed, just
	// past the offending character or value), or -1 when the codec does
	// not say.
	Offset int64
	// Err is the codec's error (or the value of a panic in it).
	Err error
}

func (e *DecodeError) Error() string {
	where := ""
	switch {
	case e.Field != "" && e.Offset >= 0:
		where = fmt.Sprintf(" (field %q, byte %d)", e.Field, e.Offset)
	case e.Field != "":
		where = fmt.Sprintf(" (field %q)", e.Field)
	case e.Offset >= 0:
		where = fmt.Sprintf(" (byte %d)", e.Offset)
	}
	return fmt.Sprintf("payload: cannot decode the body as %s%s: %v", e.Type, where, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// HandleOption configures Handle.
type HandleOption func(*handleConfig) error

type handleConfig struct {
	codec Codec
}

// WithCodec decodes bodies with c instead of encoding/json. A nil c is an
// error.
func WithCodec(c Codec) HandleOption {
	return func(cfg *handleConfig) error {
		if c == nil || isNilValue(c) {
			return errors.New("WithCodec: codec is nil")
		}
		cfg.codec = c
		return nil
	}
}

func isNilValue(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Interface, reflect.Slice, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// Handle turns f into a Handler that decodes each message's body into a T
// (with encoding/json unless WithCodec says otherwise) and calls f with it.
// Under [Unwrap] the body is the inner payload (the SNS message, the
// EventBridge detail).
//
// A body that does not decode is not handed to f: the handler fails with
// sqsconsumer.Permanent wrapping a *DecodeError that names the type, the
// field and the byte offset where decoding failed: the message belongs in
// the dead-letter queue, not in an endless retry (see the package doc). A
// panic in the codec is such an error too. f's own errors (and panics) are the
// Consumer's business as for any handler.
//
// The Handler is safe for concurrent use if f is. Errors (a nil f or an
// invalid option) wrap sqsconsumer.ErrInvalidOption.
func Handle[T any](f func(ctx context.Context, m *sqsconsumer.Message, v T) error, opts ...HandleOption) (sqsconsumer.Handler, error) {
	if f == nil {
		return nil, fmt.Errorf("%w: payload.Handle: handler function is nil", sqsconsumer.ErrInvalidOption)
	}
	cfg := handleConfig{codec: JSON{}}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: payload.Handle: nil option", sqsconsumer.ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("%w: payload.Handle: %v", sqsconsumer.ErrInvalidOption, err)
		}
	}
	typeName := reflect.TypeFor[T]().String()
	_, isJSON := cfg.codec.(JSON)
	return sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
		if m == nil {
			return sqsconsumer.Permanent(errors.New("payload: nil message"))
		}
		var v T
		if err := decode(cfg.codec, isJSON, m.Body, &v); err != nil {
			err.Type = typeName
			return sqsconsumer.Permanent(err)
		}
		return f(ctx, m, v)
	}), nil
}

// decode runs the codec, turning its error or panic into a DecodeError.
func decode(c Codec, isJSON bool, body string, v any) (derr *DecodeError) {
	defer func() {
		if p := recover(); p != nil {
			derr = &DecodeError{Offset: -1, Err: fmt.Errorf("the codec panicked: %v", p)}
		}
	}()
	err := c.Decode([]byte(body), v)
	if err == nil {
		return nil
	}
	d := &DecodeError{Offset: -1, Err: err}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		d.Field, d.Offset = te.Field, te.Offset
	case errors.As(err, &se):
		d.Offset = se.Offset
	case isJSON && len(body) == 0:
		d.Offset = 0
	}
	return d
}
