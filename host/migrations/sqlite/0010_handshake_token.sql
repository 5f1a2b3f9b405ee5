-- The token a tenant endpoint's unsigned GET handshake must present (Meta's
-- `hub.verify_token`), sealed like `destination_sealed` (secret id `handshake_token`);
-- NULL: none set, and such a handshake is refused.
ALTER TABLE managed_endpoints ADD COLUMN handshake_sealed BLOB;
