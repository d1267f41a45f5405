package redisstore

import (
	"embed"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// script is one algorithm's embedded Lua script.
type script struct {
	file   string // file name under scripts/, such as "token_bucket.lua"
	source string
	lua    *rueidis.Lua // EVALSHA with EVAL fallback on NOSCRIPT
}

// scripts holds the script of every algorithm, indexed by algorithm.
var scripts = loadScripts()

func loadScripts() []script {
	out := make([]script, floodgate.FixedWindow+1)
	for _, a := range floodgate.Algorithms() {
		file := a.String() + ".lua"
		src, err := scriptFS.ReadFile("scripts/" + file)
		if err != nil {
			panic("redisstore: missing embedded script " + file) // a build defect, caught by every test
		}
		out[a] = script{file: file, source: string(src), lua: rueidis.NewLuaScript(string(src))}
	}
	return out
}

// Scripts returns the Lua source of every algorithm's script, keyed by file
// name ("sliding_window_log.lua", "token_bucket.lua",
// "sliding_window_counter.lua", "fixed_window.lua"). Each file's header
// comment gives its KEYS/ARGV/reply contract; docs/LUA.md shows how to call
// them from redis-cli and other languages. Each call returns a new map.
func Scripts() map[string]string {
	m := make(map[string]string, len(floodgate.Algorithms()))
	for _, a := range floodgate.Algorithms() {
		m[scripts[a].file] = scripts[a].source
	}
	return m
}
