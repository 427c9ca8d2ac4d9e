// Package flagenv parses a program's flags over the environment variables
// that stand in for them, named in a table per program, so that every
// program reads its configuration one way: a flag given on the command line
// beats its environment variable, which beats the flag's default.
//
// The names of the variables are part of the project's contract and do not
// follow one rule (-address is TEMPORAL_ADDRESS, -ingest is INGEST_ENABLED),
// so they are declared, not derived from the flag names as ff.WithEnvVars
// does. A variable's value goes through its flag's own flag.Value, the same
// parsing as on the command line, and ff reads the environment: Parse hands
// ff a flag set whose flags are named as the variables and write into the
// program's flags.
//
// A program also reads variables that no flag stands for (the Temporal
// SDK's, OpenTelemetry's): Describe lists them at the end of its -h, so that
// -h names every variable it reads.
package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/peterbourgon/ff/v3"
)

// Vars maps a flag's name (without its dash) to the environment variable
// that sets the flag when the command line does not.
type Vars map[string]string

// Parse parses args into fs, then sets each flag of vars that args left
// unset from its environment variable, if that is set and not empty. Before
// parsing it adds "(env NAME)" to the usage of each of those flags, so that
// -h lists the variables. Every flag named in vars must be defined in fs.
// A value that does not parse is an *Error naming the variable; -h is
// flag.ErrHelp, as from fs.Parse.
func Parse(fs *flag.FlagSet, args []string, vars ...Vars) error {
	all := Vars{}
	for _, v := range vars {
		maps.Copy(all, v)
	}
	names := slices.Sorted(maps.Keys(all))
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil {
			return fmt.Errorf("%s: environment variable %s is for -%s, which is not one of its flags", fs.Name(), all[name], name)
		}
		f.Usage += " (env " + all[name] + ")"
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	env := flag.NewFlagSet(fs.Name()+" environment", flag.ContinueOnError)
	env.SetOutput(io.Discard)
	for _, name := range names {
		if !given[name] {
			env.Var(&value{flag: fs.Lookup(name), env: all[name]}, all[name], "")
		}
	}
	if err := ff.Parse(env, nil, ff.WithEnvVars()); err != nil {
		if e, ok := errors.AsType[*Error](err); ok {
			return e
		}
		return fmt.Errorf("%s: reading the environment: %w", fs.Name(), err)
	}
	return nil
}

// Error is a value in an environment variable that its flag does not take.
type Error struct {
	// Var is the environment variable, Flag the flag it stands in for.
	Var, Flag string
	// Value is the variable's value, Err why the flag refused it.
	Value string
	Err   error
}

// Error names the variable and its value, then the flag.
func (e *Error) Error() string {
	return fmt.Sprintf("%s=%q: invalid value for -%s: %v", e.Var, e.Value, e.Flag, e.Err)
}

// Unwrap returns the flag's error.
func (e *Error) Unwrap() error { return e.Err }

// value is a program's flag as ff sees it under the name of its
// environment variable.
type value struct {
	flag *flag.Flag
	env  string
}

// String returns the flag's value ("" for the zero value, which the flag
// package may make to tell a default).
func (v *value) String() string {
	if v.flag == nil {
		return ""
	}
	return v.flag.Value.String()
}

// Set sets the flag, or returns an *Error naming the variable.
func (v *value) Set(s string) error {
	if err := v.flag.Value.Set(s); err != nil {
		return &Error{Var: v.env, Flag: v.flag.Name, Value: s, Err: err}
	}
	return nil
}
