-- The reads: a2_read, a2_cursors, a2_dead_letters, a2_pending_sessions.
-- Table functions; they take no lock and run under any isolation level.

-- a2_read(session, after, max_events, types): the session's events after
-- index `after` (0: from the start), at most max_events (null: all), of
-- the listed types (a JSON array; null: every type), from the clear marker
-- on, in index order.
create or replace function a2_read(session text, after bigint default 0,
                                   max_events bigint default null, types jsonb default null)
returns table (index bigint, type text, payload jsonb, id text, created_at bigint, cause jsonb)
language plpgsql
stable
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2_read.session;
    v_after bigint := coalesce(a2_read.after, 0);
    v_types text[];
begin
    perform a2__name('session', v_session);
    if v_after < 0 then
        perform a2__fail('INVALID_ARGUMENT', 'after must not be negative');
    end if;
    if a2_read.max_events < 0 then
        perform a2__fail('INVALID_ARGUMENT', 'max_events must not be negative');
    end if;
    if a2_read.types is not null and jsonb_typeof(a2_read.types) <> 'null' then
        if jsonb_typeof(a2_read.types) <> 'array'
           or exists (select 1 from jsonb_array_elements(a2_read.types) t
                       where jsonb_typeof(t) <> 'string') then
            perform a2__fail('INVALID_ARGUMENT', 'types must be a JSON array of names or null');
        end if;
        v_types := array(select a2__name('a type', t) from jsonb_array_elements_text(a2_read.types) t);
    end if;
    return query
        select e.idx, e.event_type, e.payload, e.event_id, e.created_at, e.cause
          from a2_events e
         where e.session_id = v_session
           and e.idx >= coalesce((select c.clear_index from a2_clears c
                                   where c.session_id = v_session), 0)
           and e.idx > v_after
           and (v_types is null or e.event_type = any(v_types))
         order by e.idx
         limit nullif(a2_read.max_events, 0);
end
$fn$;

-- a2_cursors(session): the session's cursor runs still current, by
-- consumer, then lane (concurrent cursors last, by head). A log cursor the
-- clear marker passed counts from the marker with nothing to run.
create or replace function a2_cursors(session text)
returns table (consumer text, lane text, cursor_key text, kind text, epoch bigint,
               "position" bigint, head bigint, types jsonb, attempt integer,
               first_claimed_at bigint, last_claimed_at bigint, holder text,
               expires_at bigint, failure_count integer, last_failed_at bigint,
               last_failed_attempt integer, last_error text, failed_at bigint)
language plpgsql
stable
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__name('session', a2_cursors.session);
    v_clear bigint := coalesce((select c.clear_index from a2_clears c
                                 where c.session_id = a2_cursors.session), 0);
begin
    return query
        select r.*
          from a2_cursors cur
         cross join lateral jsonb_to_record(a2__cursor_json(cur, v_clear))
               as r(consumer text, lane text, cursor_key text, kind text, epoch bigint,
                    "position" bigint, head bigint, types jsonb, attempt integer,
                    first_claimed_at bigint, last_claimed_at bigint, holder text,
                    expires_at bigint, failure_count integer, last_failed_at bigint,
                    last_failed_attempt integer, last_error text, failed_at bigint)
         where cur.session_id = v_session
           and (cur.head > v_clear
                or (cur.kind <> 'event'
                    and not exists (select 1 from a2_cursors later
                                     where later.session_id = cur.session_id
                                       and later.cursor_key = cur.cursor_key
                                       and later.consumer = cur.consumer
                                       and later.epoch > cur.epoch)
                    and (cur.kind = 'log' or (cur.head is null and cur.position > v_clear))))
         order by cur.consumer collate "C", cur.lane is null, cur.lane collate "C", cur.head;
end
$fn$;

-- a2_dead_letters(session): the session's dead-lettered heads above the
-- clear marker, by index, then consumer: each head's dispatch state, its
-- event and the clear marker.
create or replace function a2_dead_letters(session text)
returns table (session_id text, consumer text, lane text, cursor_key text, kind text,
               epoch bigint, index bigint, attempt integer, first_claimed_at bigint,
               last_claimed_at bigint, holder text, expires_at bigint, failure_count integer,
               last_failed_at bigint, last_failed_attempt integer, last_error text,
               failed_at bigint, type text, payload jsonb, id text, created_at bigint,
               cause jsonb, clear_index bigint)
language plpgsql
stable
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__name('session', a2_dead_letters.session);
    v_clear bigint := coalesce((select c.clear_index from a2_clears c
                                 where c.session_id = a2_dead_letters.session), 0);
begin
    return query
        select cur.session_id, cur.consumer, cur.lane, cur.cursor_key, cur.kind, cur.epoch,
               cur.head, cur.attempt_count, cur.first_claimed_at, cur.last_claimed_at,
               cur.claim_holder, cur.claim_expires_at, cur.failure_count, cur.last_failed_at,
               cur.last_failed_attempt, cur.last_error, cur.failed_at, e.event_type,
               e.payload, e.event_id, e.created_at, e.cause, v_clear
          from a2_cursors cur
          join a2_events e on e.session_id = cur.session_id and e.idx = cur.head
         where cur.session_id = v_session and cur.failed_at is not null and cur.head > v_clear
         order by cur.head, cur.consumer collate "C";
end
$fn$;

-- a2_pending_sessions(consumers, after, max_sessions, now_ms): the sessions
-- (ordered by id, after `after`; null: from the first; at most max_sessions,
-- 1..10000) where one of consumers (a JSON array of names) has a head that
-- is claimable now or held by a claim, live or lapsed (not dead-lettered,
-- above the clear marker). For each consumer an ordered walk of its
-- a2_cursors_pending range that stops after max_sessions sessions; no
-- a2_events scan.
create or replace function a2_pending_sessions(consumers jsonb, after text default null,
                                               max_sessions integer default 100,
                                               now_ms bigint default null)
returns table (session text)
language plpgsql
stable
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_consumers text[] := a2__served(a2_pending_sessions.consumers);
    v_after text := a2__opt_name('after', a2_pending_sessions.after);
    v_limit integer := a2_pending_sessions.max_sessions;
    v_now bigint := coalesce(a2_pending_sessions.now_ms, a2__now_ms());
begin
    if cardinality(v_consumers) is not distinct from 0 or v_consumers is null then
        perform a2__fail('INVALID_ARGUMENT', 'pending sessions needs at least one consumer');
    end if;
    if v_limit is null or v_limit < 1 or v_limit > 10000 then
        perform a2__fail('INVALID_ARGUMENT', 'max_sessions must be between 1 and 10000');
    end if;
    -- Two statements, so that a generic plan bounds the walk by "after".
    if v_after is null then
        return query
            select s.session_id
              from (select distinct per.session_id
                      from (select distinct w.consumer from unnest(v_consumers) as w(consumer)) wanted
                     cross join lateral (
                           select distinct cur.session_id
                             from a2_cursors cur
                            where cur.consumer = wanted.consumer and cur.head is not null
                              and cur.failed_at is null and cur.consumer <> ''
                              and cur.head > coalesce((select clr.clear_index from a2_clears clr
                                                        where clr.session_id = cur.session_id), 0)
                              and (cur.claim_holder is not null or cur.claim_expires_at is null
                                   or cur.claim_expires_at <= v_now)
                            order by cur.session_id
                            limit v_limit) per) s
             order by s.session_id
             limit v_limit;
    else
        return query
            select s.session_id
              from (select distinct per.session_id
                      from (select distinct w.consumer from unnest(v_consumers) as w(consumer)) wanted
                     cross join lateral (
                           select distinct cur.session_id
                             from a2_cursors cur
                            where cur.consumer = wanted.consumer and cur.head is not null
                              and cur.failed_at is null and cur.consumer <> '' and cur.session_id > v_after
                              and cur.head > coalesce((select clr.clear_index from a2_clears clr
                                                        where clr.session_id = cur.session_id), 0)
                              and (cur.claim_holder is not null or cur.claim_expires_at is null
                                   or cur.claim_expires_at <= v_now)
                            order by cur.session_id
                            limit v_limit) per) s
             order by s.session_id
             limit v_limit;
    end if;
end
$fn$;
