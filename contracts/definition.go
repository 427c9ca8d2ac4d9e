package contracts

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	// The IANA time zone database is embedded so that which
	// trigger.cron.timezone values are accepted does not depend on the
	// zoneinfo files of the host.
	_ "time/tzdata"
)

// Defaults that ApplyDefaults fills into optional fields left out.
const (
	// DefaultTimezone is the zone of a cron trigger without a timezone.
	DefaultTimezone = "UTC"
	// DefaultCatchupLimit caps the missed fires a "catchup" cron trigger
	// replays when none is given.
	DefaultCatchupLimit = 10
	// DefaultMaxConcurrentRuns caps the runs of an activity in flight at
	// once when none is given.
	DefaultMaxConcurrentRuns = 10
)

// Limits of an activity definition.
const (
	// MaxTasksPerRun caps the total count of task instances one run creates,
	// summed over all tasks of a definition. The JSON Schema cannot express
	// a sum, so only Validate checks it.
	MaxTasksPerRun = 1000

	maxTaskSpecs         = 100
	maxTaskCount         = 1000
	maxEventTypes        = 50
	maxCatchupLimit      = 1000
	maxMaxConcurrentRuns = 10000
)

// ApplyDefaults fills the optional fields left at their zero value: a cron
// trigger's timezone becomes DefaultTimezone and its catchup_limit
// DefaultCatchupLimit; max_concurrent_runs becomes DefaultMaxConcurrentRuns.
// ParseActivityDefinition calls it before Validate, so stored definitions are
// explicit and later changes of a default do not change them.
func (d *ActivityDefinition) ApplyDefaults() {
	if c := d.Trigger.Cron; c != nil {
		if c.Timezone == "" {
			c.Timezone = DefaultTimezone
		}
		if c.CatchupLimit == 0 {
			c.CatchupLimit = DefaultCatchupLimit
		}
	}
	if d.MaxConcurrentRuns == 0 {
		d.MaxConcurrentRuns = DefaultMaxConcurrentRuns
	}
}

// Validate checks the definition against the activity-definition contract,
// the same rules as activity-definition.schema.json unless marked Go only:
//
//   - activity_id: required, a UUID in 8-4-4-4-12 hex form (either case).
//   - tenant_id: required, 1..100 characters matching ^[A-Za-z0-9][A-Za-z0-9._-]*$
//     (tenant.Validate).
//   - name: required, 1..200 characters, not blank.
//   - trigger.type: required, "cron" or "event". A cron trigger requires
//     trigger.cron and forbids trigger.event; an event trigger the reverse.
//   - trigger.cron.expression: required, 5 fields (minute hour day-of-month
//     month day-of-week) separated by spaces or tabs; no "@" descriptors, no
//     seconds field, no "TZ="/"CRON_TZ=" prefix (the zone has its own
//     field). Go only: it must parse with cron.ParseStandard and fire at
//     least once (e.g. "0 0 30 2 *" never does).
//   - trigger.cron.timezone: optional (zero means DefaultTimezone), a
//     non-empty string. Go only: a zone time.LoadLocation knows, not "Local".
//   - trigger.cron.misfire_policy: required, one of skip, catchup, compress.
//   - trigger.cron.catchup_limit: optional (zero means
//     DefaultCatchupLimit), 1..1000.
//   - trigger.event.event_types: required, 1..50 distinct event types, each
//     as EventEnvelope.event_type.
//   - dedupe_key_strategy: required; for a cron trigger it must equal
//     trigger.cron.misfire_policy, for an event trigger it must be "event_id".
//   - tasks: required, 1..100 items; task_type required, 1..100 characters
//     matching ^[a-z0-9][a-z0-9_.-]*$; count required, 1..1000; params
//     optional, a JSON object. Go only: the counts sum to at most
//     MaxTasksPerRun.
//   - max_concurrent_runs: optional (zero means DefaultMaxConcurrentRuns),
//     1..10000.
//
// It returns nil when the definition is valid and a *ValidationError listing
// every problem otherwise.
func (d ActivityDefinition) Validate() error {
	var p problems
	switch {
	case d.ActivityID == "":
		p.add("activity_id", "required")
	case !uuidRE.MatchString(d.ActivityID):
		p.add("activity_id", "must be a UUID such as 550e8400-e29b-41d4-a716-446655440000")
	}
	checkTenantID(&p, "tenant_id", d.TenantID)
	checkText(&p, "name", d.Name, maxNameLen)
	validateTrigger(&p, d.Trigger)
	validateDedupeKeyStrategy(&p, d.Trigger, d.DedupeKeyStrategy)
	validateTasks(&p, d.Tasks)
	if d.MaxConcurrentRuns != 0 {
		checkRange(&p, "max_concurrent_runs", d.MaxConcurrentRuns, 1, maxMaxConcurrentRuns)
	}
	return p.err(docActivityDefinition)
}

// ParseActivityDefinition decodes one activity definition sent as JSON,
// applies the defaults (ApplyDefaults) and validates it (Validate).
//
// Decoding is strict: the document must be exactly one JSON object; unknown
// fields (also at other letter case), duplicate fields, null values, values
// of the wrong JSON type, integers written with a fraction or exponent and
// explicit empty values of optional fields (e.g. "catchup_limit": 0) are
// rejected, each with the path of the offending value. Any problem comes back
// as a *ValidationError (problems of the document's shape first, on their
// own) and the zero ActivityDefinition.
func ParseActivityDefinition(data []byte) (ActivityDefinition, error) {
	var d ActivityDefinition
	if p := decodeStrict(data, &d); len(p) > 0 {
		return ActivityDefinition{}, p.err(docActivityDefinition)
	}
	d.ApplyDefaults()
	if err := d.Validate(); err != nil {
		return ActivityDefinition{}, err
	}
	return d, nil
}

// validateTrigger checks the trigger type and the sub-object it requires.
func validateTrigger(p *problems, t Trigger) {
	switch t.Type {
	case "":
		if t.Cron == nil && t.Event == nil {
			p.add("trigger", "required")
			return
		}
		p.add("trigger.type", "required")
	case TriggerCron:
		if t.Event != nil {
			p.add("trigger.event", "must be absent for cron triggers")
		}
		if t.Cron == nil {
			p.add("trigger.cron", "required for cron triggers")
			return
		}
		validateCron(p, *t.Cron)
	case TriggerEvent:
		if t.Cron != nil {
			p.add("trigger.cron", "must be absent for event triggers")
		}
		if t.Event == nil {
			p.add("trigger.event", "required for event triggers")
			return
		}
		validateEventTypes(p, t.Event.EventTypes)
	default:
		p.add("trigger.type", "must be one of cron, event")
	}
}

// cronReference is the instant from which validateCron checks that a cron
// schedule fires at all; fixed, so the verdict does not change with the clock.
var cronReference = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

// validateCron checks a cron trigger.
func validateCron(p *problems, c CronTrigger) {
	const field = "trigger.cron.expression"
	expr := c.Expression
	switch {
	case expr == "":
		p.add(field, "required")
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		p.add(field, "must not start with TZ= or CRON_TZ=; set trigger.cron.timezone instead")
	case strings.HasPrefix(expr, "@"):
		p.add(field, "must be 5 fields (minute hour day-of-month month day-of-week), not a descriptor such as @daily")
	case len(strings.Fields(expr)) != 5:
		p.add(field, fmt.Sprintf("must have exactly 5 fields (minute hour day-of-month month day-of-week), got %d", len(strings.Fields(expr))))
	case !cronRE.MatchString(expr):
		p.add(field, "must be 5 fields separated by spaces, made of 0-9, letters and * ? , / -")
	default:
		schedule, err := cron.ParseStandard(expr)
		switch {
		case err != nil:
			p.add(field, "is not a valid cron expression: "+err.Error())
		case schedule.Next(cronReference).IsZero():
			p.add(field, "never fires (no date matches it)")
		}
	}

	switch c.Timezone {
	case "":
		// DefaultTimezone.
	case "Local":
		p.add("trigger.cron.timezone", "must name an IANA time zone such as Europe/Paris, not Local")
	default:
		if _, err := time.LoadLocation(c.Timezone); err != nil {
			p.add("trigger.cron.timezone", fmt.Sprintf("unknown time zone %q", c.Timezone))
		}
	}

	switch c.MisfirePolicy {
	case "":
		p.add("trigger.cron.misfire_policy", "required")
	case MisfireSkip, MisfireCatchup, MisfireCompress:
	default:
		p.add("trigger.cron.misfire_policy", "must be one of skip, catchup, compress")
	}

	if c.CatchupLimit != 0 {
		checkRange(p, "trigger.cron.catchup_limit", c.CatchupLimit, 1, maxCatchupLimit)
	}
}

// validateEventTypes checks the event types of an event trigger.
func validateEventTypes(p *problems, types []string) {
	const field = "trigger.event.event_types"
	if len(types) < 1 || len(types) > maxEventTypes {
		p.add(field, fmt.Sprintf("must have between 1 and %d items", maxEventTypes))
	}
	first := make(map[string]int, len(types))
	for i, t := range types {
		item := indexPath(field, i)
		checkIdentifier(p, item, t, maxEventTypeLen, eventTypeRE)
		if j, dup := first[t]; dup {
			p.add(item, "duplicates "+indexPath(field, j))
			continue
		}
		first[t] = i
	}
}

// validateDedupeKeyStrategy checks the strategy matches the trigger: a cron
// trigger dedupes fires by its misfire policy, an event trigger by event_id.
func validateDedupeKeyStrategy(p *problems, t Trigger, strategy string) {
	const field = "dedupe_key_strategy"
	switch {
	case strategy == "":
		p.add(field, "required")
	case t.Type == TriggerCron && t.Cron != nil && isMisfirePolicy(t.Cron.MisfirePolicy):
		if strategy != t.Cron.MisfirePolicy {
			p.add(field, fmt.Sprintf("must equal trigger.cron.misfire_policy (%q) for cron triggers", t.Cron.MisfirePolicy))
		}
	case t.Type == TriggerEvent:
		if strategy != DedupeByEventID {
			p.add(field, `must be "event_id" for event triggers`)
		}
	case !isMisfirePolicy(strategy) && strategy != DedupeByEventID:
		p.add(field, "must be one of skip, catchup, compress, event_id")
	}
}

// isMisfirePolicy reports whether s is one of the misfire policies.
func isMisfirePolicy(s string) bool {
	return s == MisfireSkip || s == MisfireCatchup || s == MisfireCompress
}

// validateTasks checks the task list and the total count of task instances.
func validateTasks(p *problems, tasks []TaskSpec) {
	if len(tasks) < 1 || len(tasks) > maxTaskSpecs {
		p.add("tasks", fmt.Sprintf("must have between 1 and %d items", maxTaskSpecs))
	}
	total := 0
	for i, t := range tasks {
		item := indexPath("tasks", i)
		checkIdentifier(p, item+".task_type", t.TaskType, maxTaskTypeLen, taskTypeRE)
		checkRange(p, item+".count", t.Count, 1, maxTaskCount)
		checkJSONObject(p, item+".params", t.Params)
		if t.Count >= 1 && t.Count <= maxTaskCount { // others are reported above
			total += t.Count
		}
	}
	if total > MaxTasksPerRun {
		p.add("tasks", fmt.Sprintf("counts must sum to at most %d, got %d", MaxTasksPerRun, total))
	}
}
