package redisstore

import (
	"embed"
	"strings"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
)

// The scripts are assembled from the files under scripts/ when the package
// loads. prelude.lua reads and checks the arguments that every algorithm
// takes. Each algorithm's file holds its contract (its leading comment, up
// to the first blank line), then its code. An algorithm's script is its
// contract, the prelude and its code: whole and stand-alone, as Redis runs
// it and as Scripts hands it out.
//
//go:embed scripts/*.lua
var scriptFS embed.FS

// script is one algorithm's script.
type script struct {
	file   string       // file name under scripts/, such as "token_bucket.lua"
	source string       // the whole script: contract, prelude, code
	lua    *rueidis.Lua // EVALSHA with EVAL fallback on NOSCRIPT
}

// scripts holds the script of every algorithm, indexed by algorithm.
var scripts = loadScripts()

func loadScripts() []script {
	prelude := readScript("prelude.lua")
	out := make([]script, floodgate.FixedWindow+1)
	for _, a := range floodgate.Algorithms() {
		file := a.String() + ".lua"
		contract, code := splitContract(file, readScript(file))
		src := contract + "\n" + prelude + "\n" + code
		out[a] = script{file: file, source: src, lua: rueidis.NewLuaScript(src)}
	}
	return out
}

func readScript(file string) string {
	src, err := scriptFS.ReadFile("scripts/" + file)
	if err != nil {
		panic("redisstore: missing embedded script " + file) // a build defect, caught by every test
	}
	return string(src)
}

// splitContract splits a script file after its contract: the leading
// comment, which ends at the first blank line.
func splitContract(file, src string) (contract, code string) {
	i := strings.Index(src, "\n\n")
	if i < 0 || !strings.HasPrefix(src, "-- ") {
		panic("redisstore: " + file + " does not start with its contract and a blank line") // a build defect, caught by every test
	}
	return src[:i+1], src[i+2:]
}

// Scripts returns the Lua source of every algorithm's script, keyed by file
// name ("sliding_window_log.lua", "token_bucket.lua",
// "sliding_window_counter.lua", "fixed_window.lua"). Each is whole and
// stand-alone, as the store sends it: its contract (KEYS, ARGV and replies)
// in its header comment, the prelude that every script shares, then the
// algorithm. docs/LUA.md shows how to call them from redis-cli and other
// languages. Each call returns a new map.
func Scripts() map[string]string {
	m := make(map[string]string, len(floodgate.Algorithms()))
	for _, a := range floodgate.Algorithms() {
		m[scripts[a].file] = scripts[a].source
	}
	return m
}
