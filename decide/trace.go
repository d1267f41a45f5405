// Spans: one per decision and one per store call, when Options.TracerProvider
// is set. docs/OBSERVABILITY.md lists their names and attributes.

package decide

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the engine's spans.
const tracerName = "github.com/floodgate-rl/floodgate/decide"

// Span names and attribute keys (docs/OBSERVABILITY.md). The names follow
// Limitador's span attributes and ASP.NET Core's rate-limiting metrics:
// OpenTelemetry has no convention for rate limiting yet.
const (
	spanDecide = "floodgate.decide"
	spanStore  = "floodgate.store."

	attrLimitName      = attribute.Key("ratelimit.limit_name")
	attrHitsAddend     = attribute.Key("ratelimit.hits_addend")
	attrShadow         = attribute.Key("ratelimit.shadow")
	attrLimited        = attribute.Key("ratelimit.limited")
	attrResult         = attribute.Key("ratelimit.result")
	attrDecidingRule   = attribute.Key("ratelimit.deciding_rule")
	attrRemaining      = attribute.Key("ratelimit.most_restrictive.remaining")
	attrQuota          = attribute.Key("ratelimit.most_restrictive.limit")
	attrRetryAfter     = attribute.Key("ratelimit.retry_after_ms")
	attrDecidedLocally = attribute.Key("ratelimit.decided_locally")
	attrLocalReason    = attribute.Key("ratelimit.local_reason")
	attrShadowLimited  = attribute.Key("ratelimit.shadow_limited")
	attrStoreOp        = attribute.Key("ratelimit.store.operation")
	attrStoreItems     = attribute.Key("ratelimit.store.items")
)

// The spans' start options, made once: an option passed by value to Start
// would be allocated on every call.
var (
	decideStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	storeStart  = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

// startDecision starts the span of a decision on checks; nil without a
// tracer.
func (e *Engine) startDecision(ctx context.Context, checks []Check) (context.Context, trace.Span) {
	if e.tracer == nil {
		return ctx, nil
	}
	ctx, span := e.tracer.Start(ctx, spanDecide, decideStart...)
	if !span.IsRecording() {
		return ctx, span
	}
	names := make([]string, len(checks))
	costs := make([]int64, len(checks))
	shadow := make([]bool, len(checks))
	for i := range checks {
		names[i], costs[i], shadow[i] = checks[i].Rule, checks[i].cost(), checks[i].Shadow
	}
	span.SetAttributes(attrLimitName.StringSlice(names), attrHitsAddend.Int64Slice(costs), attrShadow.BoolSlice(shadow))
	return ctx, span
}

// endDecision ends the span of r's decision, saying its verdict, the
// deciding check, and whether the store was not asked (cache, lease,
// fallback).
func endDecision(span trace.Span, r *Result) {
	if !span.IsRecording() {
		span.End()
		return
	}
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, attrLimited.Bool(r.Verdict == Denied), attrResult.String(r.Verdict.String()))
	if i := r.Deciding; i >= 0 {
		o := &r.Outcomes[i]
		attrs = append(attrs, attrDecidingRule.String(r.Checks[i].Rule))
		if o.Decided {
			attrs = append(attrs, attrRemaining.Int64(o.Decision.Remaining), attrQuota.Int64(o.Limit.Quota))
		}
	}
	if r.RetryAfter > 0 {
		attrs = append(attrs, attrRetryAfter.Int64(r.RetryAfter.Milliseconds()))
	}
	local := localReason(r)
	attrs = append(attrs, attrDecidedLocally.Bool(local != ""))
	if local != "" {
		attrs = append(attrs, attrLocalReason.String(local))
	}
	var shadowDenied []string
	for i := range r.Checks {
		if r.Checks[i].Shadow && r.Outcomes[i].WouldDeny() {
			shadowDenied = append(shadowDenied, r.Checks[i].Rule)
		}
	}
	if shadowDenied != nil {
		attrs = append(attrs, attrShadowLimited.StringSlice(shadowDenied))
	}
	span.SetAttributes(attrs...)
	switch r.Verdict {
	case Unavailable, StoreError:
		if err := r.Err(); err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// localReason says why the deciding check (else the first enforced one that
// was) was decided without the store: "cache", "lease", "fallback" (the
// local fallback) or "failure_mode" (an outage under fail-open or
// fail-closed); "" when the store decided.
func localReason(r *Result) string {
	reason := func(o *Outcome) string {
		switch {
		case o.Local:
			return "fallback"
		case o.Cached:
			return "cache"
		case o.Leased:
			return "lease"
		case o.Verdict == Unavailable:
			return "failure_mode"
		}
		return ""
	}
	if i := r.Deciding; i >= 0 {
		if s := reason(&r.Outcomes[i]); s != "" {
			return s
		}
	}
	for i := range r.Outcomes {
		if r.Checks[i].Shadow {
			continue
		}
		if s := reason(&r.Outcomes[i]); s != "" {
			return s
		}
	}
	return ""
}

// storeCall is a store call under way, for OnStoreCall and its span.
type storeCall struct {
	start time.Time  // zero without OnStoreCall
	span  trace.Span // nil without a tracer
}

// callStart starts a store call of op on items keys: the time, for
// OnStoreCall, and a child span of ctx's span when that one is recorded (a
// decision's that was sampled): none under a decision that is not, nor
// outside a decision (a background lease refill). Neither costs anything
// without OnStoreCall and a tracer.
func (e *Engine) callStart(ctx context.Context, op string, items int) (context.Context, storeCall) {
	var c storeCall
	if e.onCall != nil {
		c.start = time.Now()
	}
	if e.tracer != nil && trace.SpanFromContext(ctx).IsRecording() {
		ctx, c.span = e.tracer.Start(ctx, spanStore+op, storeStart...)
		c.span.SetAttributes(attrStoreOp.String(op), attrStoreItems.Int(items))
	}
	return ctx, c
}

// called ends the store call c of op begun by callStart; err is its error
// (for a batch, the first item's).
func (e *Engine) called(ctx context.Context, op string, c storeCall, err error) {
	if e.onCall != nil {
		e.onCall(ctx, op, time.Since(c.start))
	}
	if c.span != nil {
		if err != nil {
			c.span.RecordError(err)
			c.span.SetStatus(codes.Error, err.Error())
		}
		c.span.End()
	}
}
