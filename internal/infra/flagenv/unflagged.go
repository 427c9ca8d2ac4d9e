package flagenv

import (
	"flag"
	"fmt"
	"text/tabwriter"
)

// Unflagged is an environment variable a program reads that no flag stands
// for (the Temporal SDK's TLS settings, the payload keys, OpenTelemetry's),
// with one line of what it does, for the program's -h (Describe).
type Unflagged struct {
	// Name is the variable's name; a trailing * stands for every variable
	// with that prefix (TEMPORAL_GRPC_META_*).
	Name string
	// Meaning says in one line what the variable does.
	Meaning string
}

// UnflaggedHeading is the line that starts the section of -h listing the
// variables without a flag, after the flags; each then has a line of its
// own: two spaces, its name, at least two spaces, its meaning.
const UnflaggedHeading = "Environment variables without a flag:"

// Describe makes fs's usage, what -h prints, end with the variables of
// lists under UnflaggedHeading, after the flags as the flag package prints
// them, so that -h names every variable the program reads: those of its
// flags (Parse adds "(env NAME)" to each) and these.
func Describe(fs *flag.FlagSet, lists ...[]Unflagged) {
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage of %s:\n", fs.Name())
		fs.PrintDefaults()
		fmt.Fprintf(out, "\n%s\n", UnflaggedHeading)
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		for _, list := range lists {
			for _, v := range list {
				fmt.Fprintf(w, "  %s\t%s\n", v.Name, v.Meaning)
			}
		}
		_ = w.Flush()
	}
}
