package ingress

import (
	"context"
	"fmt"
	"strings"

	"github.com/entityflow/entityflow/contracts"
)

// eventsSource is the source of event envelopes: published on
// {EventsPrefix}.{tenant}[.more], routed to the activity platform
// (Platform.Deliver). Events have no order among themselves; one event's
// deliveries are handled one at a time (its key is its event_id).
func (in *Ingress) eventsSource(cfg Config) *source {
	return &source{
		name:  SourceEvents,
		match: func(subject string) bool { return strings.HasPrefix(subject, cfg.EventsPrefix+".") },
		parse: func(m delivery) (parsed, error) { return in.parseEvent(cfg, m) },
	}
}

// parseEvent reads an event envelope: its tenant from the subject (which
// must be the envelope's), the envelope strictly (contracts), its event_id
// derived from the content when missing, so that a redelivery starts
// nothing new.
func (in *Ingress) parseEvent(cfg Config, m delivery) (parsed, error) {
	var p parsed
	tenant, err := ParseEventsSubject(cfg.EventsPrefix, m.Subject())
	if err != nil {
		return p, reject(ReasonInvalidSubject, err)
	}
	if !knownTenant(cfg, tenant) {
		return p, reject(ReasonUnknownTenant, fmt.Errorf("tenant %q is not served by this ingress", tenant))
	}
	env, err := contracts.ParseEventEnvelope(m.Data())
	if err != nil {
		return p, reject(ReasonInvalidPayload, err)
	}
	if env.TenantID != tenant {
		return p, reject(ReasonTenantMismatch, fmt.Errorf("envelope of tenant %q published on %s", env.TenantID, m.Subject()))
	}
	env.EnsureEventID()
	p.dedupKey = env.EventID
	p.key = tenant + "/" + env.EventID
	p.tenant = tenant
	p.apply = func(ctx context.Context) (string, error) {
		routed, err := in.Platform.Deliver(ctx, env)
		if err != nil {
			return "", err
		}
		if len(routed.Runs) == 0 {
			return OutcomeNoRuns, nil
		}
		for _, r := range routed.Runs {
			if !r.Duplicate {
				return OutcomeApplied, nil
			}
		}
		return OutcomeDuplicate, nil
	}
	return p, nil
}
