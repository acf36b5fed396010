-- 0003_tenant_ids_never_reused.sql — a tenant's id is its identity forever.
--
-- The engine knows a tenant by its row id ("t<id>": prefix-cache namespaces,
-- fair-share state), never by its name, because a deleted tenant's name can
-- be given to a new tenant. tenants.id is an INTEGER PRIMARY KEY without
-- AUTOINCREMENT: SQLite gives a new row max(id) + 1, so an id could come back
-- only if the row holding the largest id were deleted, or an id changed.
-- loragate never does either (tenants are soft-deleted: deleted_at), and these
-- triggers make both impossible, whoever writes the file.

CREATE TRIGGER tenants_no_delete BEFORE DELETE ON tenants
BEGIN SELECT RAISE (ABORT, 'tenants are never deleted (set deleted_at): a tenant id is never reused'); END;

CREATE TRIGGER tenants_id_fixed BEFORE UPDATE OF id ON tenants WHEN NEW.id IS NOT OLD.id
BEGIN SELECT RAISE (ABORT, 'a tenant id never changes'); END;
