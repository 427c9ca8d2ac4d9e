package store

import (
	"fmt"
	"time"
)

// timeLayout is how times are bound and how SQLite stores them: RFC 3339 in
// UTC with exactly six fractional digits. The fixed width makes comparing the
// TEXT values order them by time (for years 0000-9999), and PostgreSQL parses
// the same text into TIMESTAMPTZ, so one SQL text serves both databases.
const timeLayout = "2006-01-02T15:04:05.000000Z"

// dbTime is the bound value of a time: t in UTC, truncated to microseconds,
// which is PostgreSQL's precision.
func dbTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// dbTimePtr is dbTime for a nullable column: nil stays NULL.
func dbTimePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return dbTime(*t)
}

// scanTime reads a nullable time column from either database: PostgreSQL
// returns a time.Time, SQLite the text written by dbTime. Both come out as
// the same UTC value.
type scanTime struct {
	t     time.Time
	valid bool
}

// Scan implements sql.Scanner.
func (s *scanTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*s = scanTime{}
		return nil
	case time.Time:
		*s = scanTime{t: v.UTC(), valid: true}
		return nil
	case string:
		return s.parse(v)
	case []byte:
		return s.parse(string(v))
	}
	return fmt.Errorf("scan time: unsupported type %T", src)
}

func (s *scanTime) parse(text string) error {
	t, err := time.Parse(time.RFC3339Nano, text)
	if err != nil {
		return fmt.Errorf("scan time: %w", err)
	}
	*s = scanTime{t: t.UTC(), valid: true}
	return nil
}

// ptr returns the time, or nil for NULL.
func (s scanTime) ptr() *time.Time {
	if !s.valid {
		return nil
	}
	t := s.t
	return &t
}
