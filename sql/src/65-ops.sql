-- Operators' views and actions across sessions: dead letters by filter,
-- their bulk redrive, cancel of a pending head, each consumer's backlog.
--
-- A dead letter filter: consumer_name (exact), event_type (exact),
-- error_text (a substring of the last error, ignoring case), failed_after
-- (failed_at >= it) and failed_before (failed_at < it), each null for any.
-- Heads at or below their session's clear marker are never matched.

-- The filter's arguments checked.
create or replace function a2__check_filter(consumer text, type text, error text)
returns void
language plpgsql
immutable
as $fn$
begin
    perform a2__opt_name('consumer', consumer);
    if type is not null and (type = '' or octet_length(type) > 1024) then
        perform a2__fail('INVALID_ARGUMENT', 'type must be a name of 1 to 1024 bytes');
    end if;
    if error is not null and octet_length(error) > 1024 then
        perform a2__fail('INVALID_ARGUMENT', 'error filter is longer than 1024 bytes');
    end if;
end
$fn$;

-- a2_find_dead_letters(consumer_name, event_type, error_text, failed_after,
--                      failed_before, after, max_rows)
--
-- Dead letters of every session matching the filter, newest failure first,
-- in the order of the key (failed_at, session_id, consumer, cursor_key,
-- epoch) descending: each head's dispatch state and event, as
-- a2_dead_letters gives them. after: the last row's key
-- {"failed_at", "session", "consumer", "cursor_key", "epoch"} (null: from
-- the newest); max_rows 1..1000. Served by a2_cursors_dead, or
-- a2_cursors_dead_consumer when a consumer is named; the type and error
-- filters are checked on the rows that index walk reaches.
create or replace function a2_find_dead_letters(consumer_name text default null,
                                                event_type text default null,
                                                error_text text default null,
                                                failed_after bigint default null,
                                                failed_before bigint default null,
                                                after jsonb default null,
                                                max_rows integer default 100)
returns table (session_id text, consumer text, lane text, cursor_key text, kind text,
               epoch bigint, index bigint, attempt integer, first_claimed_at bigint,
               last_claimed_at bigint, holder text, expires_at bigint, failure_count integer,
               last_failed_at bigint, last_failed_attempt integer, last_error text,
               failed_at bigint, type text, payload jsonb, id text, created_at bigint,
               cause jsonb, clear_index bigint)
language plpgsql
stable
set plan_cache_mode = force_custom_plan
set jit = off
as $fn$
#variable_conflict use_column
declare
    v_consumer text := a2_find_dead_letters.consumer_name;
    v_type text := a2_find_dead_letters.event_type;
    v_error text := lower(a2_find_dead_letters.error_text);
    v_from bigint := a2_find_dead_letters.failed_after;
    v_to bigint := a2_find_dead_letters.failed_before;
    v_limit integer := a2_find_dead_letters.max_rows;
    v_after jsonb := nullif(a2_find_dead_letters.after, 'null'::jsonb);
    a_failed bigint;
    a_session text;
    a_consumer text;
    a_key text;
    a_epoch bigint;
begin
    perform a2__check_filter(v_consumer, v_type, a2_find_dead_letters.error_text);
    if v_limit is null or v_limit < 1 or v_limit > 1000 then
        perform a2__fail('INVALID_ARGUMENT', 'max_rows must be between 1 and 1000');
    end if;
    if v_after is not null then
        if jsonb_typeof(v_after) <> 'object'
           or jsonb_typeof(v_after->'failed_at') is distinct from 'number'
           or jsonb_typeof(v_after->'session') is distinct from 'string'
           or jsonb_typeof(v_after->'consumer') is distinct from 'string'
           or jsonb_typeof(v_after->'cursor_key') is distinct from 'string'
           or jsonb_typeof(v_after->'epoch') is distinct from 'number' then
            perform a2__fail('INVALID_ARGUMENT',
                             'after must be {"failed_at", "session", "consumer", '
                             '"cursor_key", "epoch"} of the last row');
        end if;
        a_failed := a2__json_int('after.failed_at', v_after->'failed_at');
        a_session := v_after->>'session';
        a_consumer := v_after->>'consumer';
        a_key := v_after->>'cursor_key';
        a_epoch := a2__json_int('after.epoch', v_after->'epoch');
    end if;
    -- Planned per call (force_custom_plan): the null filters fold away and
    -- the key comparison matches the index the consumer filter picks. The
    -- head's event is a lateral subquery behind offset 0, so it is looked
    -- up by a2_events_pkey row by row: a join the planner may reorder
    -- turns into a hash join over all of a2_events when it expects many
    -- dead letters.
    if v_consumer is null then
        return query
            select cur.session_id, cur.consumer, cur.lane, cur.cursor_key, cur.kind, cur.epoch,
                   cur.head, cur.attempt_count, cur.first_claimed_at, cur.last_claimed_at,
                   cur.claim_holder, cur.claim_expires_at, cur.failure_count,
                   cur.last_failed_at, cur.last_failed_attempt, cur.last_error, cur.failed_at,
                   e.event_type, e.payload, e.event_id, e.created_at, e.cause,
                   coalesce(clr.clear_index, 0)
              from a2_cursors cur
              cross join lateral (select e.event_type, e.payload, e.event_id, e.created_at, e.cause
                                    from a2_events e
                                   where e.session_id = cur.session_id and e.idx = cur.head
                                  offset 0) e
              left join a2_clears clr on clr.session_id = cur.session_id
             where cur.failed_at is not null
               and (a_session is null
                    or (cur.failed_at, cur.session_id, cur.consumer, cur.cursor_key, cur.epoch)
                       < (a_failed, a_session, a_consumer, a_key, a_epoch))
               and (v_from is null or cur.failed_at >= v_from)
               and (v_to is null or cur.failed_at < v_to)
               and (v_type is null or e.event_type = v_type)
               and (v_error is null or strpos(lower(cur.last_error), v_error) > 0)
               and cur.head > coalesce(clr.clear_index, 0)
             order by cur.failed_at desc, cur.session_id desc, cur.consumer desc,
                      cur.cursor_key desc, cur.epoch desc
             limit v_limit;
    else
        return query
            select cur.session_id, cur.consumer, cur.lane, cur.cursor_key, cur.kind, cur.epoch,
                   cur.head, cur.attempt_count, cur.first_claimed_at, cur.last_claimed_at,
                   cur.claim_holder, cur.claim_expires_at, cur.failure_count,
                   cur.last_failed_at, cur.last_failed_attempt, cur.last_error, cur.failed_at,
                   e.event_type, e.payload, e.event_id, e.created_at, e.cause,
                   coalesce(clr.clear_index, 0)
              from a2_cursors cur
              cross join lateral (select e.event_type, e.payload, e.event_id, e.created_at, e.cause
                                    from a2_events e
                                   where e.session_id = cur.session_id and e.idx = cur.head
                                  offset 0) e
              left join a2_clears clr on clr.session_id = cur.session_id
             where cur.consumer = v_consumer and cur.failed_at is not null
               and (a_session is null
                    or (cur.failed_at, cur.session_id, cur.cursor_key, cur.epoch)
                       < (a_failed, a_session, a_key, a_epoch))
               and (v_from is null or cur.failed_at >= v_from)
               and (v_to is null or cur.failed_at < v_to)
               and (v_type is null or e.event_type = v_type)
               and (v_error is null or strpos(lower(cur.last_error), v_error) > 0)
               and cur.head > coalesce(clr.clear_index, 0)
             order by cur.failed_at desc, cur.session_id desc, cur.cursor_key desc,
                      cur.epoch desc
             limit v_limit;
    end if;
end
$fn$;

-- a2_count_dead_letters(consumer_name, event_type, error_text,
--                       failed_after, failed_before)
--
-- How many dead letters match the filter (what a bulk redrive of it would
-- take, call after call). Served by the same indexes as
-- a2_find_dead_letters.
create or replace function a2_count_dead_letters(consumer_name text default null,
                                                 event_type text default null,
                                                 error_text text default null,
                                                 failed_after bigint default null,
                                                 failed_before bigint default null)
returns bigint
language plpgsql
stable
set plan_cache_mode = force_custom_plan
set jit = off
as $fn$
#variable_conflict use_column
declare
    v_consumer text := a2_count_dead_letters.consumer_name;
    v_type text := a2_count_dead_letters.event_type;
    v_error text := lower(a2_count_dead_letters.error_text);
    v_from bigint := a2_count_dead_letters.failed_after;
    v_to bigint := a2_count_dead_letters.failed_before;
begin
    perform a2__check_filter(v_consumer, v_type, a2_count_dead_letters.error_text);
    return (select count(*)
              from a2_cursors cur
              left join a2_clears clr on clr.session_id = cur.session_id
             where cur.failed_at is not null
               and (v_consumer is null or cur.consumer = v_consumer)
               and (v_from is null or cur.failed_at >= v_from)
               and (v_to is null or cur.failed_at < v_to)
               and (v_type is null
                    or (select e.event_type from a2_events e
                         where e.session_id = cur.session_id and e.idx = cur.head) = v_type)
               and (v_error is null or strpos(lower(cur.last_error), v_error) > 0)
               and cur.head > coalesce(clr.clear_index, 0));
end
$fn$;

-- a2_redrive_matching(action, consumer_name, event_type, error_text, failed_after,
--                     failed_before, max_rows)
--
-- Retries ('retry') or skips ('skip') up to max_rows (1..10000) dead
-- letters matching the filter, oldest failure first, each as a2_redrive
-- does (a skip does not retype a log cursor). Result: {"count": redriven
-- by this call, "more": the filter matched more than max_rows}.
--
-- Locks: the dead letters' cursor rows, for update, in key order; a skip
-- then takes each session's advisory lock in turn (no other writer waits
-- on a dead letter's row while it holds a session lock).
create or replace function a2_redrive_matching(action text,
                                               consumer_name text default null,
                                               event_type text default null,
                                               error_text text default null,
                                               failed_after bigint default null,
                                               failed_before bigint default null,
                                               max_rows integer default 1000)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_custom_plan
set jit = off
as $fn$
#variable_conflict use_column
declare
    v_consumer text := a2_redrive_matching.consumer_name;
    v_type text := a2_redrive_matching.event_type;
    v_error text := lower(a2_redrive_matching.error_text);
    v_from bigint := a2_redrive_matching.failed_after;
    v_to bigint := a2_redrive_matching.failed_before;
    v_limit integer := a2_redrive_matching.max_rows;
    v_count bigint := 0;
    v_cur a2_cursors;
    v_session text;
    v_clear bigint;
    v_tids tid[];
    v_more boolean;
begin
    perform a2__writable('a2_redrive_matching');
    perform a2__check_action(a2_redrive_matching.action);
    perform a2__check_filter(v_consumer, v_type, a2_redrive_matching.error_text);
    if v_limit is null or v_limit < 1 or v_limit > 10000 then
        perform a2__fail('INVALID_ARGUMENT', 'max_rows must be between 1 and 10000');
    end if;
    -- The rows are locked, so their ctids stay theirs until this
    -- transaction writes them: the writes below find them by ctid (a Tid
    -- Scan whatever the planner expects of the list).
    select coalesce(array_agg(m.tid order by m.ord), '{}')
      into v_tids
      from (select cur.ctid as tid,
                   row_number() over (order by cur.failed_at, cur.session_id, cur.consumer,
                                               cur.cursor_key, cur.epoch) as ord
              from (select cur.ctid, cur.session_id, cur.cursor_key, cur.consumer, cur.epoch,
                           cur.failed_at
                      from a2_cursors cur
                      cross join lateral (select e.event_type from a2_events e
                                           where e.session_id = cur.session_id
                                             and e.idx = cur.head
                                          offset 0) e
                      left join a2_clears clr on clr.session_id = cur.session_id
                     where cur.failed_at is not null
                       and (v_consumer is null or cur.consumer = v_consumer)
                       and (v_from is null or cur.failed_at >= v_from)
                       and (v_to is null or cur.failed_at < v_to)
                       and (v_type is null or e.event_type = v_type)
                       and (v_error is null or strpos(lower(cur.last_error), v_error) > 0)
                       and cur.head > coalesce(clr.clear_index, 0)
                     order by cur.failed_at, cur.session_id, cur.consumer, cur.cursor_key,
                              cur.epoch
                     limit v_limit + 1
                       for update of cur) cur) m;
    -- One row past the limit says whether more match; it is not redriven.
    v_more := cardinality(v_tids) > v_limit;
    if v_more then
        v_tids := v_tids[1:v_limit];
    end if;
    if a2_redrive_matching.action = 'retry' then
        update a2_cursors cur set failed_at = null, failure_count = 0
         where cur.ctid = any(v_tids) and cur.failed_at is not null;
        get diagnostics v_count = row_count;
    else
        for v_cur in
            select cur.*
              from unnest(v_tids) with ordinality as m(tid, ord)
              join a2_cursors cur on cur.ctid = m.tid
             where cur.failed_at is not null
             order by m.ord
        loop
            if v_session is distinct from v_cur.session_id then
                v_session := v_cur.session_id;
                perform pg_advisory_xact_lock(hashtext(v_session));
                v_clear := coalesce((select c.clear_index from a2_clears c
                                      where c.session_id = v_session), 0);
            end if;
            if v_cur.head > v_clear then
                perform a2__advance(v_cur, false, null, null, false, null);
                v_count := v_count + 1;
            end if;
        end loop;
    end if;
    return jsonb_build_object('count', v_count, 'more', v_more);
end
$fn$;

-- a2_cancel(session, consumer, index, reason, consumers, now_ms)
--
-- Cancels consumer's pending head at index: waiting, delayed, held for a
-- retry, or under a lapsed claim. Two writes in one transaction: the run
-- is marked (failed_at = now_ms, last_error "cancelled" or "cancelled:
-- <reason>", its claim released; audited as "cancelled"), then the cursor
-- passes the head as a skip does ("skipped"). A head a live claim holds is
-- refused. consumers: the served consumers (null: every one), for
-- has_pending and a log consumer's types. Results:
--   {"outcome": "cancelled" | "running" | "not_pending", "has_pending",
--    "holder" and "expires_at" when running}
--
-- Locks: the head's cursor row, for update, then the session's advisory
-- lock, as a redrive skip does.
create or replace function a2_cancel(session text, consumer text, index bigint,
                                     reason text default null,
                                     consumers jsonb default null,
                                     now_ms bigint default null)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
set jit = off
as $fn$
#variable_conflict use_column
declare
    v_session text := a2_cancel.session;
    v_consumer text := a2_cancel.consumer;
    v_idx bigint := a2_cancel.index;
    v_now bigint := coalesce(a2_cancel.now_ms, a2__now_ms());
    v_served text[];
    v_clear bigint;
    v_cur a2_cursors;
begin
    perform a2__check_head_ref('a2_cancel', v_session, v_consumer, v_idx);
    if octet_length(a2_cancel.reason) > 65536 then
        perform a2__fail('INVALID_ARGUMENT', 'reason is too long');
    end if;
    v_served := a2__served(a2_cancel.consumers);
    v_clear := coalesce((select c.clear_index from a2_clears c where c.session_id = v_session), 0);
    if v_idx > v_clear then
        select cur.* into v_cur from a2_cursors cur
         where cur.session_id = v_session and cur.consumer = v_consumer and cur.head = v_idx
           and cur.failed_at is null
         order by cur.cursor_key limit 1
           for update of cur;
    end if;
    if v_cur.session_id is null then
        return jsonb_build_object('outcome', 'not_pending',
                                  'has_pending', a2__has_pending(v_session, v_served, v_clear));
    end if;
    if v_cur.claim_holder is not null and v_cur.claim_expires_at > v_now then
        return jsonb_build_object('outcome', 'running', 'holder', v_cur.claim_holder,
                                  'expires_at', v_cur.claim_expires_at,
                                  'has_pending', true);
    end if;
    update a2_cursors cur
       set failed_at = v_now,
           last_error = 'cancelled' || coalesce(': ' || nullif(a2_cancel.reason, ''), ''),
           claim_holder = null, claim_expires_at = null
     where cur.session_id = v_session and cur.cursor_key = v_cur.cursor_key
       and cur.consumer = v_consumer and cur.epoch = v_cur.epoch
    returning cur.* into v_cur;
    v_clear := a2__skip_head(v_cur, a2_cancel.consumers);
    return jsonb_build_object('outcome', 'cancelled',
                              'has_pending', a2__has_pending(v_session, v_served, v_clear));
end
$fn$;

-- a2_backlog(consumers): for each consumer (a JSON array of names; null:
-- every consumer with a head or a dead letter), its heads that are not
-- dead-lettered (pending, running ones included), those held by a claim,
-- live or lapsed (running), its dead letters, and the created_at of the
-- oldest pending head's event (null: none). Heads at or below a clear
-- marker are not counted. The names come from skip scans of
-- a2_cursors_pending and a2_cursors_dead_consumer; each count walks that
-- consumer's range of the same indexes.
create or replace function a2_backlog(consumers jsonb default null)
returns table (consumer text, pending bigint, running bigint, dead_letters bigint,
               oldest_pending_at bigint)
language plpgsql
stable
set plan_cache_mode = force_generic_plan
set jit = off
as $fn$
#variable_conflict use_column
declare
    v_names text[] := a2__served(a2_backlog.consumers);
begin
    if v_names is null then
        with recursive p(name) as (
            select min(cur.consumer) from a2_cursors cur
             where cur.head is not null and cur.failed_at is null and cur.consumer <> ''
            union all
            select (select min(cur.consumer) from a2_cursors cur
                     where cur.head is not null and cur.failed_at is null
                       and cur.consumer > p.name and cur.consumer <> '')
              from p where p.name is not null
        ), d(name) as (
            select min(cur.consumer) from a2_cursors cur where cur.failed_at is not null
            union all
            select (select min(cur.consumer) from a2_cursors cur
                     where cur.failed_at is not null and cur.consumer > d.name)
              from d where d.name is not null
        )
        select array_agg(distinct n.name) into v_names
          from (select p.name from p union select d.name from d) n
         where n.name is not null;
    end if;
    return query
        select w.name,
               coalesce(pend.n, 0), coalesce(pend.running, 0), coalesce(dead.n, 0),
               pend.oldest
          from (select distinct u.name from unnest(v_names) as u(name)) w
          left join lateral (
                select count(*) as n,
                       count(*) filter (where cur.claim_holder is not null) as running,
                       min((select e.created_at from a2_events e
                             where e.session_id = cur.session_id and e.idx = cur.head)) as oldest
                  from a2_cursors cur
                 where cur.consumer = w.name and cur.head is not null
                   and cur.failed_at is null and cur.consumer <> ''
                   and cur.head > coalesce((select clr.clear_index from a2_clears clr
                                             where clr.session_id = cur.session_id), 0)) pend
            on true
          left join lateral (
                select count(*) as n
                  from a2_cursors cur
                 where cur.consumer = w.name and cur.failed_at is not null
                   and cur.head > coalesce((select clr.clear_index from a2_clears clr
                                             where clr.session_id = cur.session_id), 0)) dead
            on true
         order by w.name;
end
$fn$;
