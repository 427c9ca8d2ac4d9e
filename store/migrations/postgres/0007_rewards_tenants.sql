-- Rewards customers belong to a tenant: the enrollments and tier changes of
-- tenant A's customer c-1 are not those of tenant B's c-1. Both tables take a
-- tenant_id, which leads their primary keys; every row on record is the
-- default tenant's, as were all customers before tenants (a constant
-- default: no row is rewritten to add the column). The primary keys keep
-- their names. The migration runner applies this once, under its lock, in
-- the same transaction that records the version.

ALTER TABLE rewards_enrollments ADD COLUMN tenant_id TEXT NOT NULL DEFAULT 'default';
ALTER TABLE rewards_enrollments DROP CONSTRAINT rewards_enrollments_pkey;
ALTER TABLE rewards_enrollments ADD CONSTRAINT rewards_enrollments_pkey PRIMARY KEY (tenant_id, customer_id);

ALTER TABLE rewards_tier_changes ADD COLUMN tenant_id TEXT NOT NULL DEFAULT 'default';
ALTER TABLE rewards_tier_changes DROP CONSTRAINT rewards_tier_changes_pkey;
ALTER TABLE rewards_tier_changes ADD CONSTRAINT rewards_tier_changes_pkey PRIMARY KEY (tenant_id, customer_id, changed_at, to_tier);
