package payload

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
)

type order struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Items       []struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	} `json:"items"`
}

// typed runs body through Handle[order] and returns the order f saw (nil
// if not called) and the error.
func typed(t *testing.T, body string, opts ...HandleOption) (*order, error) {
	t.Helper()
	var got *order
	h, err := Handle(func(ctx context.Context, m *sqsconsumer.Message, o order) error {
		got = &o
		return nil
	}, opts...)
	require.NoError(t, err)
	err = h.HandleMessage(context.Background(), msg(body))
	return got, err
}

func TestHandleDecodes(t *testing.T) {
	t.Parallel()
	got, err := typed(t, `{"order_id":"o-1","amount_cents":250,"items":[{"sku":"A","qty":2}],"extra":true}`)
	require.NoError(t, err)
	require.Equal(t, "o-1", got.OrderID)
	require.Equal(t, int64(250), got.AmountCents)
	require.Equal(t, 2, got.Items[0].Qty)
}

func TestHandleDecodeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		body   string
		opts   []HandleOption
		field  string
		offset int64
		text   string
	}{
		{"wrong type", `{"order_id":"o-1","amount_cents":"lots"}`, nil, "amount_cents", 39, `payload: cannot decode the body as payload.order (field "amount_cents", byte 39): json: cannot unmarshal string`},
		{"nested wrong type", `{"items":[{"sku":"A","qty":1},{"sku":"B","qty":1.5}]}`, nil, "items.qty", 50, `(field "items.qty", byte 50)`},
		{"syntax", `{"order_id":"o-1",}`, nil, "", 19, `payload.order (byte 19): invalid character '}'`},
		{"truncated", `{"order_id":"o-`, nil, "", 15, "unexpected end of JSON input"},
		{"empty", ``, nil, "", 0, "(byte 0): unexpected end of JSON input"},
		{"not an object", `[1]`, nil, "", 1, "cannot unmarshal array"},
		{"unknown field, strict", `{"order_id":"o-1","colour":"red"}`, []HandleOption{WithCodec(JSON{DisallowUnknownFields: true})}, "", -1, `json: unknown field "colour"`},
		{"trailing data, strict", `{"order_id":"o-1"} {}`, []HandleOption{WithCodec(JSON{DisallowUnknownFields: true})}, "", -1, "data after the top-level value"},
		{"codec error", `x`, []HandleOption{WithCodec(CodecFunc(func([]byte, any) error { return errors.New("bad magic") }))}, "", -1, "payload.order: bad magic"},
		{"codec panic", `x`, []HandleOption{WithCodec(CodecFunc(func([]byte, any) error { panic("oops") }))}, "", -1, "the codec panicked: oops"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := typed(t, tt.body, tt.opts...)
			require.Nil(t, got, "f must not be called")
			require.True(t, sqsconsumer.IsPermanent(err), "%v", err)
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			require.Equal(t, "payload.order", de.Type)
			require.Equal(t, tt.field, de.Field)
			require.Equal(t, tt.offset, de.Offset)
			require.Contains(t, err.Error(), tt.text)
		})
	}
}

func TestHandleCustomCodec(t *testing.T) {
	t.Parallel()
	// A codec for "id=amount" bodies.
	kv := CodecFunc(func(data []byte, v any) error {
		o := v.(*order)
		id, _, ok := strings.Cut(string(data), "=")
		if !ok {
			return errors.New("no '='")
		}
		o.OrderID = id
		return nil
	})
	got, err := typed(t, "o-5=100", WithCodec(kv))
	require.NoError(t, err)
	require.Equal(t, "o-5", got.OrderID)
}

func TestHandleOptions(t *testing.T) {
	t.Parallel()
	h, err := Handle[order](nil)
	require.Nil(t, h)
	require.ErrorIs(t, err, sqsconsumer.ErrInvalidOption)
	require.ErrorContains(t, err, "handler function is nil")

	f := func(context.Context, *sqsconsumer.Message, order) error { return nil }
	_, err = Handle(f, WithCodec(nil))
	require.ErrorContains(t, err, "WithCodec: codec is nil")
	_, err = Handle(f, WithCodec(CodecFunc(nil)))
	require.ErrorContains(t, err, "WithCodec: codec is nil")
	_, err = Handle(f, nil)
	require.ErrorContains(t, err, "nil option")
}

// f's own errors pass through untouched: they are not permanent unless f
// says so.
func TestHandlePassesErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	h, err := Handle(func(ctx context.Context, m *sqsconsumer.Message, v map[string]any) error { return boom })
	require.NoError(t, err)
	err = h.HandleMessage(context.Background(), msg(`{}`))
	require.Same(t, boom, err)
	err = h.HandleMessage(context.Background(), nil)
	require.True(t, sqsconsumer.IsPermanent(err))
}

// Under Unwrap, Handle decodes the inner payload and the envelope is at
// hand.
func TestHandleUnderUnwrap(t *testing.T) {
	t.Parallel()
	mw, err := Unwrap(SNS)
	require.NoError(t, err)
	var topic string
	var got order
	h, err := Handle(func(ctx context.Context, m *sqsconsumer.Message, o order) error {
		topic, got = FromContext(ctx).SNS.TopicARN, o
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, mw(h).HandleMessage(context.Background(), msg(snsOrder)))
	require.Equal(t, "arn:aws:sns:eu-west-1:210987654321:orders", topic)
	require.Equal(t, order{OrderID: "o-77", AmountCents: 1250}, got)
}
