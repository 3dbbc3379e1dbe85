-- A queue table is often vacuumed when no head is pending: its statistics
-- then say every index of heads is empty. The operations on one session
-- must still read that session's heads, not every session's: here 40
-- sessions of 100 completed events are vacuumed and analyzed (with
-- a2_cursors_pending rebuilt empty, smaller than a2_cursors_heads), then
-- get 100 pending heads each for consumer w; on a new connection one
-- session's claim, one completion, a busy claim, an empty claim and an
-- append each print "<name> <rows and index entries read>", which
-- tests/integration/test_store_scale.sh bounds by what the session holds.
alter table a2_cursors set (autovacuum_enabled = off);
alter table a2_events set (autovacuum_enabled = off);
do $$
declare
    c jsonb;
begin
    for s in 1..40 loop
        perform a2_append(session => 'v-' || s, now_ms => 500, events => (
            select jsonb_agg(jsonb_build_object('type', 'job',
                                                'targets', '[{"consumer": "w"}]'::jsonb))
              from generate_series(1, 100)));
        c := a2_claim(session => 'v-' || s, holder => 'old', ttl_ms => 600000,
                      consumers => '["w"]', now_ms => 500);
        perform a2_batch((select jsonb_agg(jsonb_build_object(
                              'op', 'complete', 'session', 'v-' || s, 'consumer', 'w',
                              'index', h->'index', 'attempt', h->'attempt', 'now_ms', 600))
                            from jsonb_array_elements(c->'heads') h));
    end loop;
end
$$;
-- (a2_cursors_pending rebuilt empty: smaller than a2_cursors_heads, which
-- keeps the pages of its deleted entries)
reindex index a2_cursors_pending;
vacuum (analyze) a2_cursors, a2_events, a2_clears;
do $$
begin
    for s in 1..40 loop
        perform a2_append(session => 'v-' || s, now_ms => 1000, events => (
            select jsonb_agg(jsonb_build_object('type', 'job',
                                                'targets', '[{"consumer": "w"}]'::jsonb))
              from generate_series(1, 100)));
    end loop;
end
$$;
\c
create function pg_temp.reads() returns bigint
language sql as $$
select sum(pg_stat_get_xact_tuples_returned(c.oid) + pg_stat_get_xact_tuples_fetched(c.oid))::bigint
  from pg_class c
 where c.relname like 'a2\_%' and c.relkind in ('r', 'i')
$$;
create temporary table read_mark (at bigint);
insert into read_mark values (0);
create function pg_temp.mark(what text) returns text
language plpgsql as $$
declare
    r bigint := pg_temp.reads();
    was bigint;
begin
    select at into was from read_mark;
    update read_mark set at = r;
    return what || ' ' || (r - was);
end
$$;
begin;
select pg_temp.mark('start');
select jsonb_array_length(a2_claim(session => 'v-20', holder => 'h', ttl_ms => 60000,
                                   consumers => '["w"]', now_ms => 2000)->'heads');
select pg_temp.mark('vclaim');
select a2_complete(session => 'v-20', consumer => 'w', lane => null, index => 101, attempt => 1,
                   events => '[]', now_ms => 2100)->>'outcome';
select pg_temp.mark('vcomplete');
select a2_claim(session => 'v-20', holder => 'h', ttl_ms => 60000, consumers => '["w"]',
                now_ms => 2200)->>'outcome';
select pg_temp.mark('vclaim_busy');
select a2_claim(session => 'v-none', holder => 'h', ttl_ms => 60000, consumers => '["w"]',
                now_ms => 2200)->>'outcome';
select pg_temp.mark('vclaim_empty');
select a2_append(session => 'v-21', now_ms => 2300,
                 events => '[{"type": "job", "targets": [{"consumer": "w"}]}]')->>'outcome';
select pg_temp.mark('vappend');
select 'vreltuples ' || reltuples from pg_class where oid = 'a2_cursors_pending'::regclass;
commit;
