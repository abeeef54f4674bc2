package payload

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is a small JSON scanner for the envelopes' top level. An
// envelope is read once per message, so it must cost little: the scanner
// finds each member of an object without building a map or reflecting on a
// struct, and a string without escapes is returned as a substring of the
// body, with no copy. It accepts exactly the JSON of RFC 8259 (the fuzz
// target FuzzScanObject checks it against encoding/json): every value it
// skips is validated, so a body it accepts is valid JSON.

// maxDepth bounds the nesting of arrays and objects, as encoding/json does.
const maxDepth = 10000

// member is one member of a JSON object: its key, unescaped, and its value
// as raw JSON text (a substring of the scanned text).
type member struct {
	key string
	raw string
	// plain is true for a string value without escapes or non-ASCII
	// bytes: its value is raw without the quotes, no unquoting needed.
	plain bool
}

// object is the members of a JSON object in order. Lookups take the last
// member of a key, as encoding/json does.
type object []member

// get returns the raw value of key and whether the object has it.
func (o object) get(key string) (string, bool) {
	if m := o.member(key); m != nil {
		return m.raw, true
	}
	return "", false
}

// member returns the last member named key, nil if there is none.
func (o object) member(key string) *member {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].key == key {
			return &o[i]
		}
	}
	return nil
}

// has reports whether the object has every one of keys.
func (o object) has(keys ...string) bool {
	for _, k := range keys {
		if _, ok := o.get(k); !ok {
			return false
		}
	}
	return true
}

// syntaxError is a JSON syntax error at a byte offset of the scanned text.
type syntaxError struct {
	msg    string
	offset int
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.offset, e.msg)
}

func errAt(offset int, format string, args ...any) error {
	return &syntaxError{msg: fmt.Sprintf(format, args...), offset: offset}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// startsWithObject reports whether s, after leading white space, begins a
// JSON object: the cheap test that lets a plain body skip every envelope
// check.
func startsWithObject(s string) bool {
	i := skipSpace(s, 0)
	return i < len(s) && s[i] == '{'
}

// scanObject parses s, which must be one JSON object with optional white
// space around it, into its members.
func scanObject(s string) (object, error) { return scanObjectInto(s, nil) }

// scanObjectInto is scanObject appending to dst[:0]: a caller that keeps
// the result to itself can pass a slice of an array on its stack and
// allocate nothing.
func scanObjectInto(s string, dst object) (object, error) {
	i := skipSpace(s, 0)
	if i >= len(s) || s[i] != '{' {
		if i >= len(s) {
			return nil, errAt(i, "empty; want a JSON object")
		}
		return nil, errAt(i, "want a JSON object, found %s", describe(s[i]))
	}
	obj, end, err := scanMembers(s, i, 1, dst[:0])
	if err != nil {
		return nil, err
	}
	if end = skipSpace(s, end); end != len(s) {
		return nil, errAt(end, "%s after the object", describe(s[end]))
	}
	return obj, nil
}

// scanMembers parses the object that starts at s[i] == '{' and returns its
// members and the offset just past it.
func scanMembers(s string, i, depth int, obj object) (object, int, error) {
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return obj, i + 1, nil
	}
	for {
		if i >= len(s) {
			return nil, i, errAt(i, "unexpected end inside an object")
		}
		if s[i] != '"' {
			return nil, i, errAt(i, "%s where an object key should start", describe(s[i]))
		}
		kend, _, err := skipString(s, i)
		if err != nil {
			return nil, i, err
		}
		key, err := unquote(s[i:kend], i)
		if err != nil {
			return nil, i, err
		}
		i = skipSpace(s, kend)
		if i >= len(s) || s[i] != ':' {
			return nil, i, errAt(i, "missing ':' after object key %q", key)
		}
		i = skipSpace(s, i+1)
		var vend int
		plain := false
		if i < len(s) && s[i] == '"' {
			vend, plain, err = skipString(s, i)
		} else {
			vend, err = skipValue(s, i, depth)
		}
		if err != nil {
			return nil, i, err
		}
		obj = append(obj, member{key: key, raw: s[i:vend], plain: plain})
		i = skipSpace(s, vend)
		if i >= len(s) {
			return nil, i, errAt(i, "unexpected end inside an object")
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case '}':
			return obj, i + 1, nil
		default:
			return nil, i, errAt(i, "%s after an object member; want ',' or '}'", describe(s[i]))
		}
	}
}

// scanArray parses s, one JSON array, into the raw text of its elements.
func scanArray(s string) ([]string, error) {
	i := skipSpace(s, 0)
	if i >= len(s) || s[i] != '[' {
		return nil, errAt(i, "want a JSON array")
	}
	var elems []string
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == ']' {
		i++
	} else {
		for {
			vend, err := skipValue(s, i, 1)
			if err != nil {
				return nil, err
			}
			elems = append(elems, s[i:vend])
			i = skipSpace(s, vend)
			if i >= len(s) {
				return nil, errAt(i, "unexpected end inside an array")
			}
			if s[i] == ']' {
				i++
				break
			}
			if s[i] != ',' {
				return nil, errAt(i, "%s after an array element; want ',' or ']'", describe(s[i]))
			}
			i = skipSpace(s, i+1)
		}
	}
	if i = skipSpace(s, i); i != len(s) {
		return nil, errAt(i, "%s after the array", describe(s[i]))
	}
	return elems, nil
}

// skipValue validates the value that starts at s[i] and returns the offset
// just past it. depth is the nesting of the enclosing containers.
func skipValue(s string, i, depth int) (int, error) {
	if i >= len(s) {
		return i, errAt(i, "unexpected end; want a value")
	}
	switch c := s[i]; {
	case c == '"':
		end, _, err := skipString(s, i)
		return end, err
	case c == '{', c == '[':
		if depth >= maxDepth {
			return i, errAt(i, "nested deeper than %d levels", maxDepth)
		}
		if c == '{' {
			return skipMembers(s, i, depth+1)
		}
		return skipElements(s, i, depth+1)
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(s, i)
	case c == 't':
		return skipLiteral(s, i, "true")
	case c == 'f':
		return skipLiteral(s, i, "false")
	case c == 'n':
		return skipLiteral(s, i, "null")
	default:
		return i, errAt(i, "%s where a value should start", describe(c))
	}
}

// skipMembers validates an object without keeping its members.
func skipMembers(s string, i, depth int) (int, error) {
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(s) {
			return i, errAt(i, "unexpected end inside an object")
		}
		if s[i] != '"' {
			return i, errAt(i, "%s where an object key should start", describe(s[i]))
		}
		end, _, err := skipString(s, i)
		if err != nil {
			return i, err
		}
		i = skipSpace(s, end)
		if i >= len(s) || s[i] != ':' {
			return i, errAt(i, "missing ':' after an object key")
		}
		i = skipSpace(s, i+1)
		if i, err = skipValue(s, i, depth); err != nil {
			return i, err
		}
		i = skipSpace(s, i)
		if i >= len(s) {
			return i, errAt(i, "unexpected end inside an object")
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case '}':
			return i + 1, nil
		default:
			return i, errAt(i, "%s after an object member; want ',' or '}'", describe(s[i]))
		}
	}
}

func skipElements(s string, i, depth int) (int, error) {
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = skipValue(s, i, depth); err != nil {
			return i, err
		}
		i = skipSpace(s, i)
		if i >= len(s) {
			return i, errAt(i, "unexpected end inside an array")
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case ']':
			return i + 1, nil
		default:
			return i, errAt(i, "%s after an array element; want ',' or ']'", describe(s[i]))
		}
	}
}

// plainInString marks the bytes that stand for themselves inside a JSON
// string: all but the quote, the backslash and control characters.
var plainInString = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// special8 reports whether any of the eight bytes of s is a quote, a
// backslash, a control character or not ASCII (the bytes that end the
// plain run of a JSON string), testing them at once in a 64-bit word.
func special8(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	q := w ^ (ones * '"')
	b := w ^ (ones * '\\')
	// A byte of x is below n (n <= 128) somewhere iff (x - ones*n) &^ x &
	// highs is not zero; a zero byte is a byte below 1; a byte of w is not
	// ASCII iff its high bit is set.
	return (w|(w-ones*0x20)&^w|(q-ones)&^q|(b-ones)&^b)&highs != 0
}

// skipString validates the string that starts at s[i] == '"' and returns
// the offset just past its closing quote, and whether the string is plain:
// no escapes, only ASCII.
func skipString(s string, i int) (int, bool, error) {
	start := i
	plain := true
	i++
	for i < len(s) {
		// Eight bytes at a time while none needs a look (see special8),
		// then byte by byte.
		for i+8 <= len(s) && !special8(s[i:i+8]) {
			i += 8
		}
		for i < len(s) && plainInString[s[i]] {
			if s[i] >= utf8.RuneSelf {
				plain = false
			}
			i++
		}
		if i >= len(s) {
			break
		}
		switch c := s[i]; {
		case c == '"':
			return i + 1, plain, nil
		case c == '\\':
			plain = false
			if i+1 >= len(s) {
				return i, false, errAt(i, "unexpected end in a string escape")
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if _, ok := hex4(s, i+2); !ok {
					if i+6 > len(s) {
						return i, false, errAt(i, "unexpected end in a \\u escape")
					}
					return i, false, errAt(i, "invalid \\u escape")
				}
				i += 6
			default:
				return i, false, errAt(i, "invalid escape \\%c", s[i+1])
			}
		default:
			return i, false, errAt(i, "control character 0x%02x in a string", c)
		}
	}
	return start, false, errAt(len(s), "unterminated string starting at byte %d", start)
}

// skipNumber validates the number that starts at s[i].
func skipNumber(s string, i int) (int, error) {
	start := i
	if s[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '0' {
		i++
	} else if digits() == 0 {
		return start, errAt(start, "invalid number")
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return start, errAt(start, "invalid number: no digits after '.'")
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return start, errAt(start, "invalid number: no digits in the exponent")
		}
	}
	return i, nil
}

func skipLiteral(s string, i int, lit string) (int, error) {
	if !strings.HasPrefix(s[i:], lit) {
		return i, errAt(i, "invalid literal; want %s", lit)
	}
	return i + len(lit), nil
}

// describe names the byte c for an error message.
func describe(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

var errNotString = errors.New("not a JSON string")

// unquote returns the value of the JSON string raw, quotes included, as
// skipString validated it: no control characters, no unescaped quote, only
// valid escapes. Like encoding/json it turns invalid UTF-8 and unpaired
// surrogates into U+FFFD. A string with nothing to unescape is returned
// as a substring of raw, without a copy. offset places raw in the scanned
// text, for errors.
func unquote(raw string, offset int) (string, error) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", errAt(offset, "%v", errNotString)
	}
	s := raw[1 : len(raw)-1]
	next := strings.IndexByte(s, '\\')
	if next < 0 && utf8.ValidString(s) {
		return s, nil
	}
	valid := utf8.ValidString(s) // then the runs between escapes are valid too
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if next < 0 {
			next = len(s)
		}
		if valid {
			b.WriteString(s[i:next])
		} else {
			writeUTF8(&b, s[i:next])
		}
		i = next
		if i >= len(s) {
			break
		}
		// s[i] is a backslash.
		if i+1 >= len(s) {
			return "", errAt(offset+1+i, "unexpected end in a string escape")
		}
		switch s[i+1] {
		case '"', '\\', '/':
			b.WriteByte(s[i+1])
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, ok := hex4(s, i+2)
			if !ok {
				return "", errAt(offset+1+i, "invalid \\u escape")
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if r2, ok := hex4(s, i+2); ok && i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			b.WriteRune(r)
			i -= 2 // the += 2 below
		default:
			return "", errAt(offset+1+i, "invalid escape \\%c", s[i+1])
		}
		i += 2
		if n := strings.IndexByte(s[i:], '\\'); n >= 0 {
			next = i + n
		} else {
			next = -1
		}
	}
	return b.String(), nil
}

// writeUTF8 writes s to b, each byte of invalid UTF-8 as U+FFFD.
func writeUTF8(b *strings.Builder, s string) {
	if utf8.ValidString(s) {
		b.WriteString(s)
		return
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
}

// hex4 decodes the four hex digits at s[i:i+4].
func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// str returns the string value of key in o. It reports whether
// the key was there; a value that is not a string is an error naming the
// key.
func (o object) str(key string) (string, bool, error) {
	m := o.member(key)
	if m == nil {
		return "", false, nil
	}
	if m.plain {
		return m.raw[1 : len(m.raw)-1], true, nil
	}
	raw := m.raw
	if raw == "null" {
		return "", false, nil
	}
	if raw == "" || raw[0] != '"' {
		return "", true, fmt.Errorf("field %q is %s, want a string", key, kindOf(raw))
	}
	v, err := unquote(raw, 0)
	if err != nil {
		return "", true, fmt.Errorf("field %q: %w", key, err)
	}
	return v, true, nil
}

// kindOf names the JSON type of the raw value v.
func kindOf(v string) string {
	if v == "" {
		return "empty"
	}
	switch v[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}
