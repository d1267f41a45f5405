module github.com/floodgate-rl/floodgate

go 1.26.8
