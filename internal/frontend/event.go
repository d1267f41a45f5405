package frontend

import "github.com/floodgate-rl/floodgate/decide"

// Event is what a front end counts and reports about one check of a
// decided request, besides the verdict.
type Event uint8

const (
	// NoEvent: nothing to report.
	NoEvent Event = iota
	// KeyFailed: the front end could not build the check (Check.Err).
	KeyFailed
	// StoreFailed: the store failed or timed out for the check, and not
	// because the caller went away.
	StoreFailed
	// ShadowDenied: a shadow check would have denied the request, or
	// refused it as invalid (its cost can never fit the rule's limit).
	ShadowDenied
)

// EventOf returns what the front ends report about check i of r;
// callerGone says that the request's context has ended (its store failures
// are then the caller's doing, not the store's). A refund that failed
// (Outcome.RefundErr) is reported besides, whatever the event.
func EventOf(r *decide.Result, i int, callerGone bool) Event {
	c, o := &r.Checks[i], &r.Outcomes[i]
	switch {
	case c.Err != nil:
		return KeyFailed
	case o.Err != nil && o.Verdict != decide.Invalid && !callerGone:
		return StoreFailed
	case c.Shadow && o.WouldDeny():
		return ShadowDenied
	}
	return NoEvent
}
