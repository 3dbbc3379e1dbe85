-- Schema version 1 shipped the store's statements through
-- a2_batch(statements text[], params jsonb); the operations are functions
-- now, and a2_batch takes operations.
drop function if exists a2_batch(text[], jsonb);
drop function if exists a2_batch_prepared_limit();
-- Schema 6: a2__unpin takes arrays of heads (the old one is dropped after
-- every function that called it is replaced above).
drop function if exists a2__unpin(text, text, text, bigint);

-- Every operation that plans generically (plan_cache_mode set on it) also
-- turns sequential scans off, set here on each such function of the a2
-- schema, after the files above replaced them (10-common.sql says why).
do $$
declare
    f regprocedure;
begin
    for f in select p.oid::regprocedure from pg_proc p
              where p.proname like 'a2\_%' and pg_function_is_visible(p.oid)
                and 'plan_cache_mode=force_generic_plan' = any(p.proconfig)
    loop
        execute format('alter function %s set enable_seqscan = off', f);
    end loop;
end
$$;

-- The schema version this file installs; `a2 schema check` compares it.
insert into a2_meta (key, value) values ('schema_version', '9')
on conflict (key) do update set value = excluded.value;
