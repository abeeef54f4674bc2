package otelsqs

import (
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// ParseXRayHeader converts an X-Ray trace header, as SQS returns it in the
// AWSTraceHeader system attribute, to a remote span context:
//
//	Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1
//
// The trace ID is the root's 8-digit epoch and 24-digit identifier
// joined (X-Ray's IDs are W3C-compatible); the span ID is Parent.
// Sampled=1 sets the sampled flag; 0, "?" (decision deferred) or no
// Sampled field leave it clear. Fields may come in any order, with spaces
// around them; unknown fields (Lineage, Self, ...) are ignored. It
// reports false when Root or Parent is missing or malformed, or an ID is
// all zeros.
func ParseXRayHeader(h string) (trace.SpanContext, bool) {
	var (
		cfg     trace.SpanContextConfig
		hasRoot bool
		hasSpan bool
	)
	for field := range strings.SplitSeq(h, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "Root":
			parts := strings.Split(v, "-")
			if len(parts) != 3 || parts[0] != "1" || len(parts[1]) != 8 || len(parts[2]) != 24 {
				return trace.SpanContext{}, false
			}
			if _, err := hex.Decode(cfg.TraceID[:], []byte(parts[1]+parts[2])); err != nil {
				return trace.SpanContext{}, false
			}
			hasRoot = true
		case "Parent":
			if len(v) != 16 {
				return trace.SpanContext{}, false
			}
			if _, err := hex.Decode(cfg.SpanID[:], []byte(v)); err != nil {
				return trace.SpanContext{}, false
			}
			hasSpan = true
		case "Sampled":
			if v == "1" {
				cfg.TraceFlags = trace.FlagsSampled
			}
		}
	}
	if !hasRoot || !hasSpan {
		return trace.SpanContext{}, false
	}
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	return sc, sc.IsValid()
}

// FormatXRayHeader is the inverse of ParseXRayHeader, for producers and
// tests: Root=1-…;Parent=…;Sampled=0|1.
func FormatXRayHeader(sc trace.SpanContext) string {
	tid := sc.TraceID().String()
	sampled := "0"
	if sc.IsSampled() {
		sampled = "1"
	}
	return "Root=1-" + tid[:8] + "-" + tid[8:] + ";Parent=" + sc.SpanID().String() + ";Sampled=" + sampled
}
