package flagenv_test

import (
	"errors"
	"flag"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/infra/flagenv"
)

// settings is what the test's flags fill.
type settings struct {
	addr    string
	workers int
	wait    time.Duration
	on      bool
	rate    float64
	plain   string
}

// newFlags defines the test's flags on a new flag set: every one but -plain
// has an environment variable in vars.
func newFlags(s *settings) *flag.FlagSet {
	fs := flag.NewFlagSet("prog", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&s.addr, "address", "127.0.0.1:1", "listen `address`")
	fs.IntVar(&s.workers, "workers", 4, "workers")
	fs.DurationVar(&s.wait, "wait", time.Second, "how long to wait")
	fs.BoolVar(&s.on, "ingest", false, "turn it on")
	fs.Float64Var(&s.rate, "rate", 1.5, "per second")
	fs.StringVar(&s.plain, "plain", "p", "no environment variable")
	return fs
}

var vars = flagenv.Vars{"address": "PROG_ADDR", "workers": "PROG_WORKERS", "wait": "PROG_WAIT"}

var moreVars = flagenv.Vars{"ingest": "PROG_INGEST_ENABLED", "rate": "PROG_RATE"}

func TestParse(t *testing.T) {
	defaults := settings{addr: "127.0.0.1:1", workers: 4, wait: time.Second, rate: 1.5, plain: "p"}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    settings
		wantErr string // a part of the error; empty: no error
	}{
		{name: "defaults", want: defaults},
		{name: "environment", env: map[string]string{
			"PROG_ADDR": "0.0.0.0:2", "PROG_WORKERS": "8", "PROG_WAIT": "1m", "PROG_INGEST_ENABLED": "true", "PROG_RATE": "inf", "PLAIN": "x",
		}, want: settings{addr: "0.0.0.0:2", workers: 8, wait: time.Minute, on: true, rate: math.Inf(1), plain: "p"}},
		{name: "flag over environment", args: []string{"-workers", "2", "-ingest=false"}, env: map[string]string{"PROG_WORKERS": "8", "PROG_INGEST_ENABLED": "1"},
			want: settings{addr: "127.0.0.1:1", workers: 2, wait: time.Second, rate: 1.5, plain: "p"}},
		{name: "empty variable is unset", env: map[string]string{"PROG_WORKERS": ""}, want: defaults},
		{name: "a bad variable under a flag given is not read", args: []string{"-workers", "3"}, env: map[string]string{"PROG_WORKERS": "many"},
			want: settings{addr: "127.0.0.1:1", workers: 3, wait: time.Second, rate: 1.5, plain: "p"}},
		{name: "bad number", env: map[string]string{"PROG_WORKERS": "many"}, wantErr: `PROG_WORKERS="many": invalid value for -workers`},
		{name: "bad duration", env: map[string]string{"PROG_WAIT": "30"}, wantErr: `PROG_WAIT="30": invalid value for -wait`},
		{name: "bad switch", env: map[string]string{"PROG_INGEST_ENABLED": "yes please"}, wantErr: `PROG_INGEST_ENABLED="yes please"`},
		{name: "bad command line", args: []string{"-workers", "x"}, wantErr: `invalid value "x" for flag -workers`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"PROG_ADDR", "PROG_WORKERS", "PROG_WAIT", "PROG_INGEST_ENABLED", "PROG_RATE", "PLAIN"} {
				t.Setenv(k, tt.env[k])
			}
			var got settings
			err := flagenv.Parse(newFlags(&got), tt.args, vars, moreVars)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseErrorNamesTheVariable(t *testing.T) {
	t.Setenv("PROG_WAIT", "soon")
	var s settings
	err := flagenv.Parse(newFlags(&s), nil, vars)
	e, ok := errors.AsType[*flagenv.Error](err)
	if !ok || e.Var != "PROG_WAIT" || e.Flag != "wait" || e.Value != "soon" {
		t.Fatalf("error %#v, want a *flagenv.Error of PROG_WAIT", err)
	}
}

func TestParseHelpNamesTheVariables(t *testing.T) {
	var s settings
	fs := newFlags(&s)
	var out strings.Builder
	fs.SetOutput(&out)
	if err := flagenv.Parse(fs, []string{"-h"}, vars, moreVars); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err %v, want flag.ErrHelp", err)
	}
	for _, v := range []string{"PROG_ADDR", "PROG_WORKERS", "PROG_WAIT", "PROG_INGEST_ENABLED", "PROG_RATE"} {
		if !strings.Contains(out.String(), "(env "+v+")") {
			t.Errorf("help does not name %s:\n%s", v, out.String())
		}
	}
	if strings.Contains(out.String(), "PLAIN") {
		t.Errorf("help names a variable of -plain:\n%s", out.String())
	}
}

func TestParseRefusesAVariableWithoutItsFlag(t *testing.T) {
	var s settings
	err := flagenv.Parse(newFlags(&s), nil, flagenv.Vars{"nope": "PROG_NOPE"})
	if err == nil || !strings.Contains(err.Error(), "PROG_NOPE is for -nope") {
		t.Fatalf("error %v, want one about -nope", err)
	}
}

// -h ends with the variables without a flag, one a line, after the flags.
func TestDescribe(t *testing.T) {
	var s settings
	fs := newFlags(&s)
	var out strings.Builder
	fs.SetOutput(&out)
	flagenv.Describe(fs,
		[]flagenv.Unflagged{{Name: "PROG_TLS", Meaning: "true: TLS"}},
		[]flagenv.Unflagged{{Name: "PROG_META_*", Meaning: "a header per variable"}})
	if err := flagenv.Parse(fs, []string{"-h"}, vars); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err %v, want flag.ErrHelp", err)
	}
	flags, section, found := strings.Cut(out.String(), "\n"+flagenv.UnflaggedHeading+"\n")
	if !found {
		t.Fatalf("no %q in:\n%s", flagenv.UnflaggedHeading, out.String())
	}
	if !strings.HasPrefix(flags, "Usage of prog:\n") || !strings.Contains(flags, "  -address address\n") || !strings.Contains(flags, "(env PROG_ADDR)") {
		t.Errorf("the flags:\n%s", flags)
	}
	if want := "  PROG_TLS     true: TLS\n  PROG_META_*  a header per variable\n"; section != want {
		t.Errorf("section %q, want %q", section, want)
	}
}
