-- a2_clear and a2_reclaim: a session's clear marker, and the space below it.

-- a2_clear(session, if_last, cause, marker_id, now_ms)
--
-- Clears the session: appends a marker event of type a2.cleared; events
-- below it are gone for reads, cursors at or below it are superseded.
-- if_last: null, or the head index the caller saw (when the head moved
-- since, nothing is written: cleared false; a retry of the same clear
-- reports cleared without a second marker). cause ({"consumer", "lane",
-- "index", "attempt"}; null: none) is a clearing consumer's attempt: fenced
-- like an append's cause, and its head released. marker_id: the marker's
-- event id (null: 32 random hex digits). Result:
--   {"cleared", "index": the marker's (or the head when none is written),
--    "clear_index": the session's marker after the call}
-- Errors: SUPERSEDED_ATTEMPT (the cause no longer holds its head),
-- INVALID_ARGUMENT.
--
-- Locks: the cause's cursor row for update (before and again under the
-- session lock, as an append's fence), then the session's advisory lock.
create or replace function a2_clear(session text, if_last bigint default null,
                                    cause jsonb default null, marker_id text default null,
                                    now_ms bigint default null)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2_clear.session;
    v_if_last bigint := a2_clear.if_last;
    v_now bigint := coalesce(a2_clear.now_ms, a2__now_ms());
    v_marker_id text := coalesce(a2__opt_name('marker_id', a2_clear.marker_id),
                                 replace(gen_random_uuid()::text, '-', ''));
    v_cause jsonb := nullif(a2_clear.cause, 'null');
    v_head bigint;
    v_clear bigint;
begin
    perform a2__writable('a2_clear');
    perform a2__name('session', v_session);
    if v_if_last < 0 then
        perform a2__fail('INVALID_ARGUMENT', 'if-last index must not be negative');
    end if;
    if v_cause is not null then
        perform a2__check_cause('a clear''s cause', v_cause);
        perform a2__clear_fence(v_session, v_cause);
    end if;

    perform pg_advisory_xact_lock(hashtext(v_session));

    if v_cause is not null then
        perform a2__clear_fence(v_session, v_cause);
    end if;
    select coalesce(max(e.idx), 0),
           coalesce((select c.clear_index from a2_clears c where c.session_id = v_session), 0)
      into v_head, v_clear
      from a2_events e where e.session_id = v_session;
    if v_if_last is not null and v_clear = v_if_last + 1 then
        return jsonb_build_object('cleared', true, 'index', v_head, 'clear_index', v_clear);
    end if;
    if v_if_last is not null and v_head <> v_if_last then
        return jsonb_build_object('cleared', false, 'index', v_head, 'clear_index', v_clear);
    end if;
    if v_head = v_clear then
        return jsonb_build_object('cleared', true, 'index', v_head, 'clear_index', v_clear);
    end if;
    insert into a2_events (session_id, idx, event_type, payload, event_id, created_at, cause)
    values (v_session, v_head + 1, 'a2.cleared', 'null', v_marker_id, v_now, null);
    if v_cause is not null then
        update a2_cursors cur
           set head = null, attempt_count = 0, first_claimed_at = null, last_claimed_at = null,
               claim_holder = null, claim_expires_at = null, failure_count = 0,
               last_failed_at = null, last_failed_attempt = null, last_error = null,
               failed_at = null
         where cur.session_id = v_session
           and cur.cursor_key = a2__cursor_key(v_cause->>'lane', (v_cause->>'index')::bigint)
           and cur.consumer = v_cause->>'consumer'
           and cur.head = (v_cause->>'index')::bigint;
    end if;
    insert into a2_clears (session_id, clear_index) values (v_session, v_head + 1)
    on conflict (session_id) do update set clear_index = excluded.clear_index;
    return jsonb_build_object('cleared', true, 'index', v_head + 1, 'clear_index', v_head + 1);
end
$fn$;

-- A clearing consumer's fence: its cursor, locked for update while the
-- cause's head and attempt still match (above the clear marker).
create or replace function a2__clear_fence(session text, cause jsonb)
returns void
language plpgsql
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__clear_fence.session;
    v_idx bigint := (a2__clear_fence.cause->>'index')::bigint;
    v_attempt integer := (a2__clear_fence.cause->>'attempt')::integer;
    v_consumer text := a2__clear_fence.cause->>'consumer';
begin
    perform 1 from a2_cursors cur
     where cur.session_id = v_session
       and cur.cursor_key = a2__cursor_key(a2__clear_fence.cause->>'lane', v_idx)
       and cur.consumer = v_consumer and cur.head = v_idx and cur.attempt_count = v_attempt
       and cur.failed_at is null
       and v_idx > coalesce((select c.clear_index from a2_clears c
                              where c.session_id = v_session), 0)
       for update of cur;
    if not found then
        perform a2__fail('SUPERSEDED_ATTEMPT',
                         format('attempt %s of %s at index %s in session "%s" is superseded',
                                v_attempt, v_consumer, v_idx, v_session));
    end if;
end
$fn$;

-- Whether a2_reclaim deletes cursor run cur, given the session's clear
-- marker clr: an event or lane cursor's run of an epoch below the marker,
-- or a run with no head above the marker that a later epoch of its cursor
-- superseded.
create or replace function a2__retired_run(cur a2_cursors, clr bigint)
returns boolean
language sql
stable
as $fn$
select (cur.epoch < clr and cur.kind <> 'log')
       or ((cur.head is null or cur.head <= clr)
           and exists (select 1 from a2_cursors later
                        where later.session_id = cur.session_id
                          and later.cursor_key = cur.cursor_key
                          and later.consumer = cur.consumer
                          and later.epoch > cur.epoch))
$fn$;

-- a2_reclaim(session)
--
-- Deletes one batch (256 events) of what lies below the session's clear
-- marker: events, their lane entries and event cursors, then, once no
-- event is left there, superseded cursor runs, lane entries, snapshots and
-- pins. Rows another operation holds are skipped, never waited for. Call
-- it until done. Result: {"deleted": events deleted by this call, "done"}.
create or replace function a2_reclaim(session text)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2_reclaim.session;
    v_clear bigint;
    v_deleted bigint;
    v_max bigint;
    v_skipped bigint;
begin
    perform a2__writable('a2_reclaim');
    perform a2__name('session', v_session);
    v_clear := coalesce((select c.clear_index from a2_clears c where c.session_id = v_session), 0);
    if v_clear = 0 then
        return '{"deleted": 0, "done": true}';
    end if;
    perform a2__announce_clear(v_session);
    with batch as materialized (
        select event.idx from a2_events event
         where event.session_id = v_session and event.idx < v_clear
         order by event.idx limit 256
           for update of event skip locked),
    deleted as (
        delete from a2_events event using batch
         where event.session_id = v_session and event.idx = batch.idx
        returning event.idx),
    pins as (
        delete from a2_snapshot_pins pin using deleted
         where pin.session_id = v_session and pin.event_index = deleted.idx),
    lanes as materialized (
        select lane.ctid from a2_cursors cur
          join a2_lane_events lane on lane.session_id = cur.session_id
                                  and lane.consumer = cur.consumer and lane.lane = cur.lane
         where cur.session_id = v_session and cur.kind = 'lane'
           and lane.idx <= (select max(batch.idx) from batch)
           for update of lane skip locked),
    gone_lanes as (delete from a2_lane_events target using lanes where target.ctid = lanes.ctid),
    singles as materialized (
        select cur.ctid from a2_cursors cur
          join batch on cur.cursor_key = '#' || batch.idx
         where cur.session_id = v_session and cur.kind = 'event'
           for update of cur skip locked),
    gone_singles as (delete from a2_cursors target using singles where target.ctid = singles.ctid)
    select count(*) into v_deleted from deleted;
    if exists (select 1 from a2_events e where e.session_id = v_session and e.idx < v_clear) then
        return jsonb_build_object('deleted', v_deleted, 'done', false);
    end if;
    with lanes as materialized (
        select lane.ctid from a2_lane_events lane
         where lane.session_id = v_session and lane.idx < v_clear
           for update of lane skip locked),
    cursors as materialized (
        select cur.ctid from a2_cursors cur
         where cur.session_id = v_session and a2__retired_run(cur, v_clear)
           for update of cur skip locked),
    pins as materialized (
        select pin.ctid from a2_snapshot_pins pin
         where pin.session_id = v_session and pin.up_to_index < v_clear
           for update of pin skip locked),
    history as materialized (
        select h.ctid from a2_snapshot_history h
         where h.session_id = v_session and h.up_to_index < v_clear
           for update of h skip locked),
    heads as materialized (
        select s.ctid from a2_snapshots s
         where s.session_id = v_session and s.up_to_index < v_clear
           for update of s skip locked),
    gone_lanes as (delete from a2_lane_events target using lanes where target.ctid = lanes.ctid),
    gone_cursors as (delete from a2_cursors target using cursors where target.ctid = cursors.ctid),
    gone_pins as (delete from a2_snapshot_pins target using pins where target.ctid = pins.ctid),
    gone_history as (delete from a2_snapshot_history target using history
                      where target.ctid = history.ctid),
    gone_heads as (delete from a2_snapshots target using heads where target.ctid = heads.ctid)
    select 0 into v_skipped;
    select (select count(*) from a2_lane_events lane
             where lane.session_id = v_session and lane.idx < v_clear)
         + (select count(*) from a2_cursors cur
             where cur.session_id = v_session and a2__retired_run(cur, v_clear))
         + (select count(*) from a2_snapshot_pins pin
             where pin.session_id = v_session and pin.up_to_index < v_clear)
         + (select count(*) from a2_snapshot_history h
             where h.session_id = v_session and h.up_to_index < v_clear)
         + (select count(*) from a2_snapshots s
             where s.session_id = v_session and s.up_to_index < v_clear)
      into v_skipped;
    return jsonb_build_object('deleted', v_deleted, 'done', v_skipped = 0);
end
$fn$;
