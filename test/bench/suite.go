package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// A Suite measures one part of hookkeeper and returns rows for the shared table. Each
// suite lives in its own file and registers itself from init, so adding a benchmark
// (the dispatcher's, for one) is a new file and nothing else.
type Suite struct {
	// Name selects the suite on the command line (-suite name,...).
	Name string
	// Order places the suite's rows in the table; lower runs and prints first.
	Order int
	// Run performs the measurements. It must stop by itself well within the time
	// budget of `make bench` and clean up what it created.
	Run func(ctx context.Context, env *Env) ([]Row, error)
}

// Row is one line of the result table.
type Row struct {
	Measure string // what was measured, with its unit
	Value   string // the figure
	Goal    string // the target of docs/architecture.md ("Numbers we hold ourselves to"), when there is one
	Note    string // how it was measured, in a few words
}

var suites = map[string]Suite{}

// register adds a suite; called from init functions.
func register(s Suite) {
	if _, dup := suites[s.Name]; dup {
		panic(fmt.Sprintf("bench suite %q registered twice", s.Name))
	}
	suites[s.Name] = s
}

// selectSuites resolves a comma-separated list ("all" or empty means every suite), in
// registration order.
func selectSuites(list string) ([]Suite, error) {
	var chosen []Suite
	if list == "" || list == "all" {
		for _, s := range suites {
			chosen = append(chosen, s)
		}
	} else {
		seen := map[string]bool{}
		for name := range strings.SplitSeq(list, ",") {
			name = strings.TrimSpace(name)
			s, ok := suites[name]
			if !ok {
				return nil, fmt.Errorf("unknown bench suite %q (known: %s)", name, strings.Join(suiteNames(), ", "))
			}
			if !seen[name] {
				seen[name] = true
				chosen = append(chosen, s)
			}
		}
	}
	sort.Slice(chosen, func(i, j int) bool {
		if chosen[i].Order != chosen[j].Order {
			return chosen[i].Order < chosen[j].Order
		}
		return chosen[i].Name < chosen[j].Name
	})
	return chosen, nil
}

func suiteNames() []string {
	names := make([]string, 0, len(suites))
	for n := range suites {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Result is what one suite produced.
type Result struct {
	Suite   string
	Rows    []Row
	Err     error
	Elapsed time.Duration
}

// printTable writes every suite's rows as one aligned table.
func printTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SUITE\tMEASURE\tVALUE\tGOAL\tNOTE")
	for _, r := range results {
		// A failed suite still shows what it measured before the failure line.
		for _, row := range r.Rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Suite, row.Measure, row.Value, orDash(row.Goal), row.Note)
		}
		if r.Err != nil {
			fmt.Fprintf(tw, "%s\tFAILED\t-\t-\t%v\n", r.Suite, r.Err)
		}
	}
	if err := tw.Flush(); err != nil {
		log.Printf("print table: %v", err)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
