-- Schema version 1 shipped the store's statements through
-- a2_batch(statements text[], params jsonb); the operations are functions
-- now, and a2_batch takes operations.
drop function if exists a2_batch(text[], jsonb);
drop function if exists a2_batch_prepared_limit();
-- Schema 6: a2__unpin takes arrays of heads (the old one is dropped after
-- every function that called it is replaced above).
drop function if exists a2__unpin(text, text, text, bigint);

-- The schema version this file installs; `a2 schema check` compares it.
insert into a2_meta (key, value) values ('schema_version', '7')
on conflict (key) do update set value = excluded.value;
