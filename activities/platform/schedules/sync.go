package schedules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

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

// Sync reconciles the namespace's activity Schedules with defs: it Puts every
// cron definition, then deletes every schedule named platform.ScheduleID(x)
// whose activity x is not a cron definition in defs. It carries on past a
// failing definition or schedule and returns what it did with every error
// joined; a definition that fails to Put keeps its old schedule.
//
// Sync is a reconciler, meant to be run again: the delete pass lists schedules
// through visibility, which is eventually consistent, so a schedule created in
// the last second or so may be missing from the list. That is harmless: a
// missed schedule is either one Sync has just put (and must keep) or a stale
// one created concurrently by someone else, which the next Sync deletes.
func Sync(ctx context.Context, sc client.ScheduleClient, dc converter.DataConverter, defs []contracts.ActivityDefinition) (Report, error) {
	var (
		report Report
		errs   []error
		keep   = make(map[string]bool)
	)
	for _, def := range defs {
		if def.Trigger.Type != contracts.TriggerCron {
			continue
		}
		keep[def.ActivityID] = true
		o, err := putCron(ctx, sc, dc, def)
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
	}

	stale, err := staleActivities(ctx, sc, keep)
	if err != nil {
		errs = append(errs, err)
	}
	for _, activityID := range stale {
		deleted, err := Delete(ctx, sc, activityID)
		if err != nil {
			errs = append(errs, err)
		} else if deleted {
			report.Deleted = append(report.Deleted, activityID)
		}
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
