package redisstore

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// ChangesChannel is the Redis pub/sub channel, after the key prefix, on
// which stores with the same Redis and prefix tell each other about
// changes (Broadcast, Listen).
const ChangesChannel = "changes"

// listenRetry is how long Listen waits before subscribing again after
// the subscription failed or the store is not connected yet.
const listenRetry = 100 * time.Millisecond

func (s *Store) channel() string { return s.prefix + ChangesChannel }

// Broadcast publishes msg on the store's change channel, which every
// Listen of a store on the same Redis and key prefix receives (PUBLISH; on
// a cluster every node forwards it). The engine tells other instances
// about resets this way. The error is an outage when Redis cannot be
// reached.
func (s *Store) Broadcast(ctx context.Context, msg string) error {
	if err := s.connected(); err != nil {
		return err
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	err := s.client.Do(ctx, s.client.B().Publish().Channel(s.channel()).Message(msg).Build()).Error()
	if err != nil {
		return classify(ctx, "publish", err)
	}
	return nil
}

// Listen calls fn with every message published on the store's change
// channel until ctx ends, then returns ctx's error. It subscribes again
// whenever the subscription breaks (messages published meanwhile are not
// seen: a listener that must know sends itself heartbeats). fn runs on the
// connection's reader and must not block.
func (s *Store) Listen(ctx context.Context, fn func(msg string)) error {
	for ctx.Err() == nil {
		if s.connected() == nil {
			_ = s.client.Receive(ctx, s.client.B().Subscribe().Channel(s.channel()).Build(), func(m rueidis.PubSubMessage) {
				fn(m.Message)
			})
		}
		select {
		case <-ctx.Done():
		case <-time.After(listenRetry):
		}
	}
	return ctx.Err()
}
