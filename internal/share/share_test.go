package share

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDivide(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                    string
		size                    int
		demands, weights, prios []int
		want                    []float64
	}{
		{"by weight", 8, []int{8, 8}, []int{3, 1}, []int{0, 0}, []float64{6, 2}},
		{"a capped member leaves the rest", 8, []int{1, 8}, []int{3, 1}, []int{0, 0}, []float64{1, 7}},
		{"idle members take nothing", 8, []int{0, 8, 0}, []int{1, 1, 1}, []int{0, 0, 0}, []float64{0, 8, 0}},
		{"demand below the pool", 10, []int{2, 3}, []int{1, 1}, []int{0, 0}, []float64{2, 3}},
		{"uneven", 10, []int{10, 10}, []int{3, 1}, []int{0, 0}, []float64{7.5, 2.5}},
		{"cascade of caps", 12, []int{1, 2, 100}, []int{1, 1, 1}, []int{0, 0, 0}, []float64{1, 2, 9}},
		{"priority first", 4, []int{4, 4}, []int{1, 1}, []int{1, 0}, []float64{4, 0}},
		{"priority leaves the rest", 4, []int{1, 4}, []int{1, 1}, []int{1, 0}, []float64{1, 3}},
		{"weights within a priority", 8, []int{2, 8, 8}, []int{1, 3, 1}, []int{5, 0, 0}, []float64{2, 4.5, 1.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Divide(tt.size, tt.demands, tt.weights, tt.prios)
			require.InDeltaSlice(t, tt.want, got, 1e-9)
		})
	}
}

// grants records the order in which members were granted slots.
type grants struct {
	mu    sync.Mutex
	order []string
	ready map[string]int // messages each member has waiting
}

func (g *grants) set(name string, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ready[name] = n
}

func (g *grants) got() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.order...)
}

func (g *grants) bind(m *Member, name string) {
	m.Bind(func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.ready[name] == 0 {
			m.SetWant(false)
			return false
		}
		g.ready[name]--
		g.order = append(g.order, name)
		if g.ready[name] == 0 {
			m.SetWant(false)
		}
		return true
	}, func() {})
}

// A slot given back goes to the waiting member of the highest priority,
// then to the one that used the least slot time for its weight; a member
// never holds more slots than the pool has.
func TestPoolGrants(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(2)
		hi := p.Join(1, 1, 0)
		a := p.Join(1, 0, 0)
		b := p.Join(1, 0, 0)
		g := &grants{ready: map[string]int{}}
		g.bind(hi, "hi")
		g.bind(a, "a")
		g.bind(b, "b")

		require.True(t, a.Acquire())
		require.True(t, a.Acquire())
		g.set("b", 5)
		require.False(t, b.Acquire(), "the pool is used up")
		time.Sleep(time.Second) // a has used 2 slot-seconds, b none
		g.set("hi", 1)
		require.False(t, hi.Acquire())
		a.Release()
		require.Equal(t, []string{"hi"}, g.got(), "the higher priority first")
		a.Release()
		require.Equal(t, []string{"hi", "b"}, g.got())
		time.Sleep(time.Second)
		hi.Release()
		require.Equal(t, []string{"hi", "b", "b"}, g.got(), "b has used less than a")
		p.mu.Lock()
		require.Equal(t, 0, p.free)
		require.Equal(t, 2, b.held)
		p.mu.Unlock()
	})
}

// Free slots are kept for a higher-priority member whose messages are on
// their way, for as long as it said, and then go to the lower ones.
func TestPoolKeepsSlotsForAHigherPriority(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(2)
		hi := p.Join(1, 1, 0)
		lo := p.Join(1, 0, 0)
		g := &grants{ready: map[string]int{}}
		g.bind(hi, "hi")
		g.bind(lo, "lo")
		hi.SetDemand(2, time.Time{})
		lo.SetDemand(2, time.Time{})
		require.Equal(t, 2, hi.Share())
		require.Equal(t, 0, lo.Share())
		require.True(t, lo.Acquire())
		hi.SetDemand(2, time.Now().Add(20*time.Millisecond)) // a receive on its way
		g.set("lo", 3)
		require.False(t, lo.Acquire(), "the free slot is kept for hi")
		lo.Release()
		require.Empty(t, g.got(), "slots kept for hi went to lo")
		require.True(t, hi.Acquire(), "hi takes a slot kept for it")
		time.Sleep(30 * time.Millisecond) // hi's receive did not come: the slot left goes to lo
		require.Equal(t, []string{"lo"}, g.got())
		hi.Release()
		require.Equal(t, []string{"lo", "lo"}, g.got())
	})
}

// A member leaves while the others run: the shares are divided again
// without it (the others are woken), slots it still counted (a grant that
// raced the end of its run) go back and are handed to a waiting member at
// once, and a Release or a refused grant from it afterwards changes
// nothing.
func TestPoolLeaveUnderLoad(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p := NewPool(4)
		a := p.Join(1, 0, 0)
		b := p.Join(1, 0, 0)
		g := &grants{ready: map[string]int{}}
		g.bind(a, "a")
		woken := 0
		b.Bind(func() bool { return false }, func() {})
		a.Bind(a.grant, func() { woken++ })
		a.SetDemand(4, time.Time{})
		b.SetDemand(4, time.Time{})
		require.Equal(t, 2, a.Share())
		require.Equal(t, 2, b.Share())
		require.True(t, a.Acquire())
		require.True(t, a.Acquire())
		require.True(t, b.Acquire())
		require.True(t, b.Acquire())
		g.set("a", 3)
		require.False(t, a.Acquire(), "the pool is used up")

		p.Leave(b) // b's run ended while it still counted 2 slots
		require.Equal(t, 4, a.Share(), "a's share grows")
		require.Equal(t, 1, woken, "a is woken to receive for it")
		require.Equal(t, []string{"a", "a"}, g.got(), "b's slots went to a at once")
		p.mu.Lock()
		require.Equal(t, 0, p.free)
		require.Equal(t, 4, a.held)
		require.Len(t, p.members, 1)
		p.mu.Unlock()

		b.Release() // late: nothing changes
		p.mu.Lock()
		require.Equal(t, 0, p.free)
		p.mu.Unlock()
		p.Leave(b) // twice: nothing either
		a.Release()
		require.Equal(t, []string{"a", "a", "a"}, g.got())

		c := p.Join(1, 0, 0) // a member joins while a runs
		c.Bind(func() bool { return false }, func() {})
		c.SetDemand(4, time.Time{})
		require.Equal(t, 2, c.Share())
		require.Equal(t, 2, a.Share())
	})
}
