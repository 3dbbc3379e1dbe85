-- a2_append: events appended to a session's log, and the cursor work their
-- targets and the served log consumers call for. The internals here
-- (a2__fence, a2__insert_events, a2__start_work, a2__has_pending) serve
-- a2_complete too.

-- Whether a served consumer (served null: any) has a head in the session
-- above the clear marker clr that is not dead-lettered.
create or replace function a2__has_pending(session text, served text[], clr bigint)
returns boolean
language plpgsql
stable
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__has_pending.session;
    v_served text[] := a2__has_pending.served;
    v_clear bigint := a2__has_pending.clr;
begin
    return exists (select 1 from a2_cursors pending
                    where pending.session_id = v_session and pending.head > v_clear
                      and pending.failed_at is null
                      and (v_served is null or pending.consumer = any(v_served)));
end
$fn$;

-- The attempt-currency fence of an append: each distinct cause of the
-- batch's events must still hold its head (the cursor at that head, in
-- that attempt, not dead-lettered, above the clear marker clr, null: read
-- it). Locks: those cursor rows, for share, in primary-key order; no other
-- lock. An append runs it before the session lock (a completion holds its
-- cursor row while it waits for the session lock, so the rows come first)
-- and again under it, where the rows are already its own.
create or replace function a2__fence(session text, events jsonb, clr bigint)
returns void
language plpgsql
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__fence.session;
    v_clear bigint := coalesce(a2__fence.clr,
                               (select c.clear_index from a2_clears c
                                 where c.session_id = a2__fence.session), 0);
    lost record;
begin
    with cause as (
        select c.consumer, c.lane, c.idx, c.attempt, min(c.ord) as ord
          from (select x.e->'cause'->>'consumer' as consumer, x.e->'cause'->>'lane' as lane,
                       (x.e->'cause'->>'index')::bigint as idx,
                       (x.e->'cause'->>'attempt')::integer as attempt, x.ord
                  from jsonb_array_elements(a2__fence.events) with ordinality as x(e, ord)
                 where jsonb_typeof(x.e->'cause') = 'object') c
         group by c.consumer, c.lane, c.idx, c.attempt),
    held as materialized (
        select cause.ord
          from cause
          join a2_cursors cur
            on cur.session_id = v_session
           and cur.cursor_key = a2__cursor_key(cause.lane, cause.idx)
           and cur.consumer = cause.consumer and cur.head = cause.idx
           and cur.attempt_count = cause.attempt and cur.failed_at is null
         where cause.idx > v_clear
         order by cur.cursor_key, cur.consumer, cur.epoch
           for share of cur)
    select cause.* into lost from cause
     where cause.ord not in (select held.ord from held)
     order by cause.ord limit 1;
    if found then
        perform a2__fail('SUPERSEDED_ATTEMPT',
                         format('attempt %s of %s at index %s in session "%s" is superseded',
                                lost.attempt, lost.consumer, lost.idx, v_session));
    end if;
end
$fn$;

-- Frees the ids below the clear marker that the batch reuses: their rows
-- are deleted, skipping rows a reclaim holds; one left over fails the call
-- with STORE_UNAVAILABLE (retry later). Never waits on a row.
create or replace function a2__reuse_ids(session text, ids text[], clr bigint)
returns void
language plpgsql
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__reuse_ids.session;
    v_ids text[] := a2__reuse_ids.ids;
    v_clear bigint := a2__reuse_ids.clr;
begin
    if v_clear = 0 then
        return;
    end if;
    with stale as materialized (
        select event.idx from a2_events event
         where event.session_id = v_session and event.event_id = any(v_ids)
           and event.idx < v_clear
         order by event.idx
           for update skip locked)
    delete from a2_events event using stale
     where event.session_id = v_session and event.idx = stale.idx;
    if exists (select 1 from unnest(v_ids) i, a2__event_with_id(v_session, i) event
                where event.idx < v_clear) then
        perform a2__fail('STORE_UNAVAILABLE',
                         format('an event id being reused is still held by cleared work '
                                'in session "%s"', v_session));
    end if;
end
$fn$;

-- Inserts the batch's events after index base, at now; cause, when not
-- null, is every event's cause (a completion's attempt), else each event's
-- own. An event without an id gets 32 random hex digits. Returns
-- [{"index", "id"}] in order.
create or replace function a2__insert_events(session text, events jsonb, base bigint,
                                             now_ms bigint, cause jsonb)
returns jsonb
language plpgsql
as $fn$
#variable_conflict use_column
declare
    v_out jsonb;
begin
    with inserted as (
        insert into a2_events (session_id, idx, event_type, payload, event_id, created_at, cause,
                               not_before)
        select a2__insert_events.session, a2__insert_events.base + x.ord, x.e->>'type',
               coalesce(x.e->'payload', (x.e->>'payload_text')::jsonb, 'null'::jsonb),
               coalesce(x.e->>'id', replace(gen_random_uuid()::text, '-', '')),
               a2__insert_events.now_ms,
               coalesce(a2__insert_events.cause,
                        case when jsonb_typeof(x.e->'cause') = 'object' then
                            jsonb_build_object('consumer', x.e->'cause'->>'consumer',
                                               'lane', x.e->'cause'->>'lane',
                                               'index', (x.e->'cause'->>'index')::bigint,
                                               'attempt', (x.e->'cause'->>'attempt')::integer)
                        end),
               (x.e->>'not_before')::bigint
          from jsonb_array_elements(a2__insert_events.events) with ordinality as x(e, ord)
         order by x.ord
        returning idx, event_id)
    select jsonb_agg(jsonb_build_object('index', inserted.idx, 'id', inserted.event_id)
                     order by inserted.idx)
      into v_out from inserted;
    return coalesce(v_out, '[]'::jsonb);
end
$fn$;

-- The cursor work of events inserted after index base (the spec's
-- enqueue), under the session lock, clr the clear marker:
--   * an event cursor ("#<index>") for each target without a lane;
--   * each lane target's event queued in its lane, and a run started for
--     each lane that has none running (idle, superseded by the marker, or
--     new);
--   * a run started for each served log consumer (consumers) whose types
--     the batch holds and that has none running.
-- Starting an idle lane or log cursor inserts a new run (keyed by its first
-- head, the epoch) and retires the idle one with skip locked: no wait on a
-- cursor row. A head of a delayed event (its not_before, or its target's,
-- after now_ms) starts held until then. Returns whether a log run was
-- asked for.
drop function if exists a2__start_work(text, jsonb, jsonb, bigint, bigint, boolean, boolean);
create or replace function a2__start_work(session text, events jsonb, consumers jsonb,
                                          base bigint, clr bigint, singles boolean,
                                          lanes boolean, now_ms bigint)
returns boolean
language plpgsql
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__start_work.session;
    v_events jsonb := a2__start_work.events;
    v_base bigint := a2__start_work.base;
    v_clear bigint := a2__start_work.clr;
    v_now bigint := a2__start_work.now_ms;
begin
    if singles then
        insert into a2_cursors (session_id, consumer, cursor_key, epoch, lane, kind, position, head,
                                claim_expires_at)
        select v_session, t.consumer, '#' || (v_base + x.ord), v_base + x.ord, null, 'event',
               v_base + x.ord - 1, v_base + x.ord,
               a2__hold(coalesce(t.not_before, (x.e->>'not_before')::bigint), v_now)
          from jsonb_array_elements(v_events) with ordinality as x(e, ord)
         cross join lateral jsonb_to_recordset(case when jsonb_typeof(x.e->'targets') = 'array'
                                                    then x.e->'targets' else '[]' end)
               as t(consumer text, lane text, not_before bigint)
         where t.lane is null
        on conflict do nothing;
    end if;
    if v_clear > 0 and (lanes or consumers is not null) then
        perform a2__announce_clear(v_session);
    end if;
    if lanes then
        insert into a2_lane_events (session_id, consumer, lane, idx, not_before)
        select v_session, t.consumer, t.lane, v_base + x.ord,
               coalesce(t.not_before, (x.e->>'not_before')::bigint)
          from jsonb_array_elements(v_events) with ordinality as x(e, ord)
         cross join lateral jsonb_to_recordset(case when jsonb_typeof(x.e->'targets') = 'array'
                                                    then x.e->'targets' else '[]' end)
               as t(consumer text, lane text, not_before bigint)
         where t.lane is not null
        on conflict do nothing;
        with target as (
            select t.consumer, 'lane:' || t.lane as cursor_key, t.lane, min(v_base + x.ord) as idx
              from jsonb_array_elements(v_events) with ordinality as x(e, ord)
             cross join lateral jsonb_to_recordset(case when jsonb_typeof(x.e->'targets') = 'array'
                                                        then x.e->'targets' else '[]' end)
                   as t(consumer text, lane text)
             where t.lane is not null
             group by t.consumer, t.lane),
        started as materialized (
            select target.*, latest.position
              from target
              left join lateral (select cur.position, cur.head from a2_cursors cur
                                  where cur.session_id = v_session
                                    and cur.cursor_key = target.cursor_key
                                    and cur.consumer = target.consumer
                                  order by cur.epoch desc limit 1) latest on true
             where latest.head is null or latest.head <= v_clear),
        idle as materialized (
            select cur.ctid from a2_cursors cur
              join started on cur.cursor_key = started.cursor_key
                          and cur.consumer = started.consumer
             where cur.session_id = v_session and (cur.head is null or cur.head <= v_clear)
               for update of cur skip locked),
        retired as (delete from a2_cursors old using idle where old.ctid = idle.ctid)
        insert into a2_cursors (session_id, consumer, cursor_key, epoch, lane, kind, position, head,
                                claim_expires_at)
        select v_session, started.consumer, started.cursor_key, started.idx, started.lane, 'lane',
               greatest(coalesce(started.position, 0), v_clear), started.idx,
               a2__hold((select l.not_before from a2_lane_events l
                          where l.session_id = v_session and l.consumer = started.consumer
                            and l.lane = started.lane and l.idx = started.idx), v_now)
          from started
        on conflict do nothing;
    end if;
    if consumers is null
       or not exists (select 1 from a2__log_consumers(a2__start_work.consumers) l
                        join jsonb_array_elements(v_events) x(e)
                          on x.e->>'type' <> 'a2.cleared'
                         and (l.types is null or l.types ? (x.e->>'type'))) then
        return false;
    end if;
    with target as (
        select l.consumer, 'lane:' || l.lane as cursor_key, l.lane, l.types, l.backfill,
               min(v_base + x.ord) as first
          from a2__log_consumers(a2__start_work.consumers) l
          join jsonb_array_elements(v_events) with ordinality as x(e, ord)
            on x.e->>'type' <> 'a2.cleared' and (l.types is null or l.types ? (x.e->>'type'))
         group by l.consumer, l.lane, l.types, l.backfill),
    woken as materialized (
        select target.*,
               case when latest.epoch is not null then greatest(latest.position, v_clear)
                    when target.backfill then v_clear
                    else v_base end as position,
               latest.epoch is not null or target.backfill as resumes
          from target
          left join lateral (select cur.epoch, cur.position, cur.head from a2_cursors cur
                              where cur.session_id = v_session
                                and cur.cursor_key = target.cursor_key
                                and cur.consumer = target.consumer
                              order by cur.epoch desc limit 1) latest on true
         where latest.head is null or latest.head <= v_clear),
    idle as materialized (
        select cur.ctid from a2_cursors cur
          join woken on cur.cursor_key = woken.cursor_key and cur.consumer = woken.consumer
         where cur.session_id = v_session and (cur.head is null or cur.head <= v_clear)
           for update of cur skip locked),
    retired as (delete from a2_cursors old using idle where old.ctid = idle.ctid),
    run as (
        select woken.*,
               case when woken.resumes
                    then coalesce(a2__next_log_head(v_session, woken.types, woken.position),
                                  woken.first)
                    else woken.first end as head
          from woken)
    insert into a2_cursors (session_id, consumer, cursor_key, epoch, lane, kind, position, head, types,
                            claim_expires_at)
    select v_session, run.consumer, run.cursor_key, run.head, run.lane, 'log', run.position,
           run.head, run.types,
           a2__hold((select ev.not_before from a2_events ev
                      where ev.session_id = v_session and ev.idx = run.head), v_now)
      from run
    on conflict do nothing;
    return true;
end
$fn$;

-- a2_append(session, events, consumers, origin, now_ms, text_payloads)
--
-- Appends events (in order, dense indexes after the session's last) and
-- starts their targets' cursor work; consumers are the consumers the caller
-- serves (null: every one; names, or {"name", "log": {"lane", "types",
-- "backfill"}} for a log consumer), whose log cursors start here and for
-- whom has_pending reports work. origin (null or 0: none) is the index
-- scheduled work came from. An event is {"type", "payload" (or
-- "payload_text": its JSON text), "id" (null: 32 random hex digits),
-- "cause": {"consumer", "lane", "index", "attempt"}, "targets":
-- [{"consumer", "lane"}]}. Results:
--   {"outcome": "appended", "events": [{"index", "id"}], "has_pending"}
--   {"outcome": "replayed", "events": [<stored event>], "has_pending"}
--     every id was stored already (a retry): the committed rows
-- Errors: PARTIAL_DUPLICATE_BATCH (some ids stored and some not, or an id
-- twice), SESSION_CLEARED (origin at or below the clear marker),
-- SUPERSEDED_ATTEMPT (a cause no longer holds its head), STORE_UNAVAILABLE
-- (a reused id still held by a reclaim), INVALID_ARGUMENT.
--
-- Locks: the causes' cursor rows for share (a2__fence), then the session's
-- advisory lock, held to the caller's commit. Under the lock it never waits
-- on a cursor row: new runs are inserted, idle ones retired with skip
-- locked.
--
-- A batch of one event without a cause takes a path of small statements
-- checked by plain expressions (the common case: each statement's plan is
-- small to start); other batches are checked and written set by set.
create or replace function a2_append(session text, events jsonb, consumers jsonb default null,
                                     origin bigint default null, now_ms bigint default null,
                                     text_payloads boolean default false)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session alias for a2_append.session;
    v_events alias for a2_append.events;
    v_consumers alias for a2_append.consumers;
    v_origin bigint := nullif(a2_append.origin, 0);
    v_now bigint := coalesce(a2_append.now_ms, a2__now_ms());
    v_served text[];
    e jsonb;
    v_id text;
    v_fresh boolean;
    v_payload jsonb;
    v_targets jsonb;
    v_target jsonb;
    v_consumer text;
    v_lane text;
    v_singles boolean;
    v_lanes boolean;
    v_started boolean;
    v_base bigint;
    v_clear bigint;
    v_owned bigint;
    v_out jsonb;
    v_logs boolean;
    f record;
begin
    -- One plain expression finds any fault; each call below raises only
    -- for its own, in this order.
    if current_setting('transaction_isolation') <> 'read committed'
       or v_session is null or v_session = '' or octet_length(v_session) > 1024
       or v_origin < 0 then
        perform a2__writable('a2_append');
        perform a2__name('session', v_session);
        perform a2__fail('INVALID_ARGUMENT', 'origin index must not be negative');
    end if;
    if v_consumers is not null then
        v_served := a2__served(v_consumers);
    end if;
    if jsonb_typeof(v_events) is distinct from 'array' or jsonb_array_length(v_events) <> 1
       or jsonb_typeof(v_events->0->'cause') = 'object'
       or v_events->0 ? 'not_before' or v_events @? '$[0].targets[*].not_before' then
        return a2__append_batch(v_session, v_events, v_consumers, v_served, v_origin, v_now,
                                a2_append.text_payloads);
    end if;

    -- One event: everything but the index is checked and computed before
    -- the session lock, which is held to the caller's commit, so that what
    -- runs under it is the least an append does.
    e := v_events->0;
    v_id := e->>'id';
    v_targets := case when jsonb_typeof(e->'targets') = 'array' then e->'targets' else '[]' end;
    if jsonb_typeof(e) <> 'object' or jsonb_typeof(e->'type') is distinct from 'string'
       or e->>'type' = '' or octet_length(e->>'type') > 1024 or e->>'type' = 'a2.cleared'
       or (jsonb_typeof(e->'id') <> 'null'
           and (jsonb_typeof(e->'id') <> 'string' or v_id = '' or octet_length(v_id) > 1024))
       or pg_column_size(e->'payload') > 67108864
       or jsonb_typeof(e->'payload_text') not in ('string', 'null')
       or jsonb_typeof(e->'cause') <> 'null'
       or jsonb_typeof(e->'targets') not in ('array', 'null')
       or jsonb_array_length(v_targets) > 256 then
        perform a2__events_problem(v_events, false);
    end if;
    v_payload := coalesce(e->'payload', (e->>'payload_text')::jsonb, 'null');
    v_fresh := v_id is null;
    if v_fresh then
        v_id := replace(gen_random_uuid()::text, '-', '');
    end if;
    if jsonb_array_length(v_targets) = 1 then
        -- One target (the common case): plain expressions.
        v_target := v_targets->0;
        v_consumer := v_target->>'consumer';
        v_lane := v_target->>'lane';
        if jsonb_typeof(v_target) <> 'object'
           or jsonb_typeof(v_target->'consumer') is distinct from 'string'
           or v_consumer = '' or octet_length(v_consumer) > 1024
           or jsonb_typeof(v_target->'lane') not in ('string', 'null')
           or v_lane = '' or octet_length(v_lane) > 1024 then
            perform a2__events_problem(v_events, false);
        end if;
        v_singles := v_lane is null;
        v_lanes := not v_singles;
        v_started := v_served is null or v_consumer = any(v_served);
        if not v_singles then
            v_consumer := null;
        end if;
    else
        perform 1 from jsonb_array_elements(v_targets) t
         where jsonb_typeof(t) <> 'object' or jsonb_typeof(t->'consumer') is distinct from 'string'
            or t->>'consumer' = '' or octet_length(t->>'consumer') > 1024
            or jsonb_typeof(t->'lane') not in ('string', 'null')
            or t->>'lane' = '' or octet_length(t->>'lane') > 1024;
        if found then
            perform a2__events_problem(v_events, false);
        end if;
        v_singles := v_targets @? '$[*] ? (!exists(@.lane) || @.lane == null)';
        v_lanes := v_targets @? '$[*] ? (exists(@.lane) && @.lane != null)';
        -- (A subquery would make the common case's plain expression a query.)
        if v_served is null then
            v_started := jsonb_array_length(v_targets) > 0;
        else
            v_started := exists (select 1 from jsonb_array_elements(v_targets) t
                                  where t->>'consumer' = any(v_served));
        end if;
    end if;

    perform pg_advisory_xact_lock(hashtext(v_session));

    select coalesce(max(x.idx), 0) into v_base from a2_events x where x.session_id = v_session;
    if v_fresh then
        insert into a2_events (session_id, idx, event_type, payload, event_id, created_at)
        values (v_session, v_base + 1, e->>'type', v_payload, v_id, v_now);
    else
        -- The id's unique index tells a retry: nothing is inserted when it
        -- is there.
        insert into a2_events (session_id, idx, event_type, payload, event_id, created_at)
        values (v_session, v_base + 1, e->>'type', v_payload, v_id, v_now)
        on conflict (session_id, event_id) do nothing;
        if not found then
            v_clear := coalesce((select c.clear_index from a2_clears c
                                  where c.session_id = v_session), 0);
            select x.idx into v_owned from a2_events x
             where x.session_id = v_session and x.event_id = v_id;
            if v_owned >= v_clear then
                select jsonb_build_array(a2__event_json(x, a2_append.text_payloads)) into v_out
                  from a2_events x where x.session_id = v_session and x.idx = v_owned;
                return jsonb_build_object('outcome', 'replayed', 'events', v_out,
                                          'has_pending', a2__has_pending(v_session, v_served,
                                                                         v_clear));
            end if;
            -- Below the clear marker the id belongs to nobody: reused.
            perform a2__reuse_ids(v_session, array[v_id], v_clear);
            insert into a2_events (session_id, idx, event_type, payload, event_id, created_at)
            values (v_session, v_base + 1, e->>'type', v_payload, v_id, v_now);
        end if;
    end if;
    if v_origin is not null then
        v_clear := coalesce(v_clear, (select c.clear_index from a2_clears c
                                       where c.session_id = v_session), 0);
        if v_origin <= v_clear then
            perform a2__fail('SESSION_CLEARED',
                             format('scheduled work from event %s was cleared in session "%s"',
                                    v_origin, v_session));
        end if;
    end if;
    if v_consumer is not null then
        -- One event cursor: new, as its index is.
        insert into a2_cursors (session_id, consumer, cursor_key, epoch, lane, kind, position,
                                head)
        values (v_session, v_consumer, '#' || (v_base + 1)::text, v_base + 1, null, 'event',
                v_base, v_base + 1);
    elsif v_singles then
        insert into a2_cursors (session_id, consumer, cursor_key, epoch, lane, kind, position,
                                head)
        select v_session, t->>'consumer', '#' || (v_base + 1)::text, v_base + 1, null, 'event',
               v_base, v_base + 1
          from jsonb_array_elements(v_targets) t
         where t->>'lane' is null
        on conflict do nothing;
    end if;
    if v_lanes or v_consumers is not null or not v_started then
        -- Lanes and log cursors start here; has_pending is then asked of
        -- the session (the common case above started an event cursor).
        v_clear := coalesce(v_clear, (select c.clear_index from a2_clears c
                                       where c.session_id = v_session), 0);
        if v_lanes or v_consumers is not null then
            v_logs := a2__start_work(v_session, v_events, v_consumers, v_base, v_clear, false,
                                     v_lanes, v_now);
        end if;
        v_started := v_started or coalesce(v_logs, false)
                     or a2__has_pending(v_session, v_served, v_clear);
    end if;
    return jsonb_build_object(
        'outcome', 'appended',
        'events', jsonb_build_array(jsonb_build_object('index', v_base + 1, 'id', v_id)),
        'has_pending', v_started);
end
$fn$;

-- a2_append of any batch (see a2_append): checked as a set, then written
-- set by set.
create or replace function a2__append_batch(session text, events jsonb, consumers jsonb,
                                            served text[], origin bigint, now_ms bigint,
                                            text_payloads boolean)
returns jsonb
language plpgsql
volatile
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__append_batch.session;
    v_events jsonb := a2__append_batch.events;
    v_consumers jsonb := a2__append_batch.consumers;
    v_served text[] := a2__append_batch.served;
    v_origin bigint := a2__append_batch.origin;
    f record;
    v_base bigint;
    v_clear bigint;
    v_owned bigint;
    v_out jsonb;
    v_logs boolean;
begin
    select * into f from a2__check_events(v_events, false, v_served);
    if cardinality(f.ids) > 1
       and cardinality(f.ids) > (select count(distinct i) from unnest(f.ids) i) then
        perform a2__fail('PARTIAL_DUPLICATE_BATCH',
                         'batch contains the same event id more than once');
    end if;
    if f.n = 0 then
        return jsonb_build_object(
            'outcome', 'appended', 'events', '[]'::jsonb,
            'has_pending', a2__has_pending(v_session, v_served,
                                           coalesce((select c.clear_index from a2_clears c
                                                      where c.session_id = v_session), 0)));
    end if;
    if f.caused then
        perform a2__fence(v_session, v_events, null);
    end if;

    perform pg_advisory_xact_lock(hashtext(v_session));

    select coalesce(max(e.idx), 0),
           coalesce((select c.clear_index from a2_clears c where c.session_id = v_session), 0)
      into v_base, v_clear
      from a2_events e where e.session_id = v_session;
    if cardinality(f.ids) > 0 then
        select count(*) into v_owned from unnest(f.ids) i, a2__event_with_id(v_session, i) e
         where e.idx >= v_clear;
        if v_owned = f.n then
            select jsonb_agg(a2__event_json(e, a2__append_batch.text_payloads) order by x.ord)
              into v_out
              from jsonb_array_elements(v_events) with ordinality as x(j, ord),
                   a2__event_with_id(v_session, x.j->>'id') e;
            return jsonb_build_object('outcome', 'replayed', 'events', v_out,
                                      'has_pending', a2__has_pending(v_session, v_served, v_clear));
        elsif v_owned > 0 then
            perform a2__fail('PARTIAL_DUPLICATE_BATCH',
                             format('batch mixes %s already-appended and %s fresh events',
                                    v_owned, f.n - v_owned));
        end if;
    end if;
    if v_origin <= v_clear then
        perform a2__fail('SESSION_CLEARED',
                         format('scheduled work from event %s was cleared in session "%s"',
                                v_origin, v_session));
    end if;
    if f.caused then
        perform a2__fence(v_session, v_events, v_clear);
    end if;
    if cardinality(f.ids) > 0 then
        perform a2__reuse_ids(v_session, f.ids, v_clear);
    end if;
    v_out := a2__insert_events(v_session, v_events, v_base, a2__append_batch.now_ms, null);
    v_logs := a2__start_work(v_session, v_events, v_consumers, v_base, v_clear,
                             f.singles, f.lanes, a2__append_batch.now_ms);
    return jsonb_build_object(
        'outcome', 'appended', 'events', v_out,
        'has_pending', f.started or v_logs or a2__has_pending(v_session, v_served, v_clear));
end
$fn$;
