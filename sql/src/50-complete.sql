-- a2_complete: an attempt's head done, its returned events appended.

-- Moves the locked cursor row c past its head: a lane's event is marked
-- done, the head's snapshot pins are released, and the cursor takes its
-- next head (a lane's next queued event, a log's next event of its types,
-- none for an event cursor) with a fresh dispatch state; a log cursor is
-- retyped to new_types when retype. With receipt (a completion), the
-- attempt and the returned ids are kept: on the lane's event for a lane,
-- on the run's row otherwise. A next head whose event is delayed (the lane
-- event's not_before, or the event's for a log) is held until then.
create or replace function a2__advance(c a2_cursors, receipt boolean, attempt integer,
                                       ids jsonb, retype boolean, new_types jsonb)
returns void
language plpgsql
as $fn$
#variable_conflict use_column
declare
    v_types jsonb := case when c.kind = 'log' and retype then new_types else c.types end;
    v_next bigint;
    v_hold bigint;
    v_pinned boolean;
begin
    if c.kind = 'lane' then
        update a2_lane_events lane
           set done = true,
               completed_attempt = case when receipt then a2__advance.attempt
                                        else lane.completed_attempt end,
               returned_event_ids = case when receipt then a2__advance.ids
                                         else lane.returned_event_ids end
         where lane.session_id = c.session_id and lane.consumer = c.consumer
           and lane.lane = c.lane and lane.idx = c.head;
        select lane.idx, lane.not_before into v_next, v_hold from a2_lane_events lane
         where lane.session_id = c.session_id and lane.consumer = c.consumer
           and lane.lane = c.lane and not lane.done and lane.idx > c.head
         order by lane.consumer, lane.lane, lane.idx limit 1;
    elsif c.kind = 'log' then
        v_next := a2__next_log_head(c.session_id, v_types, c.head);
        if v_next is not null then
            select ev.not_before into v_hold from a2_events ev
             where ev.session_id = c.session_id and ev.idx = v_next;
        end if;
    end if;
    v_hold := a2__hold(v_hold, a2__now_ms());
    update a2_cursors cur
       set position = c.head, head = v_next,
           attempt_count = 0, first_claimed_at = null, last_claimed_at = null,
           claim_holder = null, claim_expires_at = v_hold, failure_count = 0,
           last_failed_at = null, last_failed_attempt = null, last_error = null,
           failed_at = null, types = v_types,
           completed_idx = case when c.kind = 'lane' or not receipt then cur.completed_idx
                                else c.head end,
           completed_attempt = case when c.kind = 'lane' or not receipt then cur.completed_attempt
                                    else a2__advance.attempt end,
           returned_event_ids = case when c.kind = 'lane' or not receipt then cur.returned_event_ids
                                     else a2__advance.ids end
     where cur.session_id = c.session_id and cur.cursor_key = c.cursor_key
       and cur.consumer = c.consumer and cur.epoch = c.epoch
    -- Whether the session has snapshot pins to release (most have none):
    -- asked in this statement, so that the common case makes no call.
    returning exists (select 1 from a2_snapshot_pins pin where pin.session_id = c.session_id)
              or exists (select 1 from a2_snapshot_history history
                          where history.session_id = c.session_id)
      into v_pinned;
    if v_pinned then
        perform a2__unpin(c.session_id, array[c.head], array[c.consumer], array[c.cursor_key]);
    end if;
end
$fn$;

-- A completion whose attempt does not hold its head: a stale attempt
-- (superseded), or the retry of a completion whose acknowledgement was
-- lost, which replays the committed events. Reads only.
create or replace function a2__settle_unheld(session text, consumer text, lane text,
                                             idx bigint, attempt integer, ids text[],
                                             duplicated boolean, text_payloads boolean)
returns jsonb
language plpgsql
stable
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__settle_unheld.session;
    v_consumer text := a2__settle_unheld.consumer;
    v_key text := a2__cursor_key(a2__settle_unheld.lane, a2__settle_unheld.idx);
    v_idx bigint := a2__settle_unheld.idx;
    v_clear bigint;
    latest record;
    v_done_attempt integer;
    v_done_ids jsonb;
    v_receipt boolean := false;
    v_found integer;
    v_matching integer;
    v_events jsonb;
    superseded constant jsonb := '{"outcome": "superseded"}';
begin
    v_clear := coalesce((select c.clear_index from a2_clears c where c.session_id = v_session), 0);
    select cur.kind, cur.head into latest from a2_cursors cur
     where cur.session_id = v_session and cur.cursor_key = v_key and cur.consumer = v_consumer
     order by cur.epoch desc limit 1;
    if not found then
        if v_idx > v_clear and not exists (select 1 from a2_events e
                                            where e.session_id = v_session and e.idx = v_idx) then
            perform a2__fail('NO_SUCH_EVENT', format('no event at index %s in session "%s"',
                                                     v_idx, v_session));
        end if;
        return superseded;
    end if;
    if duplicated then
        perform a2__fail('PARTIAL_DUPLICATE_BATCH',
                         'returned event batch contains the same event id more than once');
    end if;
    if latest.head is not distinct from v_idx then
        return superseded;
    end if;
    if latest.kind = 'lane' then
        select true, l.completed_attempt, l.returned_event_ids
          into v_receipt, v_done_attempt, v_done_ids
          from a2_lane_events l
         where l.session_id = v_session and l.consumer = v_consumer
           and l.lane = a2__settle_unheld.lane and l.idx = v_idx;
    else
        select cur.completed_idx = v_idx, cur.completed_attempt, cur.returned_event_ids
          into v_receipt, v_done_attempt, v_done_ids
          from a2_cursors cur
         where cur.session_id = v_session and cur.cursor_key = v_key
           and cur.consumer = v_consumer and cur.epoch <= v_idx
         order by cur.epoch desc limit 1;
    end if;
    if v_receipt is not true or v_done_attempt is distinct from a2__settle_unheld.attempt then
        return superseded;
    end if;
    if v_done_ids is distinct from to_jsonb(ids) then
        perform a2__fail('PARTIAL_DUPLICATE_BATCH',
                         'completed attempt does not match the returned event batch');
    end if;
    select count(*),
           count(*) filter (where e.cause = jsonb_build_object(
                                'consumer', v_consumer, 'lane', a2__settle_unheld.lane,
                                'index', v_idx, 'attempt', a2__settle_unheld.attempt)),
           jsonb_agg(a2__event_json(e, a2__settle_unheld.text_payloads) order by x.ord)
      into v_found, v_matching, v_events
      from unnest(ids) with ordinality as x(id, ord), a2__event_with_id(v_session, x.id) e;
    if v_found < cardinality(ids) and v_idx <= v_clear then
        return superseded;
    end if;
    if v_found < cardinality(ids) or v_matching < v_found then
        perform a2__fail('PARTIAL_DUPLICATE_BATCH',
                         'returned event retry does not match the committed batch');
    end if;
    return jsonb_build_object('outcome', 'completed', 'replayed', true,
                              'events', coalesce(v_events, '[]'::jsonb));
end
$fn$;

-- a2_complete(session, consumer, lane, index, attempt, events, consumers,
--             now_ms, text_payloads)
--
-- Completes attempt `attempt` of the head (consumer, lane: null for a
-- concurrent cursor, index): appends the returned events (each with an id;
-- their cause is this attempt; targets as in a2_append) and moves the
-- cursor to its next head. consumers: the served consumers, as in
-- a2_append (a served log consumer completing its head is retyped to its
-- types). Results:
--   {"outcome": "completed", "events": [{"index", "id"}]}
--   {"outcome": "completed", "replayed": true, "events": [<stored event>]}:
--     a retry after a lost acknowledgement; nothing written
--   {"outcome": "superseded"}: the attempt no longer holds the head
-- Errors: PARTIAL_DUPLICATE_BATCH (an id repeated, an id a live event owns,
-- or a retry that does not match the committed completion), NO_SUCH_EVENT,
-- INVALID_ARGUMENT.
--
-- Locks: the cursor row first (for update, while this attempt holds its
-- head), then the session's advisory lock when it appends or its lane or
-- log cursor goes idle.
create or replace function a2_complete(session text, consumer text, lane text, index bigint,
                                       attempt integer, events jsonb default '[]',
                                       consumers jsonb default null, now_ms bigint default null,
                                       text_payloads boolean default false)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2_complete.session;
    v_consumer text := a2_complete.consumer;
    v_lane text := a2_complete.lane;
    v_idx bigint := a2_complete.index;
    v_attempt integer := a2_complete.attempt;
    v_events jsonb := coalesce(a2_complete.events, '[]');
    v_now bigint := coalesce(a2_complete.now_ms, a2__now_ms());
    v_served text[];
    v_n integer := 0;
    v_ids text[] := '{}';
    v_singles boolean := false;
    v_lanes boolean := false;
    v_dup boolean := false;
    v_clear bigint;
    v_held record;
    v_cur a2_cursors;
    v_base bigint;
    v_out jsonb := '[]';
    v_retype boolean := false;
    v_types jsonb;
begin
    -- (Checks written as plain expressions, the functions called only to
    -- raise: a call costs more than the expression.)
    if current_setting('transaction_isolation') <> 'read committed' then
        perform a2__writable('a2_complete');
    end if;
    if v_session is null or v_session = '' or octet_length(v_session) > 1024 then
        perform a2__name('session', v_session);
    end if;
    if v_consumer is null or v_consumer = '' or octet_length(v_consumer) > 1024
       or v_lane = '' or octet_length(v_lane) > 1024
       or v_idx is null or v_idx < 1 or v_attempt is null or v_attempt < 1 then
        perform a2__check_attempt(v_consumer, v_lane, v_idx, v_attempt);
    end if;
    if a2_complete.consumers is not null then
        v_served := a2__served(a2_complete.consumers);
        select true, l.types into v_retype, v_types
          from a2__log_consumers(a2_complete.consumers) l
         where l.consumer = v_consumer limit 1;
        v_retype := coalesce(v_retype, false);
    end if;
    if v_events <> '[]' then
        select c.n, c.ids, c.singles, c.lanes into v_n, v_ids, v_singles, v_lanes
          from a2__check_events(v_events, true, v_served) c;
        v_dup := cardinality(v_ids) > 1
                 and cardinality(v_ids) > (select count(distinct i) from unnest(v_ids) i);
    end if;

    -- The held row, locked, and the session's clear marker, in one
    -- statement; a head at or below the marker is superseded.
    select cur as row, coalesce((select c.clear_index from a2_clears c
                                  where c.session_id = v_session), 0) as clear_index
      into v_held
      from a2_cursors cur
     where cur.session_id = v_session and cur.cursor_key = a2__cursor_key(v_lane, v_idx)
       and cur.consumer = v_consumer and cur.head = v_idx and cur.attempt_count = v_attempt
       and cur.failed_at is null and cur.claim_holder is not null
     order by cur.cursor_key limit 1
       for update of cur;
    if not found then
        v_clear := coalesce((select c.clear_index from a2_clears c
                              where c.session_id = v_session), 0);
        if v_idx <= v_clear then
            return '{"outcome": "superseded"}';
        end if;
        return a2__settle_unheld(v_session, v_consumer, v_lane, v_idx, v_attempt, v_ids, v_dup,
                                 a2_complete.text_payloads);
    end if;
    v_cur := v_held.row;
    v_clear := v_held.clear_index;
    if v_idx <= v_clear then
        return '{"outcome": "superseded"}';
    end if;
    if v_dup then
        perform a2__fail('PARTIAL_DUPLICATE_BATCH',
                         'returned event batch contains the same event id more than once');
    end if;

    if v_n > 0 then
        perform pg_advisory_xact_lock(hashtext(v_session));
        select coalesce(max(e.idx), 0),
               coalesce((select c.clear_index from a2_clears c where c.session_id = v_session), 0)
          into v_base, v_clear
          from a2_events e where e.session_id = v_session;
        if v_idx <= v_clear then
            return '{"outcome": "superseded"}';
        end if;
        if exists (select 1 from unnest(v_ids) i, a2__event_with_id(v_session, i) e
                    where e.idx >= v_clear) then
            perform a2__fail('PARTIAL_DUPLICATE_BATCH',
                             'returned event batch contains an already-appended event id');
        end if;
        perform a2__reuse_ids(v_session, v_ids, v_clear);
        v_out := a2__insert_events(v_session, v_events, v_base, v_now,
                                   jsonb_build_object('consumer', v_consumer, 'lane', v_lane,
                                                      'index', v_idx, 'attempt', v_attempt));
        perform a2__start_work(v_session, v_events, a2_complete.consumers, v_base, v_clear,
                               v_singles, v_lanes, v_now);
    elsif v_cur.kind <> 'event' then
        -- A lane or log cursor that goes idle does so under the session
        -- lock, which an append holds when it decides to start a new run.
        if (v_cur.kind = 'lane'
            and not exists (select 1 from a2_lane_events l
                             where l.session_id = v_session and l.consumer = v_consumer
                               and l.lane = v_cur.lane and not l.done and l.idx > v_idx))
           or (v_cur.kind = 'log'
               and a2__next_log_head(v_session,
                                     case when v_retype then v_types else v_cur.types end,
                                     v_idx) is null) then
            perform pg_advisory_xact_lock(hashtext(v_session));
        end if;
    end if;
    perform a2__advance(v_cur, true, v_attempt, to_jsonb(v_ids), v_retype, v_types);
    return jsonb_build_object('outcome', 'completed', 'events', v_out);
end
$fn$;

-- a2__complete_held(session, ops, run)
--
-- A run of a2_batch's completions of one session's concurrent cursors
-- (lane null) with no returned events, settled together: what a2_complete
-- does for each of them, in four statements for the run instead of some
-- twenty for each. ops: a2_batch's operations; run: the places in ops
-- (from 1) of the completions, each already checked by a2__batch_fast (the
-- names, the whole numbers and the keys; not the served consumers, checked
-- here as a2_complete checks them). Returns (ord, result) for each completion
-- whose attempt holds its head; the others (its head not held: superseded,
-- a replay, no such event; at or below the clear marker; a head named
-- twice in the run) return nothing, and the caller runs them through
-- a2_complete, one by one, after this.
--
-- Locks: the held cursor rows, for update, in primary-key order (a
-- completion takes its cursor row first, as a2_complete does); an event
-- cursor never goes idle, so no session lock.
create or replace function a2__complete_held(session text, ops jsonb, run integer[])
returns table (ord integer, result jsonb)
language plpgsql
volatile
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__complete_held.session;
    v_clear bigint;
    v_served jsonb;
    v_ords integer[];
    v_tids tid[];
    v_consumers text[];
    v_keys text[];
    v_heads bigint[];
    v_attempts integer[];
begin
    perform a2__writable('a2_complete');
    for v_served in select distinct ops->(i - 1)->'consumers' from unnest(run) i
                     where ops->(i - 1) ? 'consumers' loop
        perform a2__served(v_served);
    end loop;
    v_clear := coalesce((select c.clear_index from a2_clears c where c.session_id = v_session), 0);

    with wanted as (
        select o.ord, o.op->>'consumer' as consumer, (o.op->>'index')::bigint as idx,
               (o.op->>'attempt')::integer as attempt,
               count(*) over (partition by o.op->>'consumer', o.op->>'index') as times
          from (select i as ord, ops->(i - 1) as op from unnest(run) i) o),
    held as (
        -- One primary-key lookup a completion, in key order.
        select w.ord, cur.tid, cur.consumer, cur.cursor_key, cur.head, cur.attempt_count
          from (select * from wanted
                 where wanted.times = 1 and wanted.idx > v_clear
                 order by '#' || wanted.idx::text, wanted.consumer) w
         cross join lateral (
               select c.ctid as tid, c.consumer, c.cursor_key, c.head, c.attempt_count
                 from a2_cursors c
                where c.session_id = v_session and c.cursor_key = '#' || w.idx::text
                  and c.consumer = w.consumer and c.head = w.idx and c.attempt_count = w.attempt
                  and c.failed_at is null and c.claim_holder is not null
                  for update of c) cur)
    select array_agg(h.ord), array_agg(h.tid), array_agg(h.consumer), array_agg(h.cursor_key),
           array_agg(h.head), array_agg(h.attempt_count)
      into v_ords, v_tids, v_consumers, v_keys, v_heads, v_attempts
      from held h;
    if v_ords is null then
        return;
    end if;

    perform a2__unpin(v_session, v_heads, v_consumers, v_keys);

    -- Each cursor past its head, as a2__advance moves an event cursor. The
    -- rows are found by ctid, a TID scan with sequential scans off (a join
    -- on the key can be planned as a scan of every cursor the session ever
    -- had); this statement's snapshot sees the versions locked above, and
    -- nothing changes them while the locks are held.
    update a2_cursors cur
       set position = h.head, head = null,
           attempt_count = 0, first_claimed_at = null, last_claimed_at = null,
           claim_holder = null, claim_expires_at = null, failure_count = 0,
           last_failed_at = null, last_failed_attempt = null, last_error = null,
           failed_at = null, completed_idx = h.head, completed_attempt = h.attempt,
           returned_event_ids = '[]'
      from unnest(v_tids, v_heads, v_attempts) h(tid, head, attempt)
     where cur.ctid = h.tid;

    return query select o, '{"outcome": "completed", "events": []}'::jsonb from unnest(v_ords) o;
end
$fn$;
