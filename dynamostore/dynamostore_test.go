package dynamostore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sqskit/sqsconsumer"
	"github.com/sqskit/sqsconsumer/dynamostore"
	"github.com/sqskit/sqsconsumer/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup reaches the DynamoDB endpoint named by SQSCONSUMER_DYNAMODB_ENDPOINT
// (dynalite in CI), or skips, and creates a table of the test's own.
//
// The client is built from explicit options, never
// config.LoadDefaultConfig: the emulator needs no real credentials, and the
// shared configuration (AWS_CA_BUNDLE and the like) must not leak into
// tests.
func setup(t testing.TB) (*dynamodb.Client, *dynamostore.Store, string) {
	t.Helper()
	endpoint := os.Getenv("SQSCONSUMER_DYNAMODB_ENDPOINT")
	if endpoint == "" {
		t.Skip("SQSCONSUMER_DYNAMODB_ENDPOINT is not set; run `source .ci/setup.d/40-dynalite.sh` (or bash .ci/run), which starts dynalite on 127.0.0.1 and sets it")
	}
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	client := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   &http.Client{Transport: transport},
	})
	var b [5]byte
	_, _ = rand.Read(b[:])
	table := "idem-test-" + hex.EncodeToString(b[:])
	s, err := dynamostore.New(client, table)
	require.NoError(t, err)
	require.NoError(t, s.CreateTable(context.Background(), client), "DynamoDB at %s", endpoint)
	t.Cleanup(func() {
		_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	return client, s, table
}

// The expiry cases wait on the real clock (the store uses the process's
// clock, but the emulator is reached over a socket, which synctest cannot
// fake). A 500 ms tick keeps the suite short.
func TestConformance(t *testing.T) {
	_, s, _ := setup(t)
	storetest.Run(t, func(t *testing.T) sqsconsumer.IdempotencyStore { return s }, storetest.WithTick(500*time.Millisecond))
}

// The item layout is documented; check it so it does not drift.
func TestItemLayout(t *testing.T) {
	client, s, table := setup(t)
	ctx := t.Context()
	until := time.Now().Add(time.Minute)
	_, err := s.Claim(ctx, "inv_1", "tok", until, "h1")
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, "inv_1", "tok", []byte{0, 1, 2}, time.Hour))
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "inv_1"}}, ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	item := out.Item
	require.Equal(t, &types.AttributeValueMemberS{Value: "tok"}, item["token"])
	require.Equal(t, &types.AttributeValueMemberS{Value: "completed"}, item["status"])
	require.Equal(t, &types.AttributeValueMemberS{Value: "h1"}, item["payload_hash"])
	require.Equal(t, &types.AttributeValueMemberB{Value: []byte{0, 1, 2}}, item["result"])
	expMs := item["expires_ms"].(*types.AttributeValueMemberN).Value
	expS := item["expiration"].(*types.AttributeValueMemberN).Value
	require.Len(t, expMs, 13, "Unix milliseconds")
	require.Len(t, expS, 10, "Unix seconds")
	require.Len(t, item, 7)
}

// oldItemClient makes dynalite answer a failed condition the way DynamoDB
// does when ReturnValuesOnConditionCheckFailure is ALL_OLD (dynalite
// ignores the parameter): with the item as it was. It counts the GetItem
// calls of the store that found an item, which should then be none (an
// absent item comes back as none, so the store looks again).
type oldItemClient struct {
	*dynamodb.Client
	table string
	gets  atomic.Int32
}

func (c *oldItemClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := c.Client.GetItem(ctx, in, optFns...)
	if err == nil && len(out.Item) > 0 {
		c.gets.Add(1) // DynamoDB would have sent this item with the failure
	}
	return out, err
}

func (c *oldItemClient) withOld(ctx context.Context, key map[string]types.AttributeValue, rv types.ReturnValuesOnConditionCheckFailure, err error) error {
	var ccf *types.ConditionalCheckFailedException
	if rv != types.ReturnValuesOnConditionCheckFailureAllOld || !errors.As(err, &ccf) {
		return err
	}
	out, gerr := c.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(c.table), Key: key, ConsistentRead: aws.Bool(true)})
	if gerr != nil {
		return gerr
	}
	return &types.ConditionalCheckFailedException{Message: ccf.Message, Item: out.Item}
}

func (c *oldItemClient) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := c.Client.PutItem(ctx, in, optFns...)
	return out, c.withOld(ctx, map[string]types.AttributeValue{"id": in.Item["id"]}, in.ReturnValuesOnConditionCheckFailure, err)
}

func (c *oldItemClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := c.Client.UpdateItem(ctx, in, optFns...)
	return out, c.withOld(ctx, in.Key, in.ReturnValuesOnConditionCheckFailure, err)
}

// The conformance suite again, with the old item coming back with a failed
// condition, as real DynamoDB sends it: the store reads it from there.
func TestConformanceWithOldItem(t *testing.T) {
	client, _, table := setup(t)
	c := &oldItemClient{Client: client, table: table}
	s, err := dynamostore.New(c, table)
	require.NoError(t, err)
	t.Run("suite", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) sqsconsumer.IdempotencyStore { return s }, storetest.WithTick(500*time.Millisecond))
	})
	require.Zero(t, c.gets.Load(), "the store read the item although the failed condition returned it")
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := &dynamodb.Client{}
	_, err := dynamostore.New(nil, "t")
	require.ErrorContains(t, err, "client is nil")
	_, err = dynamostore.New(c, "")
	require.ErrorContains(t, err, "table name is empty")
	_, err = dynamostore.New(c, "t", dynamostore.WithKeyAttribute(""))
	require.ErrorContains(t, err, "WithKeyAttribute")
}

// fakeTables records UpdateTimeToLive (dynalite does not implement it).
type fakeTables struct {
	dynamostore.TableAPI
	ttl *dynamodb.UpdateTimeToLiveInput
}

func (f *fakeTables) UpdateTimeToLive(_ context.Context, in *dynamodb.UpdateTimeToLiveInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	f.ttl = in
	return &dynamodb.UpdateTimeToLiveOutput{}, nil
}

func TestEnableTTL(t *testing.T) {
	t.Parallel()
	s, err := dynamostore.New(&dynamodb.Client{}, "idem")
	require.NoError(t, err)
	f := &fakeTables{}
	require.NoError(t, s.EnableTTL(t.Context(), f))
	require.Equal(t, "idem", aws.ToString(f.ttl.TableName))
	require.Equal(t, "expiration", aws.ToString(f.ttl.TimeToLiveSpecification.AttributeName))
	require.True(t, aws.ToBool(f.ttl.TimeToLiveSpecification.Enabled))
}

func BenchmarkDynamoStore(b *testing.B) {
	_, s, _ := setup(b)
	storetest.RunBenchmarks(b, s)
}
