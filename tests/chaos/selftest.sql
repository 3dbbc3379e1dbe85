-- The checker's own test: plants one defect of each kind in a copy of the
-- run's evidence (inside a transaction that is rolled back) and lists the
-- invariants check.sql reports violated. tests/chaos/run requires each
-- planted defect to be caught by the invariant named beside it.
\set ON_ERROR_STOP 1
begin;
-- A transition missing from the audit (a claim), and one doubled.
delete from chaos_audit where line = (select min(line) from chaos_audit where j->>'transition' = 'claimed');
insert into chaos_audit(j) select j from chaos_audit where j->>'transition' = 'started' limit 1;
-- A handler invocation doubled, and one without any claim.
insert into chaos_inv select * from chaos_inv limit 1;
insert into chaos_inv select consumer, session_id, idx, attempt + 1000, 'ok', 1, ms from chaos_inv limit 1;
-- A lane event that started long before its predecessor completed.
insert into chaos_inv
select 'chaos_lane', l.session_id, l.idx, c.attempt, 'ok', 1, 0
from a2_lane_events l
join lateral (select (j->'before'->>'attempt')::int as attempt from chaos_audit
              where j->>'session' = l.session_id and j->>'consumer' = 'chaos_lane'
                and j->>'transition' in ('completed', 'went_idle')
                and (j->'before'->>'head')::bigint = l.idx limit 1) c on true
where l.consumer = 'chaos_lane'
  and exists (select 1 from a2_lane_events p where p.session_id = l.session_id
                and p.consumer = l.consumer and p.lane = l.lane and p.idx < l.idx)
limit 1;
-- A lost append: acknowledged, not stored.
insert into chaos_produced values ('s0', 'never-stored', null, false, 0, 0);
-- A completion that returned its event twice.
insert into a2_events(session_id, idx, event_type, event_id, created_at, cause)
select session_id, (select max(idx) + 1 from a2_events e where e.session_id = d.session_id),
       'done', 'doubled-done', 0, cause
from a2_events d where event_type = 'done' limit 1;
\o /dev/null
\i tests/chaos/check.sql
\o
select string_agg(ord::text, ',' order by ord) from chaos_result where violations <> 0;
rollback;
