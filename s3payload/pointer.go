package s3payload

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The wire format of the extended client libraries. A message whose
// payload was offloaded carries, instead of the payload, a JSON pointer to
// the S3 object that holds it, in the form Jackson's default typing writes
// a Java object (a two-element array: class name, then the object):
//
//	["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"BUCKET","s3Key":"KEY"}]
//
// and a message attribute of DataType Number whose value is the payload's
// size in bytes. The attribute is how a receiver knows: the Java and Python
// clients treat a message as offloaded exactly when it has one.
const (
	// SizeAttribute is the size attribute's name in the Python client
	// (its default) and the Java client (since 2.0, when configured with
	// setLegacyReservedAttributeNameDisabled).
	SizeAttribute = "ExtendedPayloadSize"
	// LegacySizeAttribute is the original name, still what the Java
	// client writes by default. Readers accept both.
	LegacySizeAttribute = "SQSLargePayloadSize"
	// PointerClass is the class name in the pointer the Java (2.x) and
	// Python clients write.
	PointerClass = "software.amazon.payloadoffloading.PayloadS3Pointer"
	// LegacyPointerClass is the class name older Java clients (1.x)
	// wrote, and the Python client writes in legacy mode. Read, never
	// written.
	LegacyPointerClass = "com.amazon.sqs.javamessaging.MessageS3Pointer"
)

// Pointer names the S3 object that holds an offloaded payload.
type Pointer struct {
	Bucket string
	Key    string
}

// String returns the pointer as a message body, byte for byte as the Java
// extended client writes it (see PointerClass).
func (p Pointer) String() string {
	var b strings.Builder
	b.Grow(len(PointerClass) + len(p.Bucket) + len(p.Key) + 40)
	b.WriteString(`["`)
	b.WriteString(PointerClass)
	b.WriteString(`",{"s3BucketName":`)
	writeJacksonString(&b, p.Bucket)
	b.WriteString(`,"s3Key":`)
	writeJacksonString(&b, p.Key)
	b.WriteString(`}]`)
	return b.String()
}

// writeJacksonString writes s as a JSON string the way Jackson's default
// writer does: quote and backslash escaped, control characters as \b \t \n
// \f \r or \u00XX, everything else (non-ASCII and '/' included) as it is.
func writeJacksonString(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if c < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
}

// ParsePointer reads a pointer body in either class name (PointerClass or
// LegacyPointerClass). Members other than s3BucketName and s3Key are
// ignored, as the Java client ignores them. The error says what is wrong.
func ParsePointer(body string) (Pointer, error) {
	var parts []json.RawMessage
	if err := json.Unmarshal([]byte(body), &parts); err != nil {
		return Pointer{}, fmt.Errorf("s3payload: the body is not an S3 pointer (a JSON array [class, {s3BucketName, s3Key}]): %v", err)
	}
	if len(parts) != 2 {
		return Pointer{}, fmt.Errorf("s3payload: the S3 pointer has %d elements, want 2 (class name and object)", len(parts))
	}
	var class string
	if err := json.Unmarshal(parts[0], &class); err != nil {
		return Pointer{}, fmt.Errorf("s3payload: the S3 pointer's first element is not a class name: %s", parts[0])
	}
	if class != PointerClass && class != LegacyPointerClass {
		return Pointer{}, fmt.Errorf("s3payload: the S3 pointer's class is %q, want %q", class, PointerClass)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(parts[1], &fields); err != nil || fields == nil {
		return Pointer{}, fmt.Errorf("s3payload: the S3 pointer's second element is not an object: %s", parts[1])
	}
	var p Pointer
	for _, f := range []struct {
		name string
		dst  *string
	}{{"s3BucketName", &p.Bucket}, {"s3Key", &p.Key}} {
		raw, ok := fields[f.name]
		if !ok {
			return Pointer{}, fmt.Errorf("s3payload: the S3 pointer has no %s", f.name)
		}
		if err := json.Unmarshal(raw, f.dst); err != nil || *f.dst == "" {
			return Pointer{}, fmt.Errorf("s3payload: the S3 pointer's %s is %s, want a non-empty string", f.name, raw)
		}
	}
	return p, nil
}
