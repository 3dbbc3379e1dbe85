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
\ir fill.sql
select pg_temp.fill('s0', 2000, 'c', 'completed');
select pg_temp.fill('r' || s, 1, 'c', 'claimed') from generate_series(1, 3000) s;
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
