-- Rewards customers belong to a tenant: the enrollments and tier changes of
-- tenant A's customer c-1 are not those of tenant B's c-1. Both tables take a
-- tenant_id, which leads their primary keys; every row on record is the
-- default tenant's, as were all customers before tenants. SQLite cannot
-- change a primary key in place, so each table is rebuilt: created anew,
-- filled with every row, and renamed over the old one. The migration runner
-- applies this once, under its lock, in the same transaction that records
-- the version.

CREATE TABLE rewards_enrollments_0007 (
    customer_id   TEXT NOT NULL,
    enrolled_at   TEXT,
    unenrolled_at TEXT,
    tenant_id     TEXT NOT NULL DEFAULT 'default',
    PRIMARY KEY (tenant_id, customer_id)
) STRICT;
INSERT INTO rewards_enrollments_0007 (customer_id, enrolled_at, unenrolled_at, tenant_id)
    SELECT customer_id, enrolled_at, unenrolled_at, 'default' FROM rewards_enrollments;
DROP TABLE rewards_enrollments;
ALTER TABLE rewards_enrollments_0007 RENAME TO rewards_enrollments;

CREATE TABLE rewards_tier_changes_0007 (
    customer_id TEXT NOT NULL,
    changed_at  TEXT NOT NULL,
    from_tier   TEXT NOT NULL,
    to_tier     TEXT NOT NULL,
    points      INTEGER NOT NULL,
    tenant_id   TEXT NOT NULL DEFAULT 'default',
    PRIMARY KEY (tenant_id, customer_id, changed_at, to_tier)
) STRICT;
INSERT INTO rewards_tier_changes_0007 (customer_id, changed_at, from_tier, to_tier, points, tenant_id)
    SELECT customer_id, changed_at, from_tier, to_tier, points, 'default' FROM rewards_tier_changes;
DROP TABLE rewards_tier_changes;
ALTER TABLE rewards_tier_changes_0007 RENAME TO rewards_tier_changes;
