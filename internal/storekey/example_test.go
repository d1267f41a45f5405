package storekey_test

import (
	"fmt"

	"github.com/floodgate-rl/floodgate/internal/storekey"
)

// Of namespaces a caller's key by rule, so rules never share state
// whatever bytes the keys hold.
func ExampleOf() {
	fmt.Println(storekey.Of("", "login", "user-42"))
	fmt.Println(storekey.Of("app:", "a|b", "c"))
	// Output:
	// login|user-42
	// app:a\|b|c
}
