package rewards

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// RewardsRelease is the newest release of RewardsWorkflow this code runs.
// Each release is a set of behavioural changes a run takes as a whole, chosen
// once when the run starts, so a run behaves one way from its start to its end
// and an entity moves to a new release at a ContinueAsNew.
const RewardsRelease = 8

// Change IDs for workflow.GetVersion.
const (
	// changeRelease is the release ladder: from release 3 on, a run records
	// one marker, the release it runs, instead of one per change. A new release
	// raises RewardsRelease, and the code tests e.release >= N where release N
	// changed something.
	changeRelease = "rewards-release"
	// versionBaseline marks histories written by the first release (read only
	// by runs that predate the ladder).
	versionBaseline = "rewards-baseline"
	// versionRelease2 marks runs that carry the second release's corrections
	// (read only by runs that predate the ladder):
	//   - a carried dedup window keeps keys beyond the default 10,000 bound;
	//   - an inactivity reset that is due happens before any event is applied,
	//     and the update validator judges redemptions against the reset balance;
	//   - a new entity applies nothing before the database has said whether
	//     the customer unenrolled, and one who did is refused (NotEnrolled) and
	//     ends, unless re-enrolled by the enroll update;
	//   - search attributes are written at most once per workflow task and
	//     only when a value changed: the tier at once, the points within
	//     searchAttributesLag;
	//   - a start input whose customer_id disagrees with the workflow ID fails.
	versionRelease2 = "rewards-release-2"
)

// Release 3 changes what a run writes when it starts:
//   - one version marker (changeRelease) instead of two (versionBaseline and
//     versionRelease2), each of which came with a search attribute upsert;
//   - search attributes the run inherited from the run before it (the SDK
//     carries them through ContinueAsNew) are not written again when they
//     still hold the state's values.
//
// A continued run of release 2 starts with six events of its own (two
// version markers, two TemporalChangeVersion upserts, the marker of the
// search attribute check, one RewardsTier/RewardsPoints upsert); one of
// release 3 with two.

// Release 4 makes the entity tenant-scoped: a run checks its workflow ID
// against RewardsWorkflowIDFor(tenant_id, customer_id) instead of
// RewardsWorkflowID(customer_id), and hands its tenant to its activities
// (so the database keeps each tenant's records apart), to the next run and
// to the status. A default-tenant entity writes what release 3 wrote.
// Releases 1 to 3 knew only the default tenant. A run of one of them (a
// worker held back by RewardsReleaseCap, as after a rollback) that meets a
// tenant's entity (a non-empty tenant_id other than "default") does not
// serve it, at any of those releases: it fails its workflow task
// (serveCheck, failTask), so the entity keeps its state in history and a
// worker of release 4 or later takes the run on. Code built before this rule
// (the build that first shipped release 4 and everything older) fails such
// a run with InvalidRewardsInput instead, or, at release 1, serves it as the
// default tenant's customer: never roll back to it while tenant entities
// run (docs/operations.md, "Runbook: a rollback").

// Release 5 makes a new customer's first event as cheap as a raw workflow's:
// a new entity runs its Enroll activity (recordEnrollment) as a local
// activity, inside the workflow task that started the run, so it knows
// whether the customer may take events before that task completes, and
// the update that started it (UpdateWithStart) is accepted and answered in
// the run's first workflow task: one WorkflowTaskCompleted instead of two
// and no activity task round trip. The database answers as before, so an
// unenrolled customer stays refused (NotEnrolled). Should the local
// activity fail for enrollLocalBudget, the run falls back to the Enroll
// activity of earlier releases. A release-5 history records Enroll as a
// local activity marker where earlier ones have ActivityTaskScheduled.
//
// Release 5 also takes the apply-points-batch update. A run of an earlier
// release has no handler for it and refuses it as an unknown update before
// it reaches history (the client then sends the events one by one), so a
// worker held back to release 4 never meets a history with a batch in it.

// Release 6 adds the change feed (feed.go, docs/change-feed.md): a run
// records the worker's feed setting once when it starts (a SideEffect
// marker); with the feed on, the entity numbers its changes (FeedSeq),
// keeps those not yet published in an outbox carried through ContinueAsNew,
// and publishes them with the PublishChanges activity, one at a time per
// entity; an unenrolling run completes once its outbox is empty. With the
// feed off the run writes what release 5 wrote, but for the marker. An
// input carrying feed_seq or an outbox does not decode under release 5,
// whose run then fails its workflow task (rewards_serve.go) until a worker
// of release 6 takes it on.

// Release 7 keeps every event accepted before an unenroll (issue 27). An
// apply-points or apply-points-batch update admitted before the unenroll
// signal and waiting for room in the feed's outbox is applied before the
// entity unenrolls (release 6 took the unenroll while a nearly full outbox
// still had room for one change, and answered such a batch NotEnrolled
// event by event); so are the add-points signals in their channel when the
// run first sees the unenroll. From that moment an update is refused
// NotEnrolled (apply-points by its validator, a batch event by event) and
// an enroll update Unenrolling, without waiting for room, and later
// signals are dropped with the unenrollment, so a steady stream of events
// cannot hold an unenroll back. A fresh start whose input does not decode
// and names no newer release (requires_release) fails the workflow
// (InvalidRewardsInput) instead of its workflow task: no release can serve
// it, and there is no state to keep (rewards_serve.go). Nothing in the
// carried state changes, so releases 6 and 7 read each other's inputs.

// Release 8 makes the change feed's outbox visible and discardable
// (outbox.go): the RewardsOutboxSince search attribute while a publication
// has fallen back to the activity, and the discard-outbox update. A carried
// state holding a discard record does not decode under release 7.

// rewardsRelease reads the release a run runs. A history written before the
// ladder has no changeRelease marker: replaying it, GetVersion answers
// DefaultVersion and the markers it does have are read. A new run records
// RewardsRelease, unless the worker holds releases back (RewardsReleaseCap).
func rewardsRelease(ctx workflow.Context) int {
	if v := workflow.GetVersion(ctx, changeRelease, workflow.DefaultVersion, RewardsRelease); v != workflow.DefaultVersion {
		return int(v)
	}
	workflow.GetVersion(ctx, versionBaseline, workflow.DefaultVersion, 1)
	if workflow.GetVersion(ctx, versionRelease2, workflow.DefaultVersion, 1) >= 1 {
		return 2
	}
	return 1
}

// ladderFloor is the first release the ladder records; earlier releases are
// chosen with their own change IDs.
const ladderFloor = 3

// RewardsReleaseCap returns a worker option that makes new runs of
// RewardsWorkflow take release at most (1 ≤ release ≤ RewardsRelease): the
// first step of a two-phase rollout without Worker Versioning, where every
// worker is first replaced by code that understands the new release while
// still running the old one, and only then told to run the new one, so an
// old worker never meets a history it cannot replay. Runs already started
// keep the release they recorded. Change IDs of other workflows are left alone.
func RewardsReleaseCap(release int) worker.PreferredVersionProvider {
	release = min(max(release, 1), RewardsRelease)
	return func(in worker.PreferredVersionProviderInput) *worker.VersionPreference {
		switch in.ChangeID {
		case changeRelease:
			if release < ladderFloor {
				return &worker.VersionPreference{Version: workflow.DefaultVersion}
			}
			return &worker.VersionPreference{Version: workflow.Version(release)}
		case versionRelease2:
			if release < 2 {
				return &worker.VersionPreference{Version: workflow.DefaultVersion}
			}
		}
		return nil
	}
}
