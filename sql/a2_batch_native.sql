-- The native a2_batch: sql/a2_batch.c built as a2_batch.so (`make native`).
-- Same signature and contract as the PL/pgSQL a2_batch of schema.sql; it
-- prepares each statement once per server process through SPI instead of
-- running it through a per-statement EXECUTE. Apply after schema.sql:
--   psql -v so=/path/to/a2_batch.so -f sql/a2_batch_native.sql
-- Without -v so, the library is looked up as '$libdir/a2_batch', where
-- `make install-native` puts it. Applying schema.sql again restores the
-- PL/pgSQL version.
\if :{?so}
\else
\set so '$libdir/a2_batch'
\endif
create or replace function a2_batch(statements text[], params jsonb)
returns setof jsonb
language c
volatile
as :'so', 'a2_batch';
