package payload

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer"
)

// checkAgainstStdlib compares scanObject on s with encoding/json: both
// accept or both reject, and on acceptance every member's key and raw
// value agree (the last of a repeated key, as encoding/json keeps it).
func checkAgainstStdlib(t *testing.T, s string) {
	t.Helper()
	obj, err := scanObject(s)
	var want map[string]json.RawMessage
	werr := json.Unmarshal([]byte(s), &want)
	if werr == nil && want == nil {
		werr = errNotString // the JSON null: not an object
	}
	if (err == nil) != (werr == nil) {
		t.Fatalf("scanObject(%q): err %v, encoding/json: %v", s, err, werr)
	}
	if err != nil {
		return
	}
	require.Len(t, want, countKeys(obj), "keys of %q", s)
	for k, raw := range want {
		got, ok := obj.get(k)
		require.True(t, ok, "key %q of %q", k, s)
		require.Equal(t, string(raw), got, "value of %q in %q", k, s)
		if strings.HasPrefix(got, `"`) {
			var ws string
			require.NoError(t, json.Unmarshal(raw, &ws))
			gs, err := unquote(got, 0)
			require.NoError(t, err)
			require.Equal(t, ws, gs, "string %s", got)
			ss, ok, err := obj.str(k) // through the member's plain flag
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, ws, ss, "string %s", got)
		}
	}
}

func countKeys(o object) int {
	seen := map[string]bool{}
	for _, m := range o {
		seen[m.key] = true
	}
	return len(seen)
}

func TestScanObject(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		snsOrder, snsFIFO, snsConfirmation, ebEvent, s3Put, s3Test,
		`{}`, ` { } `, `{"a":1,"a":2}`, `{"a":-0.5e+10,"b":[true,false,null,{"c":[]}]}`,
		`{"esc":"\ud83d\ude00 \ud800 \udc00x \u00e9\n\t\/\\\""}`, "{\"bad utf8\":\"\xff\xfe\"}",
		`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":-}`, `{"a":tru}`, `{"a" 1}`, `{"a":1,}`, `{,}`,
		`{"a":"\x"}`, "{\"a\":\"\x01\"}", `{"a":"\u12"}`, `{"a":1} x`, `[]`, `null`, ``, `{"a":[1,]}`, `{"a":{"b":}}`,
		`{"a":"unterminated`, `{"a":[`, `{"a"`, `{1:2}`,
	} {
		checkAgainstStdlib(t, s)
	}
}

func TestScanDepth(t *testing.T) {
	t.Parallel()
	deep := `{"a":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + `}`
	_, err := scanObject(deep)
	require.ErrorContains(t, err, "nested deeper than 10000 levels")
	ok := `{"a":` + strings.Repeat("[", maxDepth-1) + strings.Repeat("]", maxDepth-1) + `}`
	_, err = scanObject(ok)
	require.NoError(t, err)
}

// FuzzScanObject checks the scanner against encoding/json on arbitrary
// input.
func FuzzScanObject(f *testing.F) {
	for _, s := range []string{snsOrder, snsFIFO, ebEvent, s3Put, s3Test, `{"a":"\ud83d\ude00"}`, `{"a":[1,{"b":null}]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkAgainstStdlib(t, s)
	})
}

// FuzzUnwrap feeds arbitrary bodies to every layer list: no panic, and
// every error is a permanent *EnvelopeError; Auto never fails a body that
// claims no envelope.
func FuzzUnwrap(f *testing.F) {
	for _, s := range []string{snsOrder, snsFIFO, snsConfirmation, ebEvent, s3Put, s3Test, `{"a":1}`, "plain"} {
		f.Add(s)
	}
	lists := [][]Format{{Auto}, {SNS}, {SNSRaw}, {EventBridge}, {S3Events}, {SNS, S3Events}, {SNS, EventBridge}, {SNSRaw, EventBridge}}
	mws := make([]sqsconsumer.Middleware, len(lists))
	for i, l := range lists {
		mw, err := Unwrap(l...)
		if err != nil {
			f.Fatal(err)
		}
		mws[i] = mw
	}
	f.Fuzz(func(t *testing.T, body string) {
		for i, mw := range mws {
			called := false
			err := mw(sqsconsumer.HandlerFunc(func(ctx context.Context, m *sqsconsumer.Message) error {
				called = true
				if FromContext(ctx) == nil {
					t.Fatal("no envelope in the context")
				}
				return nil
			})).HandleMessage(context.Background(), msg(body))
			if err != nil {
				var ee *EnvelopeError
				if !sqsconsumer.IsPermanent(err) || !asEnvelopeError(err, &ee) {
					t.Fatalf("%v: error %v is not a permanent EnvelopeError", lists[i], err)
				}
				if called {
					t.Fatalf("%v: handler called and error %v", lists[i], err)
				}
				if lists[i][0] == Auto {
					o, serr := scanObject(body)
					if serr != nil || detect(o) == 0 {
						t.Fatalf("Auto failed a body that claims nothing: %q: %v", body, err)
					}
				}
			}
		}
	})
}

func asEnvelopeError(err error, target **EnvelopeError) bool {
	for err != nil {
		if e, ok := err.(*EnvelopeError); ok {
			*target = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// The scanner's unquote agrees with encoding/json on invalid UTF-8 and
// lone surrogates.
func TestUnquoteReplacement(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"\"\xff\"", `"\ud800"`, `"\udc00\ud800"`, `"\ud800\u0041"`, "\"a\xc3\"", `"\u0000"`} {
		var want string
		require.NoError(t, json.Unmarshal([]byte(raw), &want))
		got, err := unquote(raw, 0)
		require.NoError(t, err)
		require.True(t, bytes.Equal([]byte(want), []byte(got)), "%q: got %q, want %q", raw, got, want)
	}
}

func TestSpecial8(t *testing.T) {
	t.Parallel()
	for c := 0; c < 256; c++ {
		for pos := range 8 {
			b := []byte("abcdefgh")
			b[pos] = byte(c)
			want := c < 0x20 || c == '"' || c == '\\' || c >= 0x80
			require.Equal(t, want, special8(string(b)), "byte 0x%02x at %d", c, pos)
		}
	}
	require.False(t, special8("az AZ09!~"[:8]))
	require.True(t, special8("abcdefgé"[:8]))
}
