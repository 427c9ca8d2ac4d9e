-- Rewards customers belong to a tenant: the enrollments and tier changes of
-- tenant A's customer c-1 are not those of tenant B's c-1.
--
-- Expand only: the previous release's workers share this database during a
-- rolling or versioned deploy, and their statements name the keys of 0003
-- (ON CONFLICT (customer_id) on rewards_enrollments, the primary key
-- (customer_id, changed_at, to_tier) of rewards_tier_changes). So both keys
-- stay exactly as they are, on the columns they are on, and no row is
-- rewritten. A default-tenant customer's rows keep the bare customer ID as
-- customer_id, as every row before tenants did; another tenant's customer is
-- recorded under the scoped key {tenant}/{customer_id}, the scheme of its
-- workflow ID. Neither a tenant ID nor a customer ID holds a '/', so a scoped
-- key never equals a default-tenant customer ID nor another tenant's key,
-- and the existing keys keep tenants apart.
--
-- tenant_id names each row's tenant for queries by tenant; its constant
-- default makes every row on record, and every row the previous release
-- writes, the default tenant's. The store writes it with the key and reads
-- by the key. Adding a column is a change of the schema only (no table is
-- rebuilt). The migration runner applies this once, under its lock, in the
-- same transaction that records the version.

ALTER TABLE rewards_enrollments ADD COLUMN tenant_id TEXT NOT NULL DEFAULT 'default';
ALTER TABLE rewards_tier_changes ADD COLUMN tenant_id TEXT NOT NULL DEFAULT 'default';
