package config_test

import (
	"fmt"

	"github.com/floodgate-rl/floodgate/config"
)

func ExampleParseRate() {
	for _, s := range []string{"10/s", "0.5/s", "1/500ms", "100/m"} {
		n, per, err := config.ParseRate(s)
		fmt.Println(s, "=", n, "per", per, err)
	}
	// Output:
	// 10/s = 10 per 1s <nil>
	// 0.5/s = 1 per 2s <nil>
	// 1/500ms = 1 per 500ms <nil>
	// 100/m = 100 per 1m0s <nil>
}
