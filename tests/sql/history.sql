-- The worker's operations on a session with a long history cost what their
-- heads cost, not what the session ever held. Session hist has 2,000
-- events, all completed (2,000 cursors with no head), beside 10 sessions of
-- 200; the tables have no statistics (plans made on a new connection see
-- only their size). Each operation below prints "<name> <rows> <blocks>"
-- (read_marks.sql): what it read from the a2 tables and their indexes,
-- which tests/integration/test_store_scale.sh bounds. A join on a cursor's
-- or an event's key planned as a scan of the session read some 4,000 rows
-- an operation.
alter table a2_cursors set (autovacuum_enabled = off);
alter table a2_events set (autovacuum_enabled = off);
\ir fill.sql
select pg_temp.fill('hist', 2000, 'w', 'completed');
select pg_temp.fill('other-' || s, 200, 'w', 'completed') from generate_series(1, 10) s;
\c
\ir read_marks.sql
-- The completions left dead entries in the heads' indexes; the first scan
-- marks them so (as any scan, or vacuum, would) and is not measured.
select a2_claim(session => 'hist', holder => 'h', ttl_ms => 60000, consumers => '["w"]',
                now_ms => 4000)->>'outcome' as warm_claim;
begin;
select pg_temp.mark('start');
select a2_append(session => 'hist', now_ms => 5000, events => '[
  {"type": "job", "targets": [{"consumer": "w"}]}, {"type": "job", "targets": [{"consumer": "w"}]},
  {"type": "job", "targets": [{"consumer": "w"}]}, {"type": "job", "targets": [{"consumer": "w"}]}]')->>'outcome';
select pg_temp.mark('append');
select a2_append(session => 'hist', now_ms => 5000, events => '[
  {"type": "job", "id": "x1", "targets": [{"consumer": "v"}]},
  {"type": "job", "id": "x2", "targets": [{"consumer": "v"}]}]')->>'outcome';
select pg_temp.mark('append_ids');
select a2_append(session => 'hist', now_ms => 5000, events => '[
  {"type": "job", "id": "x1", "targets": [{"consumer": "v"}]},
  {"type": "job", "id": "x2", "targets": [{"consumer": "v"}]}]')->>'outcome';
select pg_temp.mark('append_replay');
select jsonb_array_length(a2_claim(session => 'hist', holder => 'h', ttl_ms => 60000,
                                   consumers => '["w"]', now_ms => 5000)->'heads');
select pg_temp.mark('claim');
-- A claim updates its rows in place (no index names a claim's columns).
select 'claim_hot ' || pg_stat_get_xact_tuples_hot_updated('a2_cursors'::regclass);
select a2_complete(session => 'hist', consumer => 'w', lane => null, index => 2001, attempt => 1,
                   events => '[]', now_ms => 5100)->>'outcome';
select pg_temp.mark('complete');
select pg_temp.complete_pair('hist', 'w', 2002, 5200);
select pg_temp.mark('batch');
select jsonb_array_length(a2_renew(session => 'hist', holder => 'h', ttl_ms => 60000, now_ms => 5300,
                                   claims => '[{"consumer": "w", "index": 2004, "attempt": 1}]')->'renewed');
select pg_temp.mark('renew');
select a2_fail(session => 'hist', consumer => 'w', lane => null, index => 2004, attempt => 1,
               error => 'x', max_failures => 3, retry_after_ms => 10, now_ms => 5400)->>'outcome';
select pg_temp.mark('fail');
select a2_claim(session => 'hist', holder => 'h', ttl_ms => 60000, consumers => '["w"]',
                now_ms => 5405)->>'outcome';
select pg_temp.mark('claim_busy');
select jsonb_array_length(a2_claim(session => 'hist', holder => 'h', ttl_ms => 60000,
                                   consumers => '["w"]', now_ms => 6000)->'heads');
select pg_temp.mark('claim_retry');
select a2_complete(session => 'hist', consumer => 'w', lane => null, index => 2004, attempt => 2,
                   events => '[{"type": "child", "id": "c1", "targets": [{"consumer": "w"}]}]',
                   now_ms => 6100)->>'outcome';
select pg_temp.mark('complete_events');
select a2_complete(session => 'hist', consumer => 'w', lane => null, index => 2004, attempt => 2,
                   events => '[{"type": "child", "id": "c1", "targets": [{"consumer": "w"}]}]',
                   now_ms => 6100)->>'outcome';
select pg_temp.mark('complete_replay');
select a2_claim(session => 'hist', holder => 'h', ttl_ms => 60000, consumers => '["w"]',
                now_ms => 6200, after_xid => (pg_current_xact_id()::text::bigint & 4294967295))->>'outcome';
select pg_temp.mark('claim_after_xid');
select 'reltuples ' || reltuples from pg_class where oid = 'a2_cursors'::regclass;
commit;
