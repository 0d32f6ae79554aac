-- +goose Up
-- Operator console sessions, kept on the server so that every
-- replica sees a logout at once and an idle session ends. The cookie holds
-- a random id; only its SHA-256 is stored, so reading this table gives no
-- usable cookie. token_tag ties a session to the INTERNAL_API_TOKEN it was
-- opened with (8 bytes of an HMAC keyed by the token): rotating the token
-- ends every session. Rows past expires_at are deleted at the next login.
CREATE TABLE ops_sessions (
    id_hash    bytea       PRIMARY KEY,
    csrf       text        NOT NULL,
    created_at timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    remote     text        NOT NULL,
    token_tag  bytea       NOT NULL
);
CREATE INDEX ops_sessions_expires_at_idx ON ops_sessions (expires_at);

-- +goose Down
DROP TABLE ops_sessions;
