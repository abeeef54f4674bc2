package sqstest_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
)

// Many producers and long-polling consumers at once: every message is delivered and
// deleted exactly once (no lease lapses: 600 s visibility), and -race stays quiet.
func TestConcurrentProducersAndConsumers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		url := b.queue(t, "q", map[string]string{"VisibilityTimeout": "600"})
		const producers, perProducer, consumers = 4, 25, 5
		var wg sync.WaitGroup
		for p := range producers {
			wg.Go(func() {
				for i := range perProducer {
					b.send(t, url, fmt.Sprintf("p%d-%d", p, i))
					time.Sleep(time.Duration(i%3) * time.Second)
				}
			})
		}
		var mu sync.Mutex
		seen := map[string]int{}
		for range consumers {
			wg.Go(func() {
				for {
					out, err := b.c.ReceiveMessage(b.ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 3, WaitTimeSeconds: 20})
					require.NoError(t, err)
					if len(out.Messages) == 0 {
						return // 20 s without a message: producers are done
					}
					for _, m := range out.Messages {
						mu.Lock()
						seen[*m.Body]++
						mu.Unlock()
						require.NoError(t, b.deleteMessage(url, *m.ReceiptHandle))
					}
				}
			})
		}
		wg.Wait()
		require.Len(t, seen, producers*perProducer)
		for body, n := range seen {
			require.Equal(t, 1, n, body)
		}
		for _, st := range b.srv.Messages(url) {
			require.True(t, st.Deleted, st.Body)
		}
	})
}
