-- a2_fail and a2_redrive: failed attempts, dead letters, and their way back.

-- a2_fail(session, consumer, lane, index, attempt, error, max_failures,
--         retry_after_ms, now_ms)
--
-- Records that attempt `attempt` of the head failed with error: the claim
-- is released and, unless this failure is the max_failures-th, the head is
-- held until now_ms + retry_after_ms (0: no hold); the max_failures-th
-- failure dead-letters it. A repeated fail of the same attempt reports what
-- the first one did. Results:
--   {"outcome": "failed" | "dead_lettered" | "superseded", "failure_count"}
-- Errors: NO_SUCH_EVENT (no event at index, and none cleared there),
-- INVALID_ARGUMENT.
--
-- Locks: the cursor row at that head, for update; no session lock.
create or replace function a2_fail(session text, consumer text, lane text, index bigint,
                                   attempt integer, error text default null,
                                   max_failures integer default 1,
                                   retry_after_ms bigint default 0, now_ms bigint default null)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2_fail.session;
    v_consumer text := a2_fail.consumer;
    v_key text;
    v_idx bigint := a2_fail.index;
    v_attempt integer := a2_fail.attempt;
    v_error text := coalesce(a2_fail.error, '');
    v_max integer := a2_fail.max_failures;
    v_now bigint := coalesce(a2_fail.now_ms, a2__now_ms());
    v_retry_at bigint;
    v_clear bigint;
    v_cur a2_cursors;
    v_count integer;
    v_failed_at bigint;
begin
    perform a2__writable('a2_fail');
    perform a2__name('session', v_session);
    perform a2__check_attempt(v_consumer, a2_fail.lane, v_idx, v_attempt);
    if v_max is null or v_max < 1 then
        perform a2__fail('INVALID_ARGUMENT', 'max failures must be at least 1');
    end if;
    if a2_fail.retry_after_ms < 0 then
        perform a2__fail('INVALID_ARGUMENT', 'retry-after must not be negative');
    end if;
    if octet_length(v_error) > 65536 then
        perform a2__fail('INVALID_ARGUMENT', 'error text is too long');
    end if;
    v_key := a2__cursor_key(a2_fail.lane, v_idx);
    v_retry_at := case when a2_fail.retry_after_ms > 0 then v_now + a2_fail.retry_after_ms end;
    v_clear := coalesce((select c.clear_index from a2_clears c where c.session_id = v_session), 0);
    if v_idx <= v_clear then
        return '{"outcome": "superseded", "failure_count": 0}';
    end if;
    select cur.* into v_cur from a2_cursors cur
     where cur.session_id = v_session and cur.cursor_key = v_key and cur.consumer = v_consumer
       and cur.head = v_idx
     order by cur.epoch limit 1
       for update of cur;
    if not found then
        if not exists (select 1 from a2_cursors cur
                        where cur.session_id = v_session and cur.cursor_key = v_key
                          and cur.consumer = v_consumer)
           and not exists (select 1 from a2_events e
                            where e.session_id = v_session and e.idx = v_idx) then
            perform a2__fail('NO_SUCH_EVENT', format('no event at index %s in session "%s"',
                                                     v_idx, v_session));
        end if;
        return '{"outcome": "superseded", "failure_count": 0}';
    end if;
    if v_cur.attempt_count = v_attempt and v_cur.failed_at is null
       and v_cur.claim_holder is not null then
        update a2_cursors cur
           set failure_count = cur.failure_count + 1, last_error = v_error,
               last_failed_at = v_now, last_failed_attempt = v_attempt,
               failed_at = case when cur.failure_count + 1 >= v_max then v_now
                                else cur.failed_at end,
               claim_holder = null,
               claim_expires_at = case when cur.failure_count + 1 >= v_max then null
                                       else v_retry_at end
         where cur.session_id = v_session and cur.cursor_key = v_key
           and cur.consumer = v_consumer and cur.epoch = v_cur.epoch
        returning cur.failure_count, cur.failed_at into v_count, v_failed_at;
        if v_failed_at is null then
            return jsonb_build_object('outcome', 'failed', 'failure_count', v_count);
        end if;
    elsif v_cur.attempt_count <> v_attempt then
        return '{"outcome": "superseded", "failure_count": 0}';
    elsif v_cur.claim_holder is null and v_cur.last_failed_attempt = v_attempt
          and v_cur.failed_at is null then
        return jsonb_build_object('outcome', 'failed', 'failure_count', v_cur.failure_count);
    elsif v_cur.failed_at is null then
        return '{"outcome": "superseded", "failure_count": 0}';
    else
        v_count := v_cur.failure_count;
    end if;
    perform a2__unpin(v_session, array[v_idx], array[v_consumer], array[v_key]);
    return jsonb_build_object('outcome', 'dead_lettered', 'failure_count', v_count);
end
$fn$;

-- The arguments naming a head of a session's consumer, for the writing
-- call fn: its isolation, both names, index at least 1.
create or replace function a2__check_head_ref(fn text, session text, consumer text, idx bigint)
returns void
language plpgsql
volatile
as $fn$
begin
    perform a2__writable(fn);
    perform a2__name('session', session);
    perform a2__name('consumer', consumer);
    if idx is null or idx < 1 then
        perform a2__fail('INVALID_ARGUMENT', 'index must be at least 1');
    end if;
end
$fn$;

-- A redrive's action: 'retry' or 'skip'.
create or replace function a2__check_action(action text)
returns void
language plpgsql
volatile
as $fn$
begin
    if action is null or action not in ('retry', 'skip') then
        perform a2__fail('INVALID_ARGUMENT', 'action must be retry or skip');
    end if;
end
$fn$;

-- Passes the head of cur, a run the caller holds for update, as a skip
-- does: under the session's advisory lock (taken here), unless the clear
-- marker passed it meanwhile; a log cursor of consumers (see a2__served)
-- takes its types. Returns the session's clear marker.
create or replace function a2__skip_head(cur a2_cursors, consumers jsonb)
returns bigint
language plpgsql
volatile
as $fn$
declare
    v_clear bigint;
    v_retype boolean := false;
    v_types jsonb;
begin
    perform pg_advisory_xact_lock(hashtext(cur.session_id));
    v_clear := coalesce((select c.clear_index from a2_clears c
                          where c.session_id = cur.session_id), 0);
    if cur.head > v_clear then
        select true, l.types into v_retype, v_types
          from a2__log_consumers(consumers) l
         where l.consumer = cur.consumer limit 1;
        perform a2__advance(cur, false, null, null, coalesce(v_retype, false), v_types);
    end if;
    return v_clear;
end
$fn$;

-- a2_redrive(session, consumer, index, action, consumers)
--
-- Retries (action 'retry': the head runs again, failures reset) or skips
-- ('skip': the cursor moves to its next head) consumer's dead letter at
-- index. consumers: the served consumers (null: every one), for
-- has_pending. Result: {"redriven": false when there is no such dead
-- letter, "has_pending"}.
--
-- Locks: the dead letter's cursor row, for update; a skip then takes the
-- session's advisory lock (it may leave a lane or log cursor idle), as a
-- completion does.
create or replace function a2_redrive(session text, consumer text, index bigint, action text,
                                      consumers jsonb default null)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2_redrive.session;
    v_consumer text := a2_redrive.consumer;
    v_idx bigint := a2_redrive.index;
    v_served text[];
    v_clear bigint;
    v_cur a2_cursors;
begin
    perform a2__check_head_ref('a2_redrive', v_session, v_consumer, v_idx);
    perform a2__check_action(a2_redrive.action);
    v_served := a2__served(a2_redrive.consumers);
    v_clear := coalesce((select c.clear_index from a2_clears c where c.session_id = v_session), 0);
    if v_idx > v_clear then
        select cur.* into v_cur from a2_cursors cur
         where cur.session_id = v_session and cur.consumer = v_consumer and cur.head = v_idx
           and cur.failed_at is not null
         order by cur.cursor_key limit 1
           for update of cur;
    end if;
    if v_cur.session_id is null then
        return jsonb_build_object('redriven', false,
                                  'has_pending', a2__has_pending(v_session, v_served, v_clear));
    end if;
    if a2_redrive.action = 'retry' then
        update a2_cursors cur set failed_at = null, failure_count = 0
         where cur.session_id = v_session and cur.cursor_key = v_cur.cursor_key
           and cur.consumer = v_consumer and cur.epoch = v_cur.epoch;
    else
        v_clear := a2__skip_head(v_cur, a2_redrive.consumers);
    end if;
    return jsonb_build_object('redriven', true,
                              'has_pending', a2__has_pending(v_session, v_served, v_clear));
end
$fn$;
