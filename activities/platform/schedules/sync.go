package schedules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/workflows/platform"
)

// Report says what Sync did, by activity ID, each list sorted.
type Report struct {
	Created []string `json:"created"`
	Updated []string `json:"updated"`
	// Unchanged are the schedules that already matched their definitions.
	Unchanged []string `json:"unchanged"`
	Deleted   []string `json:"deleted"`
}

// Pace runs Sync's calls at a pace of its own, several at once (a
// pacing.Pacer): Go runs call, or returns at once with the reason it will
// not (its context ended). Sync waits for the calls before it returns.
type Pace interface {
	Go(ctx context.Context, call func(ctx context.Context) error) error
	Wait()
}

// Sync reconciles the namespace's activity Schedules with defs: it Puts every
// cron definition, then deletes every schedule named platform.ScheduleID(x)
// whose activity x is not a cron definition in defs. It carries on past a
// failing definition or schedule and returns what it did with every error
// joined; a definition that fails to Put keeps its old schedule. With a
// Pace, each Put and Delete goes at its pace, several at once; with nil, one
// after another as fast as the server answers.
//
// Sync is a reconciler, meant to be run again: the delete pass lists schedules
// through visibility, which is eventually consistent, so a schedule created in
// the last second or so may be missing from the list. That is harmless: a
// missed schedule is either one Sync has just put (and must keep) or a stale
// one created concurrently by someone else, which the next Sync deletes.
func Sync(ctx context.Context, sc client.ScheduleClient, dc converter.DataConverter, defs []contracts.ActivityDefinition, p Pace) (Report, error) {
	var (
		mu     sync.Mutex
		report Report
		errs   []error
		keep   = make(map[string]bool)
	)
	// do runs call at p's pace, or at once without p.
	do := func(call func(ctx context.Context) error) {
		if p == nil {
			_ = call(ctx) // call keeps its own outcome
			return
		}
		if err := p.Go(ctx, call); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	for _, def := range defs {
		if def.Trigger.Type != contracts.TriggerCron {
			continue
		}
		keep[def.ActivityID] = true
		do(func(ctx context.Context) error {
			o, err := putCron(ctx, sc, dc, def)
			mu.Lock()
			defer mu.Unlock()
			switch o {
			case outcomeFailed:
				errs = append(errs, err)
			case outcomeCreated:
				report.Created = append(report.Created, def.ActivityID)
			case outcomeUpdated:
				report.Updated = append(report.Updated, def.ActivityID)
			case outcomeUnchanged:
				report.Unchanged = append(report.Unchanged, def.ActivityID)
			}
			return err
		})
	}

	stale, err := staleActivities(ctx, sc, keep)
	if err != nil {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for _, activityID := range stale {
		do(func(ctx context.Context) error {
			deleted, err := Delete(ctx, sc, activityID)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if deleted {
				report.Deleted = append(report.Deleted, activityID)
			}
			return err
		})
	}
	if p != nil {
		p.Wait()
	}

	slices.Sort(report.Created)
	slices.Sort(report.Updated)
	slices.Sort(report.Unchanged)
	slices.Sort(report.Deleted)
	return report, errors.Join(errs...)
}

// staleActivities lists the activity IDs of the namespace's activity
// schedules that keep does not hold.
func staleActivities(ctx context.Context, sc client.ScheduleClient, keep map[string]bool) ([]string, error) {
	prefix := platform.ScheduleID("")
	iter, err := sc.List(ctx, client.ScheduleListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing schedules: %w", err)
	}
	var stale []string
	for iter.HasNext() {
		entry, err := iter.Next()
		if err != nil {
			return stale, fmt.Errorf("listing schedules: %w", err)
		}
		activityID, ok := strings.CutPrefix(entry.ID, prefix)
		if ok && !keep[activityID] {
			stale = append(stale, activityID)
		}
	}
	return stale, nil
}
