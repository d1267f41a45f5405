package callbound

import (
	"context"
	"testing"
	"time"
)

func TestFrom(t *testing.T) {
	ctx := context.Background()
	if _, ok := From(ctx); ok {
		t.Error("From(Background) found a bound")
	}
	if d, ok := From(With(ctx, time.Second)); !ok || d != time.Second {
		t.Errorf("From(With(1s)) = %v, %v", d, ok)
	}
	if _, ok := From(With(ctx, 0)); ok {
		t.Error("From(With(0)) found a bound")
	}
}
