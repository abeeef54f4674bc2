package sqsconsumer

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// parsedQueueURL is checkQueueURL's verdict by url.Parse alone.
func parsedQueueURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Host != "" && (u.Scheme == "https" || u.Scheme == "http")
}

// plainQueueURL skips url.Parse only for what url.Parse accepts.
func TestPlainQueueURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		url  string
		want bool
	}{
		{"https://sqs.us-east-1.amazonaws.com/123456789012/jobs", true},
		{"https://sqs.us-east-1.amazonaws.com/123456789012/jobs.fifo", true},
		{"http://localhost:9324/000000000000/my_queue-1", true},
		{"https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q", true},
		{"https://host", true},
		{"https://host/", true},
		{"jobs", false},
		{"https://", false},
		{"https:///q", false},
		{"https://host:/q", false},
		{"https://host:port/q", false},
		{"https://[::1]:9324/q", false}, // parsed instead
		{"https://host/q?x=1", false},
		{"https://host/a b", false},
		{"HTTPS://host/q", false},
		{"ftp://host/q", false},
		{"https://user@host/q", false},
	} {
		require.Equal(t, tt.want, plainQueueURL(tt.url), tt.url)
		if tt.want {
			require.True(t, parsedQueueURL(tt.url), "url.Parse must agree: %s", tt.url)
		}
	}
}

func FuzzPlainQueueURL(f *testing.F) {
	for _, s := range []string{"https://sqs.us-east-1.amazonaws.com/123456789012/jobs", "http://localhost:9324/q", "https://h:1", "jobs", "https://[::1]/q"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if plainQueueURL(s) && !parsedQueueURL(s) {
			t.Fatalf("plainQueueURL accepts %q, which url.Parse rejects", s)
		}
		if plainQueueURL(s) {
			require.NoError(t, checkQueueURL(s))
		}
	})
}
