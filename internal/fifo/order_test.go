package fifo

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOrder(t *testing.T) {
	t.Parallel()
	type step struct {
		op      string // enter, leave, fail, handback, tails
		g, x    string
		verdict Verdict
		next    string // leave: "" = none
		back    []string
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"one at a time, in order", []step{
			{op: "enter", g: "a", x: "a0", verdict: Start},
			{op: "enter", g: "a", x: "a1", verdict: Wait},
			{op: "enter", g: "b", x: "b0", verdict: Start},
			{op: "leave", g: "a", x: "a0", next: "a1"},
			{op: "leave", g: "a", x: "a1"},
			{op: "enter", g: "a", x: "a2", verdict: Start},
		}},
		{"a failure hands back the rest of its group only", []step{
			{op: "enter", g: "a", x: "a0", verdict: Start},
			{op: "enter", g: "a", x: "a1", verdict: Wait},
			{op: "enter", g: "a", x: "a2", verdict: Wait},
			{op: "enter", g: "b", x: "b0", verdict: Start},
			{op: "fail", g: "a", x: "a0", back: []string{"a1", "a2"}},
			// a1's hand-back is not answered yet: a message of the
			// group that arrives now goes back too.
			{op: "enter", g: "a", x: "a3", verdict: HandBack},
			{op: "fail", g: "a", x: "a1"},
			{op: "fail", g: "a", x: "a2"},
			{op: "fail", g: "a", x: "a3"},
			// every hand-back answered: the group starts again
			{op: "enter", g: "a", x: "a0", verdict: Start},
			{op: "leave", g: "b", x: "b0"},
		}},
		{"a hand-back of an unstarted first marks the group", []step{
			{op: "enter", g: "a", x: "a0", verdict: Start},
			{op: "handback", g: "a", x: "a0"},
			{op: "enter", g: "a", x: "a1", verdict: HandBack},
			{op: "enter", g: "a", x: "a2", verdict: HandBack},
			{op: "fail", g: "a", x: "a0"},
			{op: "fail", g: "a", x: "a2"},
			{op: "fail", g: "a", x: "a1"},
			{op: "enter", g: "a", x: "a0", verdict: Start},
		}},
		{"tails: everything behind the first; the first stays", []step{
			{op: "enter", g: "a", x: "a0", verdict: Start},
			{op: "enter", g: "a", x: "a1", verdict: Wait},
			{op: "enter", g: "a", x: "a2", verdict: Wait},
			{op: "enter", g: "b", x: "b0", verdict: Start},
			{op: "tails", back: []string{"a1", "a2"}},
			{op: "tails"}, // marked once
			// the first succeeds: its successor is returning, so nothing starts
			{op: "leave", g: "a", x: "a0"},
			{op: "fail", g: "a", x: "a1"},
			{op: "fail", g: "a", x: "a2"},
			{op: "enter", g: "a", x: "a1", verdict: Start},
		}},
		{"a later message done first (a batch) does not move the group", []step{
			{op: "enter", g: "a", x: "a0", verdict: Start},
			{op: "enter", g: "a", x: "a1", verdict: Wait},
			{op: "enter", g: "a", x: "a2", verdict: Wait},
			{op: "leave", g: "a", x: "a1"},
			{op: "leave", g: "a", x: "a0", next: "a2"},
		}},
		{"unknown messages are ignored", []step{
			{op: "leave", g: "a", x: "a0"},
			{op: "fail", g: "a", x: "a0"},
			{op: "handback", g: "a", x: "a0"},
			{op: "enter", g: "a", x: "a0", verdict: Start},
			{op: "leave", g: "a", x: "zz"},
			{op: "handback", g: "a", x: "zz"},
			{op: "enter", g: "a", x: "a1", verdict: Wait},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var o Order[string]
			for i, s := range tt.steps {
				switch s.op {
				case "enter":
					require.Equal(t, s.verdict, o.Enter(s.g, s.x), "step %d: enter %s", i, s.x)
				case "leave", "fail":
					next, ok, back := o.Leave(s.g, s.x, s.op == "leave")
					require.Equal(t, s.next != "", ok, "step %d: %s %s: next %q", i, s.op, s.x, next)
					require.Equal(t, s.next, next, "step %d", i)
					require.ElementsMatch(t, s.back, back, "step %d: %s %s: back", i, s.op, s.x)
				case "handback":
					require.ElementsMatch(t, s.back, o.HandBack(s.g, s.x), "step %d", i)
				case "tails":
					require.ElementsMatch(t, s.back, o.Tails(), "step %d", i)
				}
			}
		})
	}
}

func TestOrderQueries(t *testing.T) {
	t.Parallel()
	var o Order[int]
	require.Zero(t, o.Len("g"))
	require.Nil(t, o.Ahead("g", 1))
	require.False(t, o.Returning("g", 1))
	o.Enter("g", 1)
	o.Enter("g", 2)
	o.Enter("g", 3)
	require.Equal(t, 3, o.Len("g"))
	require.Equal(t, 1, o.Groups())
	require.Nil(t, o.Ahead("g", 1))
	require.Equal(t, []int{1, 2}, o.Ahead("g", 3))
	require.Equal(t, []int{1, 2, 3}, o.Items("g"))
	require.Nil(t, o.Items("none"))
	next, ok := o.Successor("g", 1)
	require.True(t, ok)
	require.Equal(t, 2, next)
	_, ok = o.Successor("g", 2) // not the first
	require.False(t, ok)
	o.HandBack("g", 2)
	_, ok = o.Successor("g", 1) // returning
	require.False(t, ok)
	require.False(t, o.Returning("g", 1))
	require.True(t, o.Returning("g", 2))
	require.True(t, o.Returning("g", 3))
}

func TestEarlierFailed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		groups []string
		failed []bool
		want   []bool
	}{
		{"nothing failed", []string{"a", "a", "b"}, []bool{false, false, false}, []bool{false, false, false}},
		{"a failure fails the rest of its group", []string{"a", "b", "a", "a", "b"}, []bool{true, false, false, true, false}, []bool{false, false, true, true, false}},
		{"the first failure counts, not the later", []string{"a", "a", "a"}, []bool{false, true, false}, []bool{false, false, true}},
		{"one group (a Lambda event)", []string{"", "", ""}, []bool{false, true, false}, []bool{false, false, true}},
		{"empty", nil, nil, []bool{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := EarlierFailed(len(tt.groups), func(i int) string { return tt.groups[i] }, func(i int) bool { return tt.failed[i] })
			require.Equal(t, tt.want, got)
		})
	}
}
