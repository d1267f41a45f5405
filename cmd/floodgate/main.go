// Command floodgate is the floodgate rate limiter's command-line tool: the
// standalone server and its helpers. Run "floodgate help" for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		if starting.Load() {
			fmt.Fprintln(os.Stderr, "floodgate: interrupted while starting; exiting")
			os.Exit(1)
		}
	}()
	err := run(ctx, peerArgs(os.Args[0], os.Args[1:]), os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errUsage) && !errors.Is(err, errDenied) {
			msg := err.Error()
			if !strings.HasPrefix(msg, "floodgate:") && !strings.HasPrefix(msg, "floodgate ") {
				msg = "floodgate: " + msg
			}
			fmt.Fprintln(os.Stderr, msg)
		}
		os.Exit(exitCode(err))
	}
}

// starting is set while serve starts: a SIGTERM or SIGINT then ends the
// process at once, as no stage of start-up (reading files, connecting to
// the store) waits on the signal; once serving, it shuts down gracefully.
var starting atomic.Bool

// peerBinary is where envoyproxy/ratelimit's image has its binary; the
// floodgate image installs floodgate there too.
const peerBinary = "/bin/ratelimit"

// peerArgs returns the arguments to run for a process started as argv0
// with args: "serve --envoy-env" and the rest when it was started as
// envoyproxy/ratelimit's binary, which the peer's manifests run bare,
// either by that name (Kubernetes' command: [/bin/ratelimit]) or as the
// image entrypoint's first argument (docker compose); args otherwise.
func peerArgs(argv0 string, args []string) []string {
	switch {
	case filepath.Base(argv0) == "ratelimit":
		return append([]string{"serve", "--envoy-env"}, args...)
	case len(args) > 0 && args[0] == peerBinary:
		return append([]string{"serve", "--envoy-env"}, args[1:]...)
	}
	return args
}

// errUsage marks a usage error already reported to the user.
var errUsage = errors.New("usage error")

func exitCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errUsage) {
		return 2
	}
	if errors.Is(err, errDenied) {
		return 3
	}
	return 1
}

// command is one subcommand: its one-line summary and its entry point.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands lists the subcommands. Each lives in a file of its own.
func commands() map[string]command {
	return map[string]command{
		"version":  {"print the version", runVersion},
		"serve":    {"run the rate-limit server (HTTP API, metrics)", runServe},
		"check":    {"decide one request from the command line against a config's store", runCheck},
		"config":   {"validate a config file, or print the example", runConfig},
		"simulate": {"run traffic patterns against every algorithm on a virtual clock", runSimulate},
		"scripts":  {"print or export the Redis Lua scripts, for use from other languages", runScripts},
		"bench":    {"load-test a store, or a running floodgate serve over HTTP or gRPC", runBench},
		"health":   {"ask a running floodgate serve's readiness or liveness probe; exit 0 only if healthy", runHealth},
	}
}

// run is main without the process: tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		usage(stdout, cmds)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "floodgate: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return errUsage
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "floodgate: a distributed rate limiter.")
	fmt.Fprintln(w, "\nUsage: floodgate <command> [flags]   (floodgate <command> --help for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
}

// newFlagSet returns a flag set for a subcommand that prints its usage to
// stderr and returns errors instead of exiting.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("floodgate "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: floodgate %s\n\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args of a command that takes no positional argument,
// mapping a bad flag or an unexpected argument to errUsage (already
// printed).
func parseFlags(fs *flag.FlagSet, args []string) error {
	return parseFlagsArgs(fs, args, 0, 0)
}

// parseFlagsArgs parses args of a command that takes between least and most
// positional arguments, mapping a bad flag or a wrong number of arguments to
// errUsage (already printed). Flags after the first argument are not
// parsed (the flag package stops there), so an argument before them is
// reported, never silently followed by ignored flags.
func parseFlagsArgs(fs *flag.FlagSet, args []string, least, most int) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	switch n := fs.NArg(); {
	case n > most:
		extra := fs.Arg(most)
		hint := ""
		rest := fs.Args()[most+1:]
		switch {
		case most == 0 && fs.Lookup("config") != nil && (strings.HasSuffix(extra, ".yaml") || strings.HasSuffix(extra, ".yml")):
			hint = fmt.Sprintf("; did you mean --config %s?", extra)
		case slices.ContainsFunc(rest, func(a string) bool { return strings.HasPrefix(a, "-") }):
			hint = "; the flags after it were not read: flags go before any argument"
		}
		fmt.Fprintf(stderr(fs), "%s: unexpected argument %q%s\n", fs.Name(), extra, hint)
		fs.Usage()
		return errUsage
	case n < least:
		fmt.Fprintf(stderr(fs), "%s: missing argument\n", fs.Name())
		fs.Usage()
		return errUsage
	}
	return nil
}

// stderr is where fs reports.
func stderr(fs *flag.FlagSet) io.Writer { return fs.Output() }
