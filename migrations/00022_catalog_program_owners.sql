-- Programs have owners (decisions §33): the PI's username (pi_username; pi stays the display
-- name) and the co-investigators (observing_program_members), who may change the program's obs
-- units and sources. The catalog service decides who may do what (catalog.MayChange); the
-- database holds what it can of the rule:
--   * a program written by a user has a PI: pi_username may be NULL only on a row no user
--     created (created_by NULL: seeded or legacy data), which only admins change;
--   * a member belongs to one existing program once (primary key), goes with its program, and
--     is not the program's PI (checked by the service, which writes both in one transaction).
-- Existing programs belong to their creator: pi_username := created_by.

-- +goose Up
ALTER TABLE observing_programs
    ADD COLUMN pi_username TEXT CHECK (length(pi_username) BETWEEN 1 AND 255);
UPDATE observing_programs SET pi_username = created_by WHERE created_by IS NOT NULL AND created_by <> '';
ALTER TABLE observing_programs
    ADD CONSTRAINT observing_programs_pi_username_set CHECK (pi_username IS NOT NULL OR created_by IS NULL OR created_by = '');
CREATE INDEX observing_programs_pi_username ON observing_programs (pi_username);

CREATE TABLE observing_program_members (
    program_id BIGINT      NOT NULL REFERENCES observing_programs (id) ON DELETE CASCADE,
    username   TEXT        NOT NULL CHECK (length(username) BETWEEN 1 AND 255),
    added_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (program_id, username)
);
-- "the programs of user X" (membership lookups by username).
CREATE INDEX observing_program_members_username ON observing_program_members (username);

-- +goose Down
DROP TABLE observing_program_members;
ALTER TABLE observing_programs DROP CONSTRAINT observing_programs_pi_username_set;
ALTER TABLE observing_programs DROP COLUMN pi_username;
