package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/decide"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// leaseCell is leasebench's lease cell: engines, each on its own Redis
// client to the harness's Redis Cluster, deciding one fixed window of limit
// per second on one key with `lease: {}` (the defaults).
type leaseCell struct {
	engines []*decide.Engine
	closers []func()
	check   decide.Check
}

// newLeaseCell starts instances engines on the cluster at addrs, the key
// under a prefix of its own.
func newLeaseCell(addrs []string, instances int, limit int64, prefix string) (*leaseCell, error) {
	c := &leaseCell{check: decide.Check{
		Rule:    "hot",
		Key:     "tenant",
		Limit:   floodgate.NewLimit(floodgate.FixedWindow, limit, time.Second),
		Failure: decide.FailClosed,
		Lease:   &decide.LeaseOptions{},
	}}
	for range instances {
		s, err := redisstore.New(redisstore.Config{Mode: redisstore.ModeCluster, Addrs: addrs, KeyPrefix: prefix})
		if err != nil {
			c.close()
			return nil, err
		}
		c.closers = append(c.closers, s.Close)
		e, err := decide.New(s, decide.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			c.close()
			return nil, err
		}
		c.engines = append(c.engines, e)
	}
	return c, nil
}

func (c *leaseCell) caller(i int) decider {
	e := c.engines[i]
	checks := []decide.Check{c.check}
	out := make([]decide.Outcome, 1)
	return func(ctx context.Context) (bool, int64, error) {
		r := e.DecideInto(ctx, checks, out)
		switch r.Verdict {
		case decide.Admitted:
			return true, 0, nil
		case decide.Denied:
			return false, 0, nil
		}
		return false, 0, fmt.Errorf("floodgate: %v: %v", r.Verdict, out[0].Err)
	}
}

// close ends the engines (giving back what they hold) and their clients.
func (c *leaseCell) close() {
	for _, e := range c.engines {
		_ = e.Close(context.Background())
	}
	for _, f := range c.closers {
		f()
	}
}
