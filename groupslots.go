package sqsconsumer

import (
	"math"
	"sort"
	"time"
)

// Bounds of the groups' slot time figures (Stats.TopGroups).
const (
	// groupSlotCounters is how many groups the slot time tracker follows
	// at once: any group with more than a 32nd of the slot time is among
	// them (the Space-Saving algorithm), whatever the number of groups.
	groupSlotCounters = 32
	// topGroups is how many of them Stats names.
	topGroups = 5
	// groupSlotTau is the time constant of the slot time's decay: slot
	// time counts with weight exp(-age/groupSlotTau), so the figures
	// cover about the last minute or two.
	groupSlotTau = time.Minute
	// noisyShare is the share of slot time above which Stats counts a
	// group in NoisyGroups: SQS's own threshold for a noisy tenant's
	// share of processing time.
	noisyShare = 0.10
)

// GroupSlotTime is one message group's recent slot time (Stats.TopGroups).
type GroupSlotTime struct {
	// Group is the MessageGroupId.
	Group string
	// SlotTime is the handler slot time its messages held, decayed with
	// a time constant of one minute (a slot held steadily for the last
	// minute counts about 0.63 minutes). It may be overstated by up to
	// a 32nd of all groups' slot time.
	SlotTime time.Duration
	// Share is SlotTime over all the slot time held (messages without a
	// group included), 0 to 1.
	Share float64
}

// groupSlots follows the slot time of the message groups that hold the
// most: groupSlotCounters counters, Space-Saving (a group not followed
// takes over the smallest counter, adding its value), each weighted by
// exp(t/groupSlotTau) so that old time decays without touching every
// counter. Its owner (the flow's fairReady) guards it: no lock of its own.
type groupSlots struct {
	start  time.Time // when the first slot time counted began
	base   time.Time // the weights' origin
	total  float64   // every group's weighted slot time, in seconds
	keys   [groupSlotCounters]string
	vals   [groupSlotCounters]float64
	used   int
	byName map[string]int // key -> counter
}

// weight is exp((now-base)/tau), rebasing first when it grows large.
func (s *groupSlots) weight(now time.Time) float64 {
	if s.base.IsZero() {
		s.base = now
	}
	x := now.Sub(s.base).Seconds() / groupSlotTau.Seconds()
	if x > 200 {
		k := math.Exp(-x)
		s.total *= k
		for i := range s.used {
			s.vals[i] *= k
		}
		s.base, x = now, 0
	}
	return math.Exp(x)
}

// add counts held of slot time for group key ("" for a message without
// a group: in the total only), ended at now.
//
// Until a group has held a slot nothing is counted: a queue without
// groups pays one comparison a message.
func (s *groupSlots) add(key string, held time.Duration, now time.Time) {
	if key == "" && s.used == 0 {
		return
	}
	if s.start.IsZero() {
		s.start = now.Add(-held)
	}
	v := held.Seconds() * s.weight(now)
	s.total += v
	if key == "" {
		return
	}
	if i, ok := s.byName[key]; ok {
		s.vals[i] += v
		return
	}
	if s.byName == nil {
		s.byName = make(map[string]int, groupSlotCounters)
	}
	if s.used < groupSlotCounters {
		s.keys[s.used], s.vals[s.used] = key, v
		s.byName[key] = s.used
		s.used++
		return
	}
	m := 0
	for i := 1; i < s.used; i++ {
		if s.vals[i] < s.vals[m] {
			m = i
		}
	}
	delete(s.byName, s.keys[m])
	s.keys[m] = key
	s.vals[m] += v
	s.byName[key] = m
}

// heavyAndLight returns the groups holding more than noisyShare of the
// slot time (at most nine: nil for none) and the mean slots every other
// tenant held (messages without a group included) over the decay's
// window, or over the time since the first slot time counted when that
// is shorter: ok false before any group held a slot.
func (s *groupSlots) heavyAndLight(now time.Time) (heavy map[string]bool, light float64, ok bool) {
	if s.used == 0 || s.total <= 0 {
		return nil, 0, false
	}
	w := s.weight(now) // first: it may rebase the counters
	rest := s.total
	for i := range s.used {
		if s.vals[i] > noisyShare*s.total {
			if heavy == nil {
				heavy = make(map[string]bool, 2)
			}
			heavy[s.keys[i]] = true
			rest -= s.vals[i]
		}
	}
	// The weighted slot time over the weight of the window it covers: a
	// steady m slots count m × tau × (1 - exp(-elapsed/tau)).
	elapsed := max(now.Sub(s.start), time.Millisecond)
	window := w * groupSlotTau.Seconds() * -math.Expm1(-elapsed.Seconds()/groupSlotTau.Seconds())
	return heavy, max(rest, 0) / window, true
}

// groupFigures is what Stats reports of the groups' slot time.
type groupFigures struct {
	top        []GroupSlotTime
	noisy      int           // groups above noisyShare
	others     int           // groups followed beyond top
	otherSlots time.Duration // slot time of every group beyond top
}

// figures returns the groups' figures at now.
func (s *groupSlots) figures(now time.Time) groupFigures {
	var g groupFigures
	if s.used == 0 || s.total <= 0 {
		return g
	}
	w := s.weight(now)
	idx := make([]int, s.used)
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return s.vals[idx[a]] > s.vals[idx[b]] })
	named := 0.0
	for n, i := range idx {
		share := min(s.vals[i]/s.total, 1)
		if share > noisyShare {
			g.noisy++
		}
		if n < topGroups {
			g.top = append(g.top, GroupSlotTime{Group: s.keys[i], SlotTime: secs(s.vals[i] / w), Share: share})
			named += s.vals[i]
		} else {
			g.others++
		}
	}
	g.otherSlots = secs(max(s.total-named, 0) / w)
	return g
}

func secs(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
