-- A worker's connection plans its statements once, often when the tables
-- are empty (a2_warm at start), and keeps those plans as the tables grow.
-- Planned on empty tables, an update by ctid was a sequential scan of
-- a2_cursors. Here one connection warms on empty tables, then fills 30
-- sessions with 100 completed events each, and a claim of two heads, a
-- batch that completes them and a single completion print "<name> <rows>
-- <blocks>" (read_marks.sql), which tests/integration/test_store_scale.sh
-- bounds. Run first, on the empty tables of the test database.
alter table a2_cursors set (autovacuum_enabled = off);
alter table a2_events set (autovacuum_enabled = off);
\c
-- (the counter first: a temporary table's schema, made later, would change
-- the search path and have every plan made again)
\ir read_marks.sql
\ir fill.sql
select a2_warm() is not null as warmed;
select pg_temp.fill('p-' || s, 100, 'w', 'completed') from generate_series(1, 30) s;
select a2_append(session => 'p-0', now_ms => 2000, events => '[
  {"type": "job", "targets": [{"consumer": "w"}]}, {"type": "job", "targets": [{"consumer": "w"}]},
  {"type": "job", "targets": [{"consumer": "w"}]}]')->>'outcome';
begin;
select pg_temp.mark('start');
select jsonb_array_length(a2_claim(session => 'p-0', holder => 'h', ttl_ms => 60000,
                                   consumers => '["w"]', now_ms => 2100)->'heads');
select pg_temp.mark('pclaim');
select pg_temp.complete_pair('p-0', 'w', 1, 2200);
select pg_temp.mark('pbatch');
select a2_complete(session => 'p-0', consumer => 'w', lane => null, index => 3, attempt => 1,
                   events => '[]', now_ms => 2300)->>'outcome';
select pg_temp.mark('pcomplete');
commit;
