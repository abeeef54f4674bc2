package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sqskit/sqsconsumer/chaos/journal"
	"github.com/sqskit/sqsconsumer/chaos/proxy"
)

// TestCheckDuplicatesCauses runs the duplicate check on made-up outcomes:
// which recorded causes explain a second completion, and which do not.
func TestCheckDuplicatesCauses(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	deliveries := []proxy.Record{
		{PID: 1, Action: "ReceiveMessage", Time: at(0), Delivered: []proxy.Delivery{{MessageID: "m", Handle: "h1", ReceiveCount: 1}}},
		{PID: 2, Action: "ReceiveMessage", Time: at(5000), Delivered: []proxy.Delivery{{MessageID: "m", Handle: "h2", ReceiveCount: 2}}},
	}
	dones := []journal.Entry{
		{Kind: journal.Done, PID: 1, MessageID: "m", ReceiveCount: 1, Time: at(500)},
		{Kind: journal.Done, PID: 2, MessageID: "m", ReceiveCount: 2, Time: at(5500)},
	}
	faultOn := func(action, handle string, class proxy.Class, ms int) proxy.Record {
		return proxy.Record{PID: 1, Action: action, Start: at(ms), Time: at(ms), Handles: []string{handle}, Fault: proxy.Fault{Class: class}}
	}
	tests := []struct {
		name    string
		extra   []proxy.Record
		entries []journal.Entry
		kills   []kill
		want    string // the cause; "unexplained" for a violation
	}{
		{name: "nothing recorded", want: "unexplained"},
		{name: "killed after the work", kills: []kill{{pid: 1, at: at(600)}}, want: causeKilled},
		{name: "killed before the work", kills: []kill{{pid: 1, at: at(400)}}, want: "unexplained"},
		{name: "delete failed", extra: []proxy.Record{faultOn("DeleteMessageBatch", "h1", proxy.Error500, 600)}, want: "delete-http-500"},
		{name: "renewal throttled", extra: []proxy.Record{faultOn("ChangeMessageVisibilityBatch", "h1", proxy.Throttle403, 1000)}, want: "renewal-throttle-403"},
		{name: "fault on another handle", extra: []proxy.Record{faultOn("DeleteMessageBatch", "hX", proxy.Error500, 600)}, want: "unexplained"},
		{name: "fault after the message came back", extra: []proxy.Record{faultOn("DeleteMessageBatch", "h1", proxy.Error500, 6000)}, want: "unexplained"},
		{name: "a faked delete is no excuse", extra: []proxy.Record{faultOn("DeleteMessageBatch", "h1", proxy.FakeDelete, 600)}, want: "unexplained"},
		{
			name:    "delete confirmed to the worker",
			extra:   []proxy.Record{faultOn("ChangeMessageVisibilityBatch", "h1", proxy.Delay, 300)},
			entries: []journal.Entry{{Kind: "ev:deleted", PID: 1, MessageID: "m", Time: at(700)}},
			kills:   []kill{{pid: 1, at: at(900)}},
			want:    "unexplained",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &outcome{sent: []string{"m"}, records: append(append([]proxy.Record(nil), deliveries...), tt.extra...),
				journal: append(append([]journal.Entry(nil), dones...), tt.entries...), kills: tt.kills}
			vs, causes := checkDuplicates(o)
			require.Equal(t, map[string]int{tt.want: 1}, causes)
			require.Equal(t, tt.want == "unexplained", len(vs) == 1, "violations: %v", vs)
		})
	}
}

// TestCheckReturnsDeleted: a message whose delete reached the server before
// the kill is not expected back; one held without a delete is, in time.
func TestCheckReturnsDeleted(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	o := &outcome{lease: 3 * time.Second, slack: time.Second, kills: []kill{{pid: 1, at: t0.Add(time.Second)}}, records: []proxy.Record{
		{PID: 1, Action: "ReceiveMessage", Time: t0, Delivered: []proxy.Delivery{{MessageID: "gone", Handle: "h1"}, {MessageID: "held", Handle: "h2"}, {MessageID: "late", Handle: "h3"}}},
		{PID: 1, Action: "DeleteMessageBatch", Time: t0.Add(1100 * time.Millisecond), Handles: []string{"h1"}, Deleted: []string{"h1"}},
		{PID: 2, Action: "ReceiveMessage", Time: t0.Add(4 * time.Second), Delivered: []proxy.Delivery{{MessageID: "held", Handle: "h4"}}},
		{PID: 2, Action: "ReceiveMessage", Time: t0.Add(6 * time.Second), Delivered: []proxy.Delivery{{MessageID: "late", Handle: "h5"}}},
	}}
	vs, rec := checkReturns(o)
	require.ElementsMatch(t, []time.Duration{3 * time.Second, 5 * time.Second}, rec)
	require.Len(t, vs, 1)
	require.Contains(t, vs[0].msg, "message late")
}
