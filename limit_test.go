package floodgate

import (
	"errors"
	"testing"
)

func TestAlgorithmText(t *testing.T) {
	for i := range algorithmNames[1:] {
		a := Algorithm(i + 1)
		b, err := a.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Algorithm
		if err := back.UnmarshalText(b); err != nil || back != a {
			t.Fatalf("round trip of %s gave %v, %v", a, back, err)
		}
	}
	var a Algorithm
	if err := a.UnmarshalText([]byte("leaky_bucket")); !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("UnmarshalText(leaky_bucket) = %v, want ErrInvalidLimit", err)
	}
	if _, err := Algorithm(0).MarshalText(); err == nil {
		t.Fatal("MarshalText of the zero Algorithm succeeded")
	}
}
