-- A claim and a batch of completions on a table just filled, before any
-- statistics: each head must cost a few index entries, not a walk of the
-- other sessions' cursors. 40 sessions of 100 events for consumer w; 39 of
-- them claimed by another holder (20 of those completed); then, on a new
-- connection (plans made with no statistics), session load-40 is claimed
-- and its 100 heads completed in one a2_batch, in one transaction whose
-- index reads on a2_cursors are counted. Run by
-- tests/integration/test_store_scale.sh, which checks the counts.
alter table a2_cursors set (autovacuum_enabled = off);
alter table a2_events set (autovacuum_enabled = off);
\ir fill.sql
select pg_temp.fill('load-' || s, 100, 'w', case when s <= 20 then 'completed'
                                                when s <= 39 then 'claimed'
                                                else 'appended' end)
  from generate_series(1, 40) s;
\c
begin;
select a2_claim(session => 'load-40', holder => 'h', ttl_ms => 60000, consumers => '["w"]',
                now_ms => 2000) as c \gset
select 'claim_read ' || sum(pg_stat_get_xact_tuples_returned(i.indexrelid))
  from pg_index i where i.indrelid = 'a2_cursors'::regclass;
select 'completed ' || count(*)
  from jsonb_array_elements(a2_batch((select jsonb_agg(jsonb_build_object(
           'op', 'complete', 'session', 'load-40', 'consumer', 'w', 'index', h->'index',
           'attempt', h->'attempt', 'now_ms', 3000))
         from jsonb_array_elements((:'c'::jsonb)->'heads') h))) r
 where r->>'outcome' = 'completed';
select 'total_read ' || sum(pg_stat_get_xact_tuples_returned(i.indexrelid))
  from pg_index i where i.indrelid = 'a2_cursors'::regclass;
select 'reltuples ' || reltuples from pg_class where oid = 'a2_cursors'::regclass;
commit;
