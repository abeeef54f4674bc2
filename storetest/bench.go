package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sqskit/sqsconsumer"
)

// RunBenchmarks measures s: ClaimComplete is one Claim of a fresh key and
// the Complete that records it (the cost the middleware adds to every
// handled message); ClaimDuplicate is one Claim of a completed key (the
// cost of skipping a duplicate). Keys are unique to the run.
func RunBenchmarks(b *testing.B, s sqsconsumer.IdempotencyStore) {
	ctx := context.Background()
	prefix := "storetest-bench/" + randomID() + "/"
	b.Run("ClaimComplete", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := prefix + "c/" + itoa(i)
			i++
			if _, err := s.Claim(ctx, k, "tok", time.Now().Add(time.Minute), ""); err != nil {
				b.Fatal(err)
			}
			if err := s.Complete(ctx, k, "tok", nil, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ClaimDuplicate", func(b *testing.B) {
		k := prefix + "dup"
		if _, err := s.Claim(ctx, k, "tok", time.Now().Add(time.Minute), ""); err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, k, "tok", []byte("result"), time.Hour); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			res, err := s.Claim(ctx, k, "other", time.Now().Add(time.Minute), "")
			if err != nil || res.Status != sqsconsumer.ClaimCompleted {
				b.Fatal(res.Status, err)
			}
		}
	})
}
