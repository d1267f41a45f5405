package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/floodgate-rl/floodgate/redisstore"
)

// runScripts prints one script as it is (its SHA1 is the one --list
// shows), every script with a "-- ==== NAME ====" banner after its first
// line (the "#!lua" one Redis needs first), or writes them into a folder.
func runScripts(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("scripts", "scripts [--out DIR] [--list] [NAME]", stderr)
	out := fs.String("out", "", "write the .lua files into `dir` (created if missing) instead of printing them")
	list := fs.Bool("list", false, "list the scripts with their SHA1 (the EVALSHA digest)")
	if err := parseFlagsArgs(fs, args, 0, 1); err != nil {
		return err
	}
	scripts := redisstore.Scripts()
	names := make([]string, 0, len(scripts))
	for n := range scripts {
		names = append(names, n)
	}
	slices.Sort(names)
	if fs.NArg() == 1 {
		want := strings.TrimSuffix(fs.Arg(0), ".lua") + ".lua"
		if _, ok := scripts[want]; !ok {
			fmt.Fprintf(stderr, "floodgate scripts: no script %q; there are %s\n", fs.Arg(0), strings.Join(names, ", "))
			return errUsage
		}
		names = []string{want}
	}
	switch {
	case *list:
		for _, n := range names {
			sum := sha1.Sum([]byte(scripts[n]))
			fmt.Fprintf(stdout, "%s  %s\n", hex.EncodeToString(sum[:]), n)
		}
	case *out != "":
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		for _, n := range names {
			path := filepath.Join(*out, n)
			if err := os.WriteFile(path, []byte(scripts[n]), 0o644); err != nil {
				return err
			}
			fmt.Fprintln(stdout, path)
		}
	case fs.NArg() == 1:
		// One script exactly as embedded, so that the saved file's SHA1
		// is the one --list prints and EVALSHA uses.
		_, err := io.WriteString(stdout, scripts[names[0]])
		return err
	default:
		for i, n := range names {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			// The banner goes after the "#!lua" line, which Redis needs
			// first: a block copied from its shebang to the next still
			// loads (only its SHA1 differs from --list's).
			first, rest, _ := strings.Cut(scripts[n], "\n")
			fmt.Fprintf(stdout, "%s\n-- ==== %s ====\n%s", first, n, rest)
		}
	}
	return nil
}
