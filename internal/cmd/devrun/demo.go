package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// step is one command of the demo.
type step struct {
	customer string
	key      string
	points   int64
	signal   bool
	note     string
}

// playDemo sends events with duplicates to three customers and prints each
// answer and the final statuses. The keys are fixed, so a second `make run`
// against the same data shows every event recognised as a duplicate.
func playDemo(ctx context.Context, rc *rewardsclient.Client, out io.Writer, began time.Time) error {
	steps := []step{
		{"demo-alice", "alice-order-1", 300, false, "first purchase"},
		{"demo-alice", "alice-order-1", 300, false, "client retry of the same request"},
		{"demo-alice", "alice-order-2", 250, false, "second purchase: gold"},
		{"demo-alice", "alice-order-3", 600, true, "signal: platinum"},
		{"demo-alice", "alice-order-3", 600, true, "broker redelivery of that signal"},
		{"demo-bob", "bob-order-1", 120, false, "first purchase"},
		{"demo-bob", "bob-order-1", 999, false, "same key, different event"},
		{"demo-bob", "bob-redeem-1", -500, false, "redemption beyond the balance"},
		{"demo-bob", "bob-redeem-2", -20, false, "redemption"},
	}
	fmt.Fprintf(out, "\n%-11s %-14s %6s  %s\n", "customer", "dedup key", "points", "answer")
	first := true
	for _, s := range steps {
		ev := rewards.PointEvent{DedupKey: s.key, Activity: "purchase", Points: s.points, SourceID: s.key}
		var answer string
		if s.signal {
			if err := rc.AddPoints(ctx, s.customer, ev); err != nil {
				return err
			}
			answer = "signal sent"
		} else {
			res, err := rc.ApplyPoints(ctx, s.customer, ev)
			var appErr *temporal.ApplicationError
			switch {
			case errors.As(err, &appErr):
				answer = "refused: " + appErr.Type()
			case err != nil:
				return err
			case res.Duplicate:
				answer = fmt.Sprintf("duplicate, first answer: %d points, %s", res.Points, res.Tier)
			default:
				answer = fmt.Sprintf("applied: %d points, %s", res.Points, res.Tier)
			}
		}
		fmt.Fprintf(out, "%-11s %-14s %+6d  %s  (%s)\n", s.customer, s.key, s.points, answer, s.note)
		if first {
			fmt.Fprintf(out, "  (first result %.1fs after start)\n", time.Since(began).Seconds())
			first = false
		}
	}
	fmt.Fprintln(out, "\nstatus:")
	for _, customer := range []string{"demo-alice", "demo-bob"} {
		st, err := rc.Status(ctx, customer)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %-11s %5d points, tier %-8s lifetime %5d, %d events, %d dedup keys, run %d\n",
			st.CustomerID, st.Points, st.Tier, st.LifetimePoints, st.EventCount, st.DedupKeys, st.Run)
	}
	return nil
}
