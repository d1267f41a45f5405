package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
)

// behaviors is the configuration of GLOBAL the daemons run with: the
// library's defaults (config.go, SetDefaults), written out so the doc can
// say what they are. A non-owner answers GLOBAL from its own copy and
// queues the hit; it sends its queued hits to the owner GlobalSyncWait
// after the first of them (or when GlobalBatchLimit keys are queued: one
// key here, so never), and the owner broadcasts its state to the others
// GlobalSyncWait after the first change. 100 ms is also floodgate's
// default lease refresh.
func behaviors() gubernator.BehaviorConfig {
	return gubernator.BehaviorConfig{
		BatchTimeout:                  500 * time.Millisecond,
		BatchWait:                     500 * time.Microsecond,
		BatchLimit:                    1000,
		GlobalSyncWait:                100 * time.Millisecond,
		GlobalTimeout:                 500 * time.Millisecond,
		GlobalBatchLimit:              1000,
		GlobalPeerRequestsConcurrency: 100,
	}
}

// guberCluster is gubernator daemons in this process, on loopback ports,
// peered through a static peer list (discovery "none", SetPeers).
type guberCluster struct {
	daemons []*gubernator.Daemon
}

// startGubernator starts n daemons with b and peers them with each other.
func startGubernator(ctx context.Context, n int, b gubernator.BehaviorConfig) (*guberCluster, error) {
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	c := &guberCluster{}
	var peers []gubernator.PeerInfo
	for range n {
		// A daemon finds itself in the peer list by its advertised
		// address, so the gRPC port is chosen before it starts.
		addr, err := freePort()
		if err != nil {
			c.close()
			return nil, err
		}
		d, err := gubernator.SpawnDaemon(ctx, gubernator.DaemonConfig{
			InstanceID:        addr,
			GRPCListenAddress: addr,
			AdvertiseAddress:  addr,
			HTTPListenAddress: "127.0.0.1:0",
			PeerDiscoveryType: "none",
			Behaviors:         b,
			Logger:            logrus.NewEntry(quiet),
		})
		if err != nil {
			c.close()
			return nil, fmt.Errorf("gubernator daemon on %s: %w", addr, err)
		}
		c.daemons = append(c.daemons, d)
		peers = append(peers, gubernator.PeerInfo{GRPCAddress: addr, HTTPAddress: d.HTTPListener.Addr().String()})
	}
	for _, d := range c.daemons {
		d.SetPeers(peers)
	}
	return c, nil
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// owner returns the index of the daemon that owns name_key.
func (c *guberCluster) owner(ctx context.Context, name, key string) (int, error) {
	p, err := c.daemons[0].V1Server.GetPeer(ctx, name+"_"+key)
	if err != nil {
		return -1, err
	}
	for i, d := range c.daemons {
		if d.GRPCListeners[0].Addr().String() == p.Info().GRPCAddress {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no daemon owns %s_%s (%s)", name, key, p.Info().GRPCAddress)
}

// close closes the daemons, waiting for them at most a few seconds:
// v2.13.0's Daemon.Close can hang for good when an interval's goroutine
// is blocked handing its tick to a global manager that stopped reading
// (Interval.run's send on C, waited for by globalManager.Close). It
// reports whether every daemon closed; one that did not is left running
// until the process ends.
func (c *guberCluster) close() bool {
	done := make(chan struct{})
	go func() {
		for _, d := range c.daemons {
			d.Close()
		}
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

// guberLimit is one GLOBAL token bucket of limit per second on one key of
// the cluster. gubernator's token bucket keeps its remaining count until
// the bucket's reset time (its creation plus Duration, on the owner) and
// then starts afresh: a fixed window that starts at the first hit, the
// closest of its algorithms to floodgate's leased fixed window (its leaky
// bucket drains continuously).
type guberLimit struct {
	c         *guberCluster
	name, key string
	limit     int64
}

// caller asks daemon i in process, through the method its gRPC service
// calls (V1Instance.GetRateLimits): no client round trip, as floodgate's
// engines are asked in process.
func (g *guberLimit) caller(i int) decider {
	s := g.c.daemons[i].V1Server
	return func(ctx context.Context) (bool, int64, error) {
		resp, err := s.GetRateLimits(ctx, &gubernator.GetRateLimitsReq{Requests: []*gubernator.RateLimitReq{{
			Name:      g.name,
			UniqueKey: g.key,
			Hits:      1,
			Limit:     g.limit,
			Duration:  time.Second.Milliseconds(),
			Algorithm: gubernator.Algorithm_TOKEN_BUCKET,
			Behavior:  gubernator.Behavior_GLOBAL,
		}}})
		if err != nil {
			return false, 0, err
		}
		r := resp.Responses[0]
		if r.Error != "" {
			return false, 0, errors.New(r.Error)
		}
		return r.Status == gubernator.Status_UNDER_LIMIT, r.ResetTime, nil
	}
}

// resetUntil is the moment before which the owner's window with reset
// time id (Unix milliseconds) cannot have ended: a cache item expires when
// the millisecond clock passes its reset time (CacheItem.IsExpired), and
// the next window is made only then.
func resetUntil(id int64) int64 { return (id + 1) * int64(time.Millisecond) }
