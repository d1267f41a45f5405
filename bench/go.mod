module github.com/floodgate-rl/floodgate/bench

go 1.26.8

require github.com/floodgate-rl/floodgate v0.0.0

require golang.org/x/time v0.16.0

replace github.com/floodgate-rl/floodgate => ../
