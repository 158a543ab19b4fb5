-- Key rotation: `opgate agents rotate` moves an agent's key to previous_key_* and keeps
-- accepting it until previous_key_expires_at (a grace period for deploying the new
-- key); with no grace they stay NULL and the old key stops at once. Only the SHA-256 of
-- either key is stored. A revoked agent accepts neither.
ALTER TABLE agents ADD COLUMN previous_key_id TEXT;
ALTER TABLE agents ADD COLUMN previous_key_hash CHAR(64);
ALTER TABLE agents ADD COLUMN previous_key_expires_at TIMESTAMPTZ;
ALTER TABLE agents ADD CONSTRAINT agents_previous_key_complete
    CHECK ((previous_key_id IS NULL) = (previous_key_hash IS NULL)
           AND (previous_key_id IS NULL) = (previous_key_expires_at IS NULL));
ALTER TABLE agents ADD CONSTRAINT agents_previous_key_differs
    CHECK (previous_key_id <> key_id);
-- Authentication looks a key id up in key_id or previous_key_id (a BitmapOr of the two
-- unique indexes): one agent per key id either way.
CREATE UNIQUE INDEX agents_previous_key_id ON agents (previous_key_id);
