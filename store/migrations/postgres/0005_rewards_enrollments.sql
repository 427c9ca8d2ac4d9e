-- One spelling across the project: the enrollments table of 0003 takes the
-- American name, and its primary key the name a table created as
-- rewards_enrollments would have. The migration runner applies this once,
-- under its lock, in the same transaction that records the version.

ALTER TABLE rewards_enrolments RENAME TO rewards_enrollments;
ALTER TABLE rewards_enrollments RENAME CONSTRAINT rewards_enrolments_pkey TO rewards_enrollments_pkey;
