-- One spelling across the project: the enrollments table of 0003 takes the
-- American name. The migration runner applies this once, under its lock, in
-- the same transaction that records the version.

ALTER TABLE rewards_enrolments RENAME TO rewards_enrollments;
