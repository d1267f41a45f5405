package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate/internal/algorithmlist"
)

// The scripts are assembled from scripts/ when the package loads. An
// algorithm's script is its file's contract (the leading comment, up to the
// first blank line), prelude.lua (the shared argument checks) and its code.
// The batch script wraps each algorithm's code in a function of KEYS and
// ARGV named after it, between batch.lua's contract and code, so every item
// of a batch runs exactly its algorithm's code.
//
//go:embed scripts/*.lua
var scriptFS embed.FS

// script is one script: an algorithm's or the batch.
type script struct {
	file   string       // file name under scripts/, such as "token_bucket.lua"
	source string       // the whole script: contract, then code
	code   string       // the code alone
	sha    string       // the SHA1 of source, for EVALSHA
	lua    *rueidis.Lua // EVALSHA with EVAL fallback on NOSCRIPT
}

// scripts holds the script of every algorithm, indexed by algorithm.
var scripts = loadScripts()

// batch is the batch script.
var batch = loadBatch(scripts)

const batchFile = "batch.lua"

// shebang starts every script: Redis 7 then refuses it before it runs,
// rather than at its first write, when over maxmemory (noeviction) or on a
// read-only replica, and checks that its keys are declared and share a slot.
const shebang = "#!lua\n"

func newScript(file, source, code string) script {
	source = shebang + source
	sum := sha1.Sum([]byte(source))
	return script{file: file, source: source, code: code, sha: hex.EncodeToString(sum[:]), lua: rueidis.NewLuaScript(source)}
}

func loadScripts() []script {
	prelude := readScript("prelude.lua")
	algs := algorithmlist.All()
	out := make([]script, algs[len(algs)-1]+1) // indexed by Algorithm
	for _, a := range algs {
		file := a.String() + ".lua"
		contract, code := splitContract(file, readScript(file))
		code = prelude + "\n" + code
		out[a] = newScript(file, contract+"\n"+code, code)
	}
	return out
}

func loadBatch(scripts []script) script {
	contract, code := splitContract(batchFile, readScript(batchFile))
	var b strings.Builder
	b.WriteString(contract)
	for _, a := range algorithmlist.All() {
		fmt.Fprintf(&b, "\n-- %s, without its contract, as a function\nlocal function %s(KEYS, ARGV, redis)\n%send\n", scripts[a].file, a, scripts[a].code)
	}
	b.WriteString("\n-- the algorithms by their keys' suffixes\nlocal algorithms = {")
	for i, a := range algorithmlist.All() {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s = %s", suffixes[a], a)
	}
	b.WriteString(" }\nlocal algorithm_names = '")
	for i, a := range algorithmlist.All() {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "\"%s\"", suffixes[a])
	}
	b.WriteString("'\n\n")
	b.WriteString(code)
	return newScript(batchFile, b.String(), code)
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
// "sliding_window_counter.lua", "fixed_window.lua"), and of the batch
// script that decides several checks at once ("batch.lua"). Each is whole
// and stand-alone, as the store sends it: its contract (KEYS, ARGV and
// replies) in its header comment, then the code, which starts with the
// prelude that every script shares. docs/LUA.md shows how to call them
// from redis-cli and other languages. Each call returns a new map.
func Scripts() map[string]string {
	m := make(map[string]string, len(algorithmlist.All())+1)
	for _, a := range algorithmlist.All() {
		m[scripts[a].file] = scripts[a].source
	}
	m[batch.file] = batch.source
	return m
}
