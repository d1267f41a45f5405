package simulate_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/floodgate-rl/floodgate/simulate"
)

// The seed's boundary-burst attack against a limit of 100 per minute: 100
// requests in the second before a minute's end and 100 in the second after.
func Example() {
	boundary, err := simulate.LookupPatterns("boundary-burst")
	if err != nil {
		log.Fatal(err)
	}
	backend := simulate.NewMemoryBackend()
	defer backend.Close()
	rep, err := simulate.Run(context.Background(), simulate.Config{
		Limit:    100,
		Window:   time.Minute,
		Duration: 3 * time.Minute,
		Patterns: boundary,
	}, backend)
	if err != nil {
		log.Fatal(err)
	}
	for _, x := range rep.Results {
		fmt.Printf("%-22s admitted %3d of %d, at most %3d in any minute, %3d within 2s\n",
			x.Algorithm, x.Admitted, x.Requests, x.MaxInWindow, simulate.MaxInWindow(x.Admissions, 2*time.Second))
	}
	// Output:
	// sliding_window_log     admitted 100 of 200, at most 100 in any minute, 100 within 2s
	// token_bucket           admitted 103 of 200, at most 103 in any minute, 103 within 2s
	// sliding_window_counter admitted 101 of 200, at most 101 in any minute, 101 within 2s
	// fixed_window           admitted 200 of 200, at most 200 in any minute, 200 within 2s
}

func ExampleMaxInWindow() {
	admitted := []time.Duration{0, 30 * time.Second, 59 * time.Second, 60 * time.Second, 61 * time.Second}
	// [0s, 60s) holds three admissions, [30s, 90s) four.
	fmt.Println(simulate.MaxInWindow(admitted, time.Minute))
	// Output: 4
}
