-- a2 schema: the tables, and every store operation as a SQL function, for
-- psql: `psql -v ON_ERROR_STOP=1 -f sql/schema.sql`. It includes the files
-- of sql/src in name order (\ir reads them beside this file); add a line
-- here for a new one. `a2 schema apply` and the installed
-- share/a2/schema.sql use the same files as one text (deploy/assemble-schema).
-- Applying it twice is harmless: every object is created only when missing,
-- functions are replaced, and the version row is upserted. docs/sql.md is
-- the reference of the functions.

set client_min_messages = warning;

\ir src/00-tables.sql
\ir src/10-common.sql
\ir src/20-append.sql
\ir src/30-read.sql
\ir src/40-claim.sql
\ir src/45-log.sql
\ir src/50-complete.sql
\ir src/60-fail.sql
\ir src/65-ops.sql
\ir src/70-clear.sql
\ir src/80-state.sql
\ir src/85-presence.sql
\ir src/90-batch.sql
\ir src/95-warm.sql
\ir src/99-meta.sql
