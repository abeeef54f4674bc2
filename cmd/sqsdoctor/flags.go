package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// cliFlags is what the subcommands' flag sets share: a -json flag, the
// parsing, and how a failure is told (on stderr, and as JSON on stdout
// with -json, guessed from the arguments before they parse).
type cliFlags struct {
	fs             *flag.FlagSet
	asJSON         *bool
	wantJSON       bool // guessed before parsing, then as parsed
	stdout, stderr io.Writer
	prefix         string // before each message on stderr, e.g. "sqsdoctor:"
	help           string // the line after a usage error
}

// newCLIFlags makes the flag set of the command named name, with its -json
// flag (jsonUsage its description) and usage text.
func newCLIFlags(name string, stdout, stderr io.Writer, prefix, help, jsonUsage, usage, tail string) cliFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), tail)
	}
	return cliFlags{fs: fs, asJSON: fs.Bool("json", false, jsonUsage), stdout: stdout, stderr: stderr, prefix: prefix, help: help}
}

// parse parses args; done is true when the command must return code at
// once: -h or -help prints the usage to stderr and returns exitOK; a bad
// flag is reported as any other usage error, on one line followed by the
// pointer to -h (not the whole usage, which the flag package would print),
// and returns exitUsage.
func (f *cliFlags) parse(args []string) (code int, done bool) {
	f.wantJSON = jsonRequested(f.fs, args)
	usage := f.fs.Usage
	f.fs.Usage = func() {}
	f.fs.SetOutput(io.Discard)
	err := f.fs.Parse(args)
	f.fs.Usage = usage
	f.fs.SetOutput(f.stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		f.fs.Usage()
		return exitOK, true
	case err != nil:
		return f.fail(exitUsage, err.Error()), true
	}
	f.wantJSON = *f.asJSON
	return 0, false
}

// fail reports why the command stopped: on stderr, on one line (several
// problems joined by "; ") followed for a usage error by the pointer to -h,
// and as JSON on stdout with -json. It returns code.
func (f *cliFlags) fail(code int, msgs ...string) int {
	fmt.Fprintln(f.stderr, f.prefix, strings.Join(msgs, "; "))
	if code == exitUsage {
		fmt.Fprintln(f.stderr, f.help)
	}
	if f.wantJSON {
		writeJSON(f.stdout, f.stderr, errorJSON{Error: strings.Join(msgs, "; "), ExitCode: code})
	}
	return code
}
