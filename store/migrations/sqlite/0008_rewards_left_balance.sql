-- The balance a rewards customer unenrolled with, kept with the unenrollment:
-- a run that a later command starts for the unenrolled customer (which
-- refuses the command and applies nothing) reports it as the customer's
-- status, also once Temporal has forgotten the run that unenrolled.
--
-- left_at is the unenrolled_at the balance was recorded with: a balance
-- counts only while it equals unenrolled_at, so an unenrollment recorded
-- without one (by the previous release, whose statements leave these
-- columns alone) never shows the balance of an earlier unenrollment.
--
-- Expand only: nullable columns that no statement of the previous release
-- names; rows on record have none (their status reports no balance, as
-- before). The migration runner applies this once, under its lock, in the
-- same transaction that records the version.

ALTER TABLE rewards_enrollments ADD COLUMN left_at TEXT;
ALTER TABLE rewards_enrollments ADD COLUMN left_points INTEGER;
ALTER TABLE rewards_enrollments ADD COLUMN left_lifetime_points INTEGER;
ALTER TABLE rewards_enrollments ADD COLUMN left_event_count INTEGER;
