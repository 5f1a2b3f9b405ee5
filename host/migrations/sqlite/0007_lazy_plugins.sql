-- What an uploaded plugin said of itself when it was accepted (contract, info(),
-- algorithms; JSON), so a process serves endpoints naming it before loading its code.
-- NULL for plugins uploaded before this column: they are loaded once and filled in.
ALTER TABLE tenant_plugins ADD COLUMN described TEXT;

-- The endpoint's plugin configuration check, as it answered for the plugin digest it
-- names (JSON: {"digest", "facts"}), so a reload builds the endpoint without loading
-- the plugin. Used only while the endpoint's plugin still has that digest.
ALTER TABLE managed_endpoints ADD COLUMN facts TEXT;
