package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// groupStats is the receiver's hookkeeper_receipt_group_size histogram: how many
// receipt transactions ran (count) for how many deliveries (sum).
type groupStats struct{ sum, count float64 }

func (g groupStats) add(o groupStats) groupStats { return groupStats{g.sum + o.sum, g.count + o.count} }
func (g groupStats) sub(o groupStats) groupStats { return groupStats{g.sum - o.sum, g.count - o.count} }

func (g groupStats) mean() float64 {
	if g.count == 0 {
		return 0
	}
	return g.sum / g.count
}

// readGroupStats scrapes the receiver's /metrics for the group-size histogram.
func readGroupStats(ctx context.Context, adminAddr string) (groupStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+adminAddr+"/metrics", nil)
	if err != nil {
		return groupStats{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return groupStats{}, fmt.Errorf("scrape receiver metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var g groupStats
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "{")
		var dst *float64
		switch name {
		case "hookkeeper_receipt_group_size_sum":
			dst = &g.sum
		case "hookkeeper_receipt_group_size_count":
			dst = &g.count
		default:
			continue
		}
		if *dst, err = strconv.ParseFloat(value, 64); err != nil {
			return groupStats{}, fmt.Errorf("parse %s: %w", name, err)
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return groupStats{}, fmt.Errorf("read receiver metrics: %w", err)
	}
	if found != 2 {
		return groupStats{}, fmt.Errorf("receiver metrics lack hookkeeper_receipt_group_size")
	}
	return g, nil
}

// cores is how many cores' worth of CPU time cpu is over elapsed.
func cores(cpu, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return cpu.Seconds() / elapsed.Seconds()
}
