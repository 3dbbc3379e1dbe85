-- pg_temp.mark(what): "<what> <rows and index entries read> <blocks read>"
-- from the a2 tables and their indexes since the last mark, in this
-- transaction (pg_stat_get_xact_*). Rows alone miss a scan that filters a
-- non-leading key inside an index: it returns few entries and reads every
-- block. Included by the scripts test_store_scale runs, after \c.
create temporary table read_mark (rows bigint, blocks bigint);
insert into read_mark values (0, 0);
create function pg_temp.mark(what text) returns text
language plpgsql as $$
declare
    r bigint;
    b bigint;
    was read_mark;
begin
    select sum(pg_stat_get_xact_tuples_returned(c.oid) + pg_stat_get_xact_tuples_fetched(c.oid)),
           sum(pg_stat_get_xact_blocks_fetched(c.oid))
      into r, b
      from pg_class c
     where c.relname like 'a2\_%' and c.relkind in ('r', 'i');
    select * into was from read_mark;
    update read_mark set rows = r, blocks = b;
    return what || ' ' || (r - was.rows) || ' ' || (b - was.blocks);
end
$$;

-- pg_temp.complete_pair(session, consumer, first, now_ms): heads first and
-- first + 1 of consumer's event cursors (attempt 1) completed in one
-- a2_batch; their outcomes, joined by commas.
create function pg_temp.complete_pair(session text, consumer text, first bigint, now_ms bigint)
returns text
language sql as $$
select string_agg(r->>'outcome', ',')
  from jsonb_array_elements(a2_batch((
           select jsonb_agg(jsonb_build_object('op', 'complete', 'session', session,
                                               'consumer', consumer, 'index', i,
                                               'attempt', 1, 'now_ms', now_ms) order by i)
             from generate_series(first, first + 1) i))) r
$$;
