package server

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/server/live"
)

// labRecentMax caps a lab's list of recent requests: the busiest traffic the
// page sends (boundary at limit 100, three tries) is 600 requests.
const labRecentMax = 600

// labRecentKey is where a lab keeps its recent requests, beside its windows
// and in their cluster slot: rate_limit:{lab:<name>}:@lab:requests, a list
// of the answers of POST /api/v1/lab/check, oldest first. No algorithm is
// named "requests", so it never meets a window.
func labRecentKey(lab string) string {
	return redisdata.LogKey(labKey(lab), labPolicy) + ":requests"
}

// labRecent keeps each lab's recent requests in Redis, so a reloaded tab or
// one that joins late draws what the others drew: a capped list that expires
// one window after its newest request, as the lab's windows do.
type labRecent struct {
	rdb     redis.Cmdable
	timeout time.Duration
}

// record appends one request's answer.
func (l labRecent) record(ctx context.Context, r live.LabResult) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("failed to encode a lab request: %w", err)
	}
	k := labRecentKey(r.Lab)
	pipe := l.rdb.TxPipeline()
	pipe.RPush(ctx, k, b)
	pipe.LTrim(ctx, k, -labRecentMax, -1)
	pipe.PExpire(ctx, k, time.Duration(r.WindowMs)*time.Millisecond)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("failed to record a lab request: %w", err)
	}
	return nil
}

// forget empties a lab's list, as a reset empties its windows.
func (l labRecent) forget(ctx context.Context, lab string) error {
	if err := l.rdb.Del(ctx, labRecentKey(lab)).Err(); err != nil {
		return fmt.Errorf("failed to forget a lab's requests: %w", err)
	}
	return nil
}

// read returns a lab's recent requests, oldest first; entries that do not
// decode (none are written so) are skipped.
func (l labRecent) read(ctx context.Context, lab string) ([]live.LabResult, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	raw, err := l.rdb.LRange(ctx, labRecentKey(lab), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("failed to read a lab's requests: %w", err)
	}
	out := make([]live.LabResult, 0, len(raw))
	for _, s := range raw {
		var r live.LabResult
		if json.Unmarshal([]byte(s), &r) == nil && r.Lab == lab {
			out = append(out, r)
		}
	}
	return out, nil
}
