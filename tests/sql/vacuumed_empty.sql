-- A queue table's statistics are often taken when no head is pending, and
-- a vacuum that finds an index of heads empty records it so. The plans a
-- connection then makes must still read one session's heads, not every
-- session's: here session s0 has 2,000 completed events and 3,000 sessions
-- have one claimed head each for consumer c; the table is analyzed, and
-- both indexes of heads are recorded empty, a2_cursors_pending the smaller
-- (what a vacuum leaves after a run of deletions). On a new connection a
-- claim of one head, an empty claim, a completion and an append each print
-- "<name> <rows> <blocks>" (read_marks.sql), which
-- tests/integration/test_store_scale.sh bounds by blocks: a scan of
-- a2_cursors_pending for a session filtered its non-leading session_id
-- inside the index, returning few entries from every block.
alter table a2_cursors set (autovacuum_enabled = off);
alter table a2_events set (autovacuum_enabled = off);
do $$
declare
    c jsonb;
    ops jsonb;
begin
    perform a2_append(session => 's0', now_ms => 500, events => (
        select jsonb_agg(jsonb_build_object('type', 'job', 'targets', '[{"consumer": "c"}]'::jsonb))
          from generate_series(1, 2000)));
    c := a2_claim(session => 's0', holder => 'old', ttl_ms => 600000, consumers => '["c"]',
                  now_ms => 500);
    for chunk in 0..3 loop
        ops := (select jsonb_agg(jsonb_build_object('op', 'complete', 'session', 's0',
                                                    'consumer', 'c', 'index', h->'index',
                                                    'attempt', h->'attempt', 'now_ms', 600))
                  from jsonb_array_elements(c->'heads') with ordinality as x(h, ord)
                 where (x.ord - 1) / 500 = chunk);
        perform a2_batch(ops);
    end loop;
    for s in 1..3000 loop
        perform a2_append(session => 'r' || s, now_ms => 700,
                          events => '[{"type": "job", "targets": [{"consumer": "c"}]}]');
        perform a2_claim(session => 'r' || s, holder => 'old', ttl_ms => 600000,
                         consumers => '["c"]', now_ms => 700);
    end loop;
end
$$;
analyze a2_cursors, a2_events;
update pg_class set relpages = 2, reltuples = 0 where oid = 'a2_cursors_pending'::regclass;
update pg_class set relpages = 4, reltuples = 0 where oid = 'a2_cursors_heads'::regclass;
\c
select a2_append(session => 'probe', now_ms => 800,
                 events => '[{"type": "job", "targets": [{"consumer": "c"}]}]')->>'outcome';
\ir read_marks.sql
begin;
select pg_temp.mark('start');
select jsonb_array_length(a2_claim(session => 'probe', holder => 'h', ttl_ms => 60000,
                                   consumers => '["c"]', now_ms => 900)->'heads');
select pg_temp.mark('vclaim');
select a2_claim(session => 'nothing', holder => 'h', ttl_ms => 60000, consumers => '["c"]',
                now_ms => 900)->>'outcome';
select pg_temp.mark('vclaim_empty');
select a2_complete(session => 'probe', consumer => 'c', lane => null, index => 1, attempt => 1,
                   events => '[]', now_ms => 1000)->>'outcome';
select pg_temp.mark('vcomplete');
select a2_append(session => 'probe', now_ms => 1100,
                 events => '[{"type": "job", "targets": [{"consumer": "c"}]}]')->>'outcome';
select pg_temp.mark('vappend');
commit;
