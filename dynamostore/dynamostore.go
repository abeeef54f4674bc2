// Package dynamostore is an sqsconsumer.IdempotencyStore in an Amazon
// DynamoDB table, for consumers that already live on AWS and want no
// server of their own. It uses conditional writes the way AWS Lambda
// Powertools' idempotency utility does: a claim is a PutItem that succeeds
// only if no live item has the key, and every later change is conditioned
// on the claim's token.
//
// # Table
//
// A table whose partition key is a string attribute (named "id" unless
// WithKeyAttribute says otherwise) and no sort key. Store.CreateTable
// creates one (on-demand capacity) when asked; nothing is created
// implicitly. Each item has the attributes
//
//	id           S  the idempotency key
//	token        S  fencing token of the claim or completion
//	status       S  "in_progress" or "completed"
//	expires_ms   N  end of the claim or completion, Unix milliseconds
//	expiration   N  the same, rounded up to Unix seconds: the table's TTL attribute
//	payload_hash S  present when the payload is validated
//	result       B  present when a completion stored a non-empty result
//
// An item whose expires_ms has passed counts as absent, and the next Claim
// of its key overwrites it. DynamoDB deletes expired items by itself once
// Time to Live is enabled on "expiration" (Store.EnableTTL, or the console);
// that only reclaims space, usually within a few days of expiry.
//
// # Time
//
// DynamoDB conditions cannot read the server's clock, so expiry is decided
// by the clocks of the processes using the store (as with Powertools):
// keep them synchronised (NTP, as on every AWS host). A process whose clock
// runs ahead could take over a claim early.
package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqskit/sqsconsumer"
)

// DefaultKeyAttribute is the name of the partition key attribute unless
// WithKeyAttribute says otherwise.
const DefaultKeyAttribute = "id"

// Attribute names other than the key's.
const (
	attrToken      = "token"
	attrStatus     = "status"
	attrExpiresMs  = "expires_ms"
	attrExpiration = "expiration" // the TTL attribute, Unix seconds
	attrHash       = "payload_hash"
	attrResult     = "result"

	statusInProgress = "in_progress"
	statusCompleted  = "completed"
)

// maxClaimAttempts bounds the retries of a Claim that lost a race with an
// item that changed between its PutItem and the read that followed.
const maxClaimAttempts = 5

// API is the part of the DynamoDB API the store calls for its records.
// *dynamodb.Client satisfies it.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// TableAPI is what CreateTable and EnableTTL call. *dynamodb.Client
// satisfies it.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

var _ API = (*dynamodb.Client)(nil)
var _ TableAPI = (*dynamodb.Client)(nil)

// Store is an sqsconsumer.IdempotencyStore in a DynamoDB table. Make one
// with New. Safe for concurrent use, from many processes at once.
type Store struct {
	client  API
	table   string
	keyAttr string
}

var _ sqsconsumer.IdempotencyStore = (*Store)(nil)

// Option configures New.
type Option func(*Store)

// WithKeyAttribute sets the name of the table's partition key attribute
// (a string). Default DefaultKeyAttribute ("id").
func WithKeyAttribute(name string) Option { return func(s *Store) { s.keyAttr = name } }

// New returns a Store that keeps its records in table through client. It
// makes no call. It returns an error for a nil client or an empty table or
// key attribute name.
func New(client API, table string, opts ...Option) (*Store, error) {
	s := &Store{client: client, table: table, keyAttr: DefaultKeyAttribute}
	for _, o := range opts {
		o(s)
	}
	switch {
	case client == nil:
		return nil, errors.New("dynamostore: New: client is nil")
	case table == "":
		return nil, errors.New("dynamostore: New: table name is empty")
	case s.keyAttr == "":
		return nil, errors.New("dynamostore: New: WithKeyAttribute(\"\"): name is empty")
	}
	return s, nil
}

// CreateTable creates the store's table with on-demand capacity and waits
// (up to 2 minutes, and within ctx) until it is ACTIVE. It fails if the
// table exists.
func (s *Store) CreateTable(ctx context.Context, api TableAPI) error {
	out, err := api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(s.table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(s.keyAttr), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(s.keyAttr), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		return fmt.Errorf("dynamostore: CreateTable %s: %w", s.table, err)
	}
	if out.TableDescription != nil && out.TableDescription.TableStatus == types.TableStatusActive {
		return nil
	}
	w := dynamodb.NewTableExistsWaiter(api, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 500*time.Millisecond, 5*time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.table)}, 2*time.Minute); err != nil {
		return fmt.Errorf("dynamostore: CreateTable %s: waiting for ACTIVE: %w", s.table, err)
	}
	return nil
}

// EnableTTL turns on DynamoDB's Time to Live on the "expiration" attribute,
// so that DynamoDB deletes expired items by itself.
func (s *Store) EnableTTL(ctx context.Context, api TableAPI) error {
	_, err := api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(s.table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attrExpiration), Enabled: aws.Bool(true)},
	})
	if err != nil {
		return fmt.Errorf("dynamostore: EnableTTL %s: %w", s.table, err)
	}
	return nil
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// expiryAttrs returns expires_ms and expiration for an absolute time.
func expiryAttrs(t time.Time) (types.AttributeValue, types.AttributeValue) {
	m := ms(t)
	return num(m), num((m + 999) / 1000)
}

// clampUntil makes until at least 1 ms after now, in whole milliseconds
// (rounded up).
func clampUntil(now, until time.Time) time.Time {
	if until.Sub(now) < time.Millisecond {
		until = now.Add(time.Millisecond)
	}
	return time.UnixMilli(ms(until.Add(time.Millisecond - time.Nanosecond)))
}

func (s *Store) key(k string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{s.keyAttr: str(k)}
}

func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dynamostore: %s: %w", op, context.Cause(ctx))
	}
	return nil
}

// record is a decoded item.
type record struct {
	token, status, hash string
	expires             time.Time
	result              []byte
}

func decode(item map[string]types.AttributeValue) (record, bool) {
	if len(item) == 0 {
		return record{}, false
	}
	var r record
	if v, ok := item[attrToken].(*types.AttributeValueMemberS); ok {
		r.token = v.Value
	}
	if v, ok := item[attrStatus].(*types.AttributeValueMemberS); ok {
		r.status = v.Value
	}
	if v, ok := item[attrHash].(*types.AttributeValueMemberS); ok {
		r.hash = v.Value
	}
	if v, ok := item[attrExpiresMs].(*types.AttributeValueMemberN); ok {
		if n, err := strconv.ParseInt(v.Value, 10, 64); err == nil {
			r.expires = time.UnixMilli(n)
		}
	}
	if v, ok := item[attrResult].(*types.AttributeValueMemberB); ok && len(v.Value) > 0 {
		r.result = v.Value
	}
	return r, true
}

// current returns the item the failed condition saw (when DynamoDB sent it
// back) or reads the item now.
func (s *Store) current(ctx context.Context, key string, ccf *types.ConditionalCheckFailedException) (record, bool, error) {
	if ccf != nil && len(ccf.Item) > 0 {
		r, ok := decode(ccf.Item)
		return r, ok, nil
	}
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: s.key(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return record{}, false, err
	}
	r, ok := decode(out.Item)
	return r, ok, nil
}

// Claim implements sqsconsumer.IdempotencyStore.
func (s *Store) Claim(ctx context.Context, key, token string, until time.Time, payloadHash string) (sqsconsumer.ClaimResult, error) {
	if err := ctxErr(ctx, "Claim"); err != nil {
		return sqsconsumer.ClaimResult{}, err
	}
	for range maxClaimAttempts {
		now := time.Now()
		until := clampUntil(now, until)
		expMs, expiration := expiryAttrs(until)
		item := map[string]types.AttributeValue{
			s.keyAttr:      str(key),
			attrToken:      str(token),
			attrStatus:     str(statusInProgress),
			attrExpiresMs:  expMs,
			attrExpiration: expiration,
		}
		if payloadHash != "" {
			item[attrHash] = str(payloadHash)
		}
		_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                           aws.String(s.table),
			Item:                                item,
			ConditionExpression:                 aws.String("attribute_not_exists(#k) OR #e <= :now"),
			ExpressionAttributeNames:            map[string]string{"#k": s.keyAttr, "#e": attrExpiresMs},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":now": num(ms(now))},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return sqsconsumer.ClaimResult{Status: sqsconsumer.ClaimAcquired, Until: until}, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return sqsconsumer.ClaimResult{}, fmt.Errorf("dynamostore: Claim %q: %w", key, err)
		}
		r, ok, err := s.current(ctx, key, ccf)
		if err != nil {
			return sqsconsumer.ClaimResult{}, fmt.Errorf("dynamostore: Claim %q: %w", key, err)
		}
		if !ok || !time.Now().Before(r.expires) {
			continue // deleted or expired since the PutItem: try again
		}
		switch {
		case payloadHash != "" && r.hash != "" && r.hash != payloadHash:
			return sqsconsumer.ClaimResult{}, fmt.Errorf("dynamostore: Claim %q: %w", key, sqsconsumer.ErrPayloadMismatch)
		case r.status == statusCompleted:
			return sqsconsumer.ClaimResult{Status: sqsconsumer.ClaimCompleted, Result: r.result, Until: r.expires}, nil
		default:
			return sqsconsumer.ClaimResult{Status: sqsconsumer.ClaimInProgress, Until: r.expires}, nil
		}
	}
	return sqsconsumer.ClaimResult{}, fmt.Errorf("dynamostore: Claim %q: the item kept changing under %d attempts", key, maxClaimAttempts)
}

// heldCondition holds while token has a live claim on the item.
const heldCondition = "#t = :token AND #s = :prog AND #e > :now"

// Extend implements sqsconsumer.IdempotencyStore.
func (s *Store) Extend(ctx context.Context, key, token string, until time.Time) error {
	if err := ctxErr(ctx, "Extend"); err != nil {
		return err
	}
	now := time.Now()
	expMs, expiration := expiryAttrs(clampUntil(now, until))
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      s.key(key),
		UpdateExpression:         aws.String("SET #e = :exp, #x = :ttl"),
		ConditionExpression:      aws.String(heldCondition),
		ExpressionAttributeNames: map[string]string{"#t": attrToken, "#s": attrStatus, "#e": attrExpiresMs, "#x": attrExpiration},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":token": str(token), ":prog": str(statusInProgress), ":now": num(ms(now)), ":exp": expMs, ":ttl": expiration,
		},
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return fmt.Errorf("dynamostore: Extend %q: %w", key, sqsconsumer.ErrClaimLost)
	case err != nil:
		return fmt.Errorf("dynamostore: Extend %q: %w", key, err)
	}
	return nil
}

// Complete implements sqsconsumer.IdempotencyStore.
func (s *Store) Complete(ctx context.Context, key, token string, result []byte, ttl time.Duration) error {
	if err := ctxErr(ctx, "Complete"); err != nil {
		return err
	}
	now := time.Now()
	expMs, expiration := expiryAttrs(clampUntil(now, now.Add(ttl)))
	update := "SET #s = :done, #e = :exp, #x = :ttl"
	names := map[string]string{"#t": attrToken, "#s": attrStatus, "#e": attrExpiresMs, "#x": attrExpiration}
	values := map[string]types.AttributeValue{
		":token": str(token), ":prog": str(statusInProgress), ":done": str(statusCompleted),
		":now": num(ms(now)), ":exp": expMs, ":ttl": expiration,
	}
	if len(result) > 0 {
		update += ", #r = :result"
		names["#r"] = attrResult
		values[":result"] = &types.AttributeValueMemberB{Value: result}
	}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 s.key(key),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(heldCondition),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		// Completed by this token already? Then this is a repeat: fine.
		r, ok, gerr := s.current(ctx, key, ccf)
		if gerr != nil {
			return fmt.Errorf("dynamostore: Complete %q: %w", key, gerr)
		}
		if ok && r.token == token && r.status == statusCompleted && time.Now().Before(r.expires) {
			return nil
		}
		return fmt.Errorf("dynamostore: Complete %q: %w", key, sqsconsumer.ErrClaimLost)
	}
	if err != nil {
		return fmt.Errorf("dynamostore: Complete %q: %w", key, err)
	}
	return nil
}

// Release implements sqsconsumer.IdempotencyStore.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if err := ctxErr(ctx, "Release"); err != nil {
		return err
	}
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(s.table),
		Key:                       s.key(key),
		ConditionExpression:       aws.String("#t = :token AND #s = :prog"),
		ExpressionAttributeNames:  map[string]string{"#t": attrToken, "#s": attrStatus},
		ExpressionAttributeValues: map[string]types.AttributeValue{":token": str(token), ":prog": str(statusInProgress)},
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("dynamostore: Release %q: %w", key, err)
	}
	return nil
}
