-- The chaos run's invariants, checked once everything has drained.
-- Inputs (loaded by tests/chaos/run):
--   chaos_produced(session_id, event_id, lane, conc, lf, cf)  the producer's acknowledged appends
--   chaos_inv(consumer, session_id, idx, attempt, outcome, pid, ms)  one row per handler invocation
--   chaos_audit(line, j)           the audit file, one JSON line per row
--   chaos_versions                 the test-only trigger's row versions (versions.sql)
--   chaos_facts(ord, invariant, checked, violations, evidence)  measured by the run
-- Output: chaos_result, one row per invariant; violations > 0 fails the run.
set client_min_messages = warning;
\set ON_ERROR_STOP 1

drop table if exists chaos_result;
create table chaos_result (ord int, invariant text, checked bigint, violations bigint, evidence text);

-- The audit as rows.
create temp view au as
select line, j->>'op' as op, j->>'transition' as tr, j->>'session' as session_id,
       j->>'consumer' as consumer, j->>'cursor' as cursor_key, (j->>'epoch')::bigint as epoch,
       (j->>'xid')::bigint as xid, j->'before' as b, j->'after' as a,
       extract(epoch from (j->>'at')::timestamptz) * 1000 as at_ms
from chaos_audit;

-- Completions: the head an attempt completed.
create temp table comp as
select line, session_id, consumer, cursor_key, epoch, (b->>'head')::bigint as idx,
       (b->>'attempt')::int as attempt, at_ms
from au where tr in ('completed', 'went_idle');

-- Claims that handed a head to a worker (an attempt number).
create temp table claims as
select line, session_id, consumer, cursor_key, (a->>'head')::bigint as idx,
       (a->>'attempt')::int as attempt
from au where tr in ('claimed', 'taken_over');

-- How an attempt ended without completing: the worker failed it, or its
-- lease lapsed and another claim took over (or dead-lettered it).
create temp table ended as
select session_id, consumer, cursor_key, (b->>'head')::bigint as idx,
       (b->>'attempt')::int as attempt, tr
from au
where (tr in ('failed', 'dead_lettered') and b->>'holder' is not null
       and (a->>'attempt')::int = (b->>'attempt')::int)
   or tr = 'taken_over'
   or (tr = 'dead_lettered' and (a->>'attempt')::int > (b->>'attempt')::int);

create temp table jobs as
select e.session_id, e.idx, e.event_id, e.payload->>'lane' as lane,
       coalesce((e.payload->>'conc')::boolean, false) as conc,
       coalesce((e.payload->>'lf')::int, 0) as lf, coalesce((e.payload->>'cf')::int, 0) as cf
from a2_events e where e.event_type = 'job';

create temp table targets as
select 'chaos_lane'::text as consumer, session_id, idx, 'lane:' || lane as cursor_key from jobs where lane is not null
union all
select 'chaos_conc', session_id, idx, '#' || idx from jobs where conc
union all
select 'chaos_log', session_id, idx, 'lane:log' from jobs;

-- The checks below look rows up one by one in these: indexed, they take
-- time in proportion to the run's evidence, not to its square.
create index on comp (consumer, session_id, idx);
create index on claims (consumer, session_id, idx, attempt);
create index on ended (consumer, session_id, idx, attempt);
create index on targets (consumer, session_id, idx);
create index if not exists chaos_inv_key on chaos_inv (consumer, session_id, idx, attempt);
analyze comp;
analyze claims;
analyze ended;
analyze targets;
analyze chaos_inv;

-- 1. Every acknowledged append is stored, as it was sent, and nothing the
-- producers did not see acknowledged is: an event missing, an event no
-- producer acknowledged, or an event whose lane, targets or planned
-- failures differ from what its producer sent.
insert into chaos_result
select 1, 'appends stored as acknowledged', (select count(*) from chaos_produced),
       count(*), string_agg(ev, '; ') filter (where rn <= 5)
from (select coalesce(p.session_id, j.session_id) || ' id ' || coalesce(p.event_id, j.event_id) ||
             case when j.event_id is null then ' acknowledged but not stored'
                  when p.event_id is null then ' stored but never acknowledged'
                  else ' stored as ' || coalesce(j.lane, 'null') || '/' || j.conc || '/' || j.lf || '/' || j.cf ||
                       ', sent as ' || coalesce(p.lane, 'null') || '/' || p.conc || '/' || p.lf || '/' || p.cf end as ev,
             row_number() over () as rn
      from chaos_produced p full join jobs j using (session_id, event_id)
      where p.event_id is null or j.event_id is null
         or p.lane is distinct from j.lane or p.conc <> j.conc or p.lf <> j.lf or p.cf <> j.cf) v;

-- 2. Indexes are dense per session (1..n, no gap) and follow each
-- producer's acknowledgments: a producer appends to a session one event at
-- a time, so its later event (p<k>-<n>, n rising) has the higher index.
insert into chaos_result
select 2, 'session indexes dense, in append order', (select count(*) from a2_events),
       count(*), string_agg(ev, '; ') filter (where rn <= 5)
from (select ev, row_number() over () as rn from (
        select session_id || ': ' || n || ' events, indexes ' || lo || '..' || hi as ev
        from (select session_id, count(*) n, min(idx) lo, max(idx) hi
              from a2_events group by session_id) s
        where lo <> 1 or hi <> n
        union all
        select session_id || ': ' || event_id || ' (#' || idx || ') acknowledged after ' ||
               prev_id || ' (#' || prev_idx || ')'
        from (select session_id, event_id, idx,
                     lag(event_id) over w as prev_id, lag(idx) over w as prev_idx
              from (select session_id, event_id, idx, split_part(event_id, '-', 1) as producer,
                           split_part(event_id, '-', 2)::bigint as n
                    from jobs where event_id ~ '^p[0-9]+-[0-9]+$') x
              window w as (partition by session_id, producer order by n)) y
        where prev_idx is not null and idx < prev_idx) z) v;

-- 3-5. Each targeted event completed exactly once, or dead-lettered with
-- its failures recorded.
create temp table outcome as
select t.consumer, t.session_id, t.idx, t.cursor_key,
       (select count(*) from comp c where c.consumer = t.consumer and c.session_id = t.session_id
          and c.cursor_key = t.cursor_key and c.idx = t.idx) as completions,
       (select count(*) from a2_cursors k where k.consumer = t.consumer and k.session_id = t.session_id
          and k.cursor_key = t.cursor_key and k.head = t.idx and k.failed_at is not null
          and k.failure_count > 0 and k.last_error is not null) as dead
from targets t;

insert into chaos_result
select 3 + o, 'completed once or dead-lettered: ' || consumer,
       count(*), count(*) filter (where bad),
       string_agg(ev, '; ') filter (where bad and rn <= 5)
from (select case consumer when 'chaos_lane' then 0 when 'chaos_conc' then 1 else 2 end as o,
             consumer, not ((completions = 1 and dead = 0) or (completions = 0 and dead = 1)) as bad,
             session_id || ' #' || idx || ': ' || completions || ' completions, dead ' || dead as ev,
             row_number() over (partition by consumer, not ((completions = 1 and dead = 0) or (completions = 0 and dead = 1))
                                order by session_id, idx) as rn
      from outcome) v
group by o, consumer;

-- 6. Dead letters: each reached the consumer's max failures, and every
-- failure a worker reported is a handler run that failed (the others are
-- takeovers of lapsed leases).
insert into chaos_result
select 6, 'dead letters: failures recorded', count(*) filter (where kind = 'dead'),
       count(*) filter (where bad),
       string_agg(ev, '; ') filter (where bad)
from (select 'dead' as kind, k.failure_count < case k.consumer when 'chaos_conc' then 3 else 10 end as bad,
             k.session_id || ' ' || k.consumer || ' #' || k.head || ': dead after ' || k.failure_count || ' failures' as ev
      from a2_cursors k where k.failed_at is not null
      union all
      select 'failure', true,
             a.session_id || ' ' || a.consumer || ' #' || (a.b->>'head') || ' attempt ' || (a.b->>'attempt') ||
             ' reported failed without a failed handler run'
      from au a
      where a.tr in ('failed', 'dead_lettered') and a.b->>'holder' is not null
        and (a.a->>'attempt')::int = (a.b->>'attempt')::int
        and not exists (select 1 from chaos_inv i where i.consumer = a.consumer and i.session_id = a.session_id
                          and i.idx = (a.b->>'head')::bigint and i.attempt = (a.b->>'attempt')::int
                          and i.outcome = 'fail')) v;

-- 7. Each completion appended exactly one returned event, with its cause.
insert into chaos_result
select 7, 'returned events = completions', (select count(*) from comp),
       count(*), string_agg(ev, '; ') filter (where rn <= 5)
from (select coalesce(c.session_id, d.session_id) || ' ' || coalesce(c.consumer, d.consumer) || ' #' ||
             coalesce(c.idx, d.idx) || ' attempt ' || coalesce(c.attempt, d.attempt) || ': ' ||
             coalesce(c.n, 0) || ' completions, ' || coalesce(d.n, 0) || ' returned' as ev,
             row_number() over () as rn
      from (select session_id, consumer, idx, attempt, count(*) n from comp group by 1, 2, 3, 4) c
      full join (select session_id, cause->>'consumer' as consumer, (cause->>'index')::bigint as idx,
                        (cause->>'attempt')::int as attempt, count(*) n
                 from a2_events where event_type = 'done' group by 1, 2, 3, 4) d
        using (session_id, consumer, idx, attempt)
      where c.n is distinct from d.n) v;

-- 8. Invocations: at least the completions; one per claimed attempt; every
-- completion ran; every extra invocation ended in a recorded failure or
-- takeover.
insert into chaos_result
select 8, 'invocations >= completions', (select count(*) from chaos_inv),
       case when (select count(*) from chaos_inv) >= (select count(*) from comp) then 0 else 1 end,
       (select count(*) from chaos_inv) || ' invocations, ' || (select count(*) from comp) || ' completions';

insert into chaos_result
select 9, 'one invocation per claimed attempt', (select count(*) from chaos_inv),
       count(*), string_agg(ev, '; ') filter (where rn <= 5)
from (select ev, row_number() over () as rn from (
        select consumer || ' ' || session_id || ' #' || idx || ' attempt ' || attempt || ' ran ' || count(*) || ' times' as ev
        from chaos_inv group by consumer, session_id, idx, attempt having count(*) > 1
        union all
        select i.consumer || ' ' || i.session_id || ' #' || i.idx || ' attempt ' || i.attempt || ' ran without a claim'
        from chaos_inv i
        where not exists (select 1 from claims c where c.consumer = i.consumer and c.session_id = i.session_id
                            and c.idx = i.idx and c.attempt = i.attempt)) x) v;

insert into chaos_result
select 10, 'every completion was invoked', (select count(*) from comp),
       count(*), string_agg(ev, '; ') filter (where rn <= 5)
from (select c.consumer || ' ' || c.session_id || ' #' || c.idx || ' attempt ' || c.attempt || ' completed, never run' as ev,
             row_number() over () as rn
      from comp c
      where not exists (select 1 from chaos_inv i where i.consumer = c.consumer and i.session_id = c.session_id
                          and i.idx = c.idx and i.attempt = c.attempt)) v;

insert into chaos_result
select 11, 'extra invocations = failure/takeover', count(*),
       count(*) filter (where not explained),
       string_agg(ev, '; ') filter (where not explained and rn <= 5)
from (select i.consumer || ' ' || i.session_id || ' #' || i.idx || ' attempt ' || i.attempt || ' (' || i.outcome ||
             '): no failure or takeover recorded' as ev,
             exists (select 1 from ended e where e.consumer = i.consumer and e.session_id = i.session_id
                       and e.idx = i.idx and e.attempt = i.attempt) as explained,
             row_number() over (order by i.session_id, i.idx) as rn
      from chaos_inv i
      where not exists (select 1 from comp c where c.consumer = i.consumer and c.session_id = i.session_id
                          and c.idx = i.idx and c.attempt = i.attempt)) v;

-- 12. Lanes: completions in index order, and a lane event ran only after
-- the previous one in its lane had completed.
insert into chaos_result
select 12, 'lanes ran in index order', (select count(*) from comp where cursor_key like 'lane:%'),
       count(*), string_agg(ev, '; ') filter (where rn <= 5)
from (select ev, row_number() over () as rn from (
        select session_id || ' ' || consumer || ' ' || cursor_key || ': #' || idx ||
               ' completed after #' || prev as ev
        from (select c.*, lag(idx) over (partition by session_id, consumer, cursor_key, epoch order by line) prev
              from comp c where cursor_key like 'lane:%') x
        where prev is not null and idx <= prev
        union all
        select i.session_id || ' ' || i.consumer || ' #' || i.idx || ' attempt ' || i.attempt ||
               ' started at ' || i.ms || ' before #' || p.idx || ' completed at ' || round(p.at_ms)
        from chaos_inv i
        join targets t on t.consumer = i.consumer and t.session_id = i.session_id and t.idx = i.idx
        join lateral (select c.idx, c.at_ms from comp c
                      where c.consumer = t.consumer and c.session_id = t.session_id
                        and c.cursor_key = t.cursor_key and c.idx < t.idx
                      order by c.idx desc limit 1) p on true
        where t.cursor_key like 'lane:%' and i.ms + 2 < p.at_ms) y) v;

-- 13. The audit equals the row-version history: the same versions of each
-- cursor run in the same order, each from the same transaction.
create temp table av as
select session_id, consumer, cursor_key, epoch, op, xid,
       concat_ws('|', coalesce(r->>'head', 'null'), r->>'position', r->>'attempt',
                 coalesce(r->>'holder', 'null'), coalesce(r->>'expires_at', 'null'),
                 r->>'failures', coalesce(r->>'failed_at', 'null'),
                 coalesce(md5(r->>'error'), 'null')) as sig,
       row_number() over (partition by session_id, consumer, cursor_key, epoch order by line) as n
from (select au.*, case when op = 'delete' then b else a end as r from au) x;
create temp table tv as
select session_id, consumer, cursor_key, epoch, op, xid, sig,
       row_number() over (partition by session_id, consumer, cursor_key, epoch order by seq) as n
from chaos_versions;

insert into chaos_result
select 13, 'audit = row-version history', (select count(*) from tv),
       count(*), string_agg(ev, '; ') filter (where rn <= 5)
from (select coalesce(t.session_id, a.session_id) || ' ' || coalesce(t.consumer, a.consumer) || ' ' ||
             coalesce(t.cursor_key, a.cursor_key) || ' version ' || coalesce(t.n, a.n) || ': ' ||
             case when a.n is null then 'missing from the audit (' || t.op || ' ' || t.sig || ' xid ' || t.xid || ')'
                  when t.n is null then 'in the audit only (' || a.op || ' ' || a.sig || ' xid ' || a.xid || ')'
                  else 'audit ' || a.op || ' ' || a.sig || ' xid ' || a.xid || ' vs table ' || t.op || ' ' || t.sig || ' xid ' || t.xid end as ev,
             row_number() over () as rn
      from tv t full join av a using (session_id, consumer, cursor_key, epoch, n)
      where t.n is null or a.n is null or t.sig <> a.sig or t.op <> a.op or t.xid <> a.xid) v;

insert into chaos_result
select 14, 'audit lines classified', (select count(*) from chaos_audit),
       count(*), string_agg(ev, '; ') filter (where rn <= 5)
from (select 'line ' || line || ': ' || session_id || ' ' || consumer || ' ' || cursor_key || ' ' || coalesce(tr, 'null') as ev,
             row_number() over () as rn
      from au where tr is null or tr in ('other', 'deleted')) v;

insert into chaos_result select * from chaos_facts;

\pset footer off
select invariant, checked, violations,
       case when violations = 0 then 'ok' else 'FAIL' end as result,
       coalesce(left(evidence, 400), '') as evidence
from chaos_result order by ord;
