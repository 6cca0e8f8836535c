package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// A Suite measures one part of hookkeeper and returns rows for the shared table. Each
// suite lives in its own file; adding a benchmark (the dispatcher's, for one) is a new
// file and a line in suites.
type Suite struct {
	// Name selects the suite on the command line (-suite name,...).
	Name string
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

// suites are every suite, in the order they run and print their rows.
var suites = []Suite{
	{Name: "receiver", Run: runReceiverSuite},
	{Name: "dispatcher", Run: runDispatcherSuite},
	{Name: "image", Run: runImageSuite},
	{Name: "pool", Run: runPoolSuite},
}

// selectSuites resolves a comma-separated list ("all" or empty means every suite), in
// the order of suites.
func selectSuites(list string) ([]Suite, error) {
	if list == "" || list == "all" {
		return slices.Clone(suites), nil
	}
	want := map[string]bool{}
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if !slices.ContainsFunc(suites, func(s Suite) bool { return s.Name == name }) {
			return nil, fmt.Errorf("unknown bench suite %q (known: %s)", name, strings.Join(suiteNames(), ", "))
		}
		want[name] = true
	}
	var chosen []Suite
	for _, s := range suites {
		if want[s.Name] {
			chosen = append(chosen, s)
		}
	}
	return chosen, nil
}

func suiteNames() []string {
	names := make([]string, len(suites))
	for i, s := range suites {
		names[i] = s.Name
	}
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
