-- The checker's own test: for each invariant of check.sql, plants a defect
-- it must catch in the run's evidence (each inside a transaction that is
-- rolled back) and prints one line per defect:
--   LABEL EXPECTED FIRED     e.g. "2b 2 1,2"
-- tests/chaos/run requires EXPECTED to be among the invariants FIRED.
\set ON_ERROR_STOP 1
\pset tuples_only on
\pset format unaligned

-- Each defect: begin, plant it, name it (LABEL EXPECTED) in :defect, then
-- fired.sql checks and rolls it back.

-- 1a: A lost append: acknowledged, never stored.
begin;
insert into chaos_produced values ('s0', 'never-stored', null, false, 0, 0);
\set defect '1a 1'
\ir fired.sql

-- 1b: An append stored with other content than its producer sent.
begin;
update a2_events set payload = jsonb_set(payload, '{lf}', '7')
where (session_id, idx) = (select session_id, idx from a2_events where event_type = 'job'
                           order by session_id, idx limit 1);
\set defect '1b 1'
\ir fired.sql

-- 2a: A gap in a session's indexes.
begin;
update a2_events set idx = idx + 1000
where (session_id, idx) = (select session_id, max(idx) from a2_events group by session_id
                           order by session_id limit 1);
\set defect '2a 2'
\ir fired.sql

-- 2b: Two events of one producer indexed against the order it appended them.
begin;
insert into a2_events(session_id, idx, event_type, event_id, created_at, payload)
select session_id, max(idx) + v.k, 'job', 'p9-' || (3 - v.k), 0, '{}'
from a2_events, (values (1), (2)) v(k)
where session_id = (select min(session_id) from a2_events)
group by session_id, v.k;
\set defect '2b 2'
\ir fired.sql

-- 3: A lane head completed twice.
\set consumer chaos_lane
\set defect '3 3'
\ir completed_twice.sql

-- 4: A concurrent head completed twice.
\set consumer chaos_conc
\set defect '4 4'
\ir completed_twice.sql

-- 5: A log head completed twice.
\set consumer chaos_log
\set defect '5 5'
\ir completed_twice.sql

-- 6a: A dead letter with fewer failures than its consumer's maximum.
begin;
update a2_cursors set failure_count = 1
where ctid = (select ctid from a2_cursors where failed_at is not null limit 1);
\set defect '6a 6'
\ir fired.sql

-- 6b: Failures a worker reported without a failed handler run.
begin;
delete from chaos_inv where outcome = 'fail';
\set defect '6b 6'
\ir fired.sql

-- 7: A completion that returned its event twice.
begin;
insert into a2_events(session_id, idx, event_type, event_id, created_at, cause)
select session_id, (select max(idx) + 1 from a2_events e where e.session_id = d.session_id),
       'done', 'doubled-done', 0, cause
from a2_events d where event_type = 'done' limit 1;
\set defect '7 7'
\ir fired.sql

-- 8: Fewer invocations than completions.
begin;
delete from chaos_inv;
\set defect '8 8'
\ir fired.sql

-- 9: A handler invocation doubled.
begin;
insert into chaos_inv select * from chaos_inv limit 1;
\set defect '9 9'
\ir fired.sql

-- 10: A completion whose handler never ran.
begin;
delete from chaos_inv i
using (select j->>'consumer' as c, j->>'session' as s, (j->'before'->>'head')::bigint as h,
              (j->'before'->>'attempt')::int as a
       from chaos_audit where j->>'transition' in ('completed', 'went_idle') limit 1) x
where i.consumer = x.c and i.session_id = x.s and i.idx = x.h and i.attempt = x.a;
\set defect '10 10'
\ir fired.sql

-- 11: A failed invocation with no failure or takeover recorded.
begin;
insert into chaos_inv select consumer, session_id, idx, attempt + 1000, 'fail', 1, ms from chaos_inv limit 1;
\set defect '11 11'
\ir fired.sql

-- 12: A lane event that started long before its predecessor completed.
begin;
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
  -- a predecessor that completed (not one dead-lettered and skipped)
  and exists (select 1 from chaos_audit a
               where a.j->>'session' = l.session_id and a.j->>'consumer' = 'chaos_lane'
                 and a.j->>'cursor' = 'lane:' || l.lane
                 and a.j->>'transition' in ('completed', 'went_idle')
                 and (a.j->'before'->>'head')::bigint < l.idx)
limit 1;
\set defect '12 12'
\ir fired.sql

-- 13a: A transition missing from the audit (a claim).
begin;
delete from chaos_audit where line = (select min(line) from chaos_audit where j->>'transition' = 'claimed');
\set defect '13a 13'
\ir fired.sql

-- 13b: A transition in the audit twice (a start).
begin;
insert into chaos_audit(j) select j from chaos_audit where j->>'transition' = 'started' limit 1;
\set defect '13b 13'
\ir fired.sql

-- 14: An audit line the classifier left unclassified.
begin;
insert into chaos_audit(j) select jsonb_set(j, '{transition}', '"other"') from chaos_audit limit 1;
\set defect '14 14'
\ir fired.sql
