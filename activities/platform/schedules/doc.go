// Package schedules turns cron activity definitions into Temporal Schedules
// and decides, fire by fire, what a cron trigger's misfire policy makes of it.
//
// A cron definition becomes the Schedule platform.ScheduleID(activity_id).
// Every fire starts a short ScheduleFireWorkflow (workflow ID
// platform.ScheduleFireWorkflowID(activity_id) plus the server's
// "-{scheduled time}", argument platform.FireInput) on the activities task
// queue. The fire reads its scheduled time from the TemporalScheduledStartTime
// search attribute and asks Plan whether to start the run
// activity-{activity_id}:{scheduled_for}, and for which window of time.
//
// Two layers apply the misfire policy. The Schedule's overlap policy and
// catchup window decide which fires the server starts after the server itself
// was down; Plan decides which started fires run, which also covers fires that
// reached a worker late (workers down, queue backed up). With interval the
// longest gap between fires (Interval), grace = max(10s, interval/10) (Grace),
// prev the fire before a fire f, and D the number of fires after f already
// due when the fire is planned:
//
//	| misfire policy | overlap policy | catchup window                   | Plan runs fire f iff               | run window           |
//	|----------------|----------------|----------------------------------|------------------------------------|----------------------|
//	| skip           | SKIP           | grace                            | D == 0 and f is at most grace late | [prev, f]            |
//	| catchup        | BUFFER_ALL     | catchup_limit × interval + grace | D < catchup_limit                  | [prev, f]            |
//	| compress       | BUFFER_ALL     | interval + grace                 | D == 0                             | [last window end, f] |
//
// Why each setting:
//
//   - skip: missed fires are dropped, so the server replays nothing older than
//     the grace (Temporal's minimum catchup window is 10s, hence the floor), and
//     SKIP drops a fire while the previous one is still running instead of
//     queueing it. A fire that does start late is dropped by Plan.
//   - catchup: BUFFER_ALL starts every fire, in order, one after another; the
//     catchup window reaches back catchup_limit intervals (plus a grace for the
//     fire due now), so after a server outage the server replays the missed
//     fires within the limit. Plan drops any fire with catchup_limit or more
//     later fires due, so whatever reaches it, only the newest catchup_limit run.
//   - compress: one run must cover every missed interval. BUFFER_ALL (not
//     BUFFER_ONE, which keeps the oldest waiting fire and drops newer ones)
//     makes sure the newest fire reaches Plan, and a catchup window of one
//     interval plus grace makes the server replay at least the latest missed
//     fire. Plan drops every fire but the newest due one and widens its window
//     back to the end of the activity's last recorded window, so after an
//     outage of N intervals exactly one run covers all of them.
//
// Catchup windows are capped at MaxCatchupWindow. A fire may wait for a
// worker as long as its catchup window plus FireTimeout (so a worker outage
// within the window loses no fire under catchup), and no longer, so a stuck
// fire cannot hold a BUFFER_ALL schedule's queue forever.
//
// A Backfill of a range (an operator's, after an incident) starts fires like
// any other, with TemporalScheduledStartTime set to each backfilled time (the
// server, 1.29, includes both ends of the range, and backfills paused
// schedules too), and they go through the same Plan, judged against the time
// they are planned: a backfill obeys the policy. Under skip the SKIP overlap
// starts only the oldest time of the range and Plan drops it as late; under
// catchup the backfilled fires run only if they are among the newest
// catchup_limit fires before now; under compress only a backfilled fire that
// is the newest due one runs, with its widened window. To run an old interval
// regardless of the policy, start a manual run instead.
//
// Expressions are standard five-field cron in the trigger's timezone (UTC by
// default), parsed with robfig/cron and evaluated with the Temporal server's
// own calendar matching, so the planner and the server agree on every fire
// time, DST changes included: day of month and day of week must both match,
// and a wall time skipped by a DST change does not fire. What the server
// reads differently from robfig is refused: a time zone inside the
// expression, descriptors such as @every, and "?".
package schedules
