package contracts

// Validate checks the envelope against the event-envelope contract, the
// same rules as event-envelope.schema.json:
//
//   - event_id: optional; when given 1..200 characters matching
//     ^[A-Za-z0-9][A-Za-z0-9._:@/+=-]*$, because it becomes part of the
//     Temporal workflow ID "activity-{activity_id}:{event_id}"; and not
//     starting with "manual:" or a date such as 2026-11-21T (matching
//     ^(manual:|[0-9]{4}-[0-9]{2}-[0-9]{2}T)), which would collide with the
//     workflow IDs of manual and cron runs.
//   - event_type: required, 1..200 characters matching
//     ^[A-Za-z0-9][A-Za-z0-9._:/-]*$ (e.g. "order.created").
//   - source: required, 1..200 characters, not blank.
//   - tenant_id: required, 1..100 characters matching ^[A-Za-z0-9][A-Za-z0-9._-]*$
//     (tenant.Validate).
//   - occurred_at: required (non-zero), with a year from 0000 to 9999 so it
//     can be written in RFC 3339. In JSON it is an RFC 3339 date-time with
//     upper-case T and Z and no leap second, e.g. 2026-11-21T10:00:00Z.
//   - payload: optional; when given, a JSON object.
//
// It returns nil when the envelope is valid and a *ValidationError listing
// every problem otherwise.
func (e EventEnvelope) Validate() error {
	var p problems
	if e.EventID != "" {
		checkIdentifier(&p, "event_id", e.EventID, maxEventIDLen, eventIDRE)
		if eventIDReservedRE.MatchString(e.EventID) {
			p.add("event_id", `must not start with "manual:" or a date (YYYY-MM-DDT): such IDs belong to manual and cron runs`)
		}
	}
	checkIdentifier(&p, "event_type", e.EventType, maxEventTypeLen, eventTypeRE)
	checkText(&p, "source", e.Source, maxSourceLen)
	checkTenantID(&p, "tenant_id", e.TenantID)
	switch {
	case e.OccurredAt.IsZero():
		p.add("occurred_at", "required")
	case e.OccurredAt.Year() < 0 || e.OccurredAt.Year() > 9999:
		p.add("occurred_at", "must have a year between 0000 and 9999")
	}
	checkJSONObject(&p, "payload", e.Payload)
	return p.err(docEventEnvelope)
}

// ParseEventEnvelope decodes and validates one event envelope sent as JSON.
//
// Decoding is strict: the document must be exactly one JSON object; unknown
// fields (also at other letter case), duplicate fields, null values, values
// of the wrong JSON type, integers written with a fraction or exponent and
// explicit empty values of optional fields are rejected, each with the path
// of the offending value. The decoded envelope is then checked with Validate.
// Any problem comes back as a *ValidationError (problems of the document's
// shape first, on their own) and the zero EventEnvelope.
//
// ParseEventEnvelope does not fill in a missing event_id: the ingress does
// that with EnsureEventID.
func ParseEventEnvelope(data []byte) (EventEnvelope, error) {
	var e EventEnvelope
	if p := decodeStrict(data, &e); len(p) > 0 {
		return EventEnvelope{}, p.err(docEventEnvelope)
	}
	if err := e.Validate(); err != nil {
		return EventEnvelope{}, err
	}
	return e, nil
}
