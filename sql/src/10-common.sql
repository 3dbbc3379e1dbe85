-- Helpers the a2_* functions share: errors, argument checks, the clock,
-- cursor keys and the JSON shapes of results. Names with two underscores
-- (a2__*) are internal: callers use the a2_* functions of the other files.

-- Every helper that may raise is volatile: the planner would evaluate an
-- immutable call with constant arguments while planning, even in a CASE
-- branch that never runs.

-- The operations plan generically (plan_cache_mode) with sequential scans
-- off (enable_seqscan, set on each by 99-meta.sql): a connection plans a
-- statement once, often on tables still small (a2_warm, as a worker
-- starts), and keeps the plan as they grow. Every statement of an
-- operation reads by key; planned on a small table, an update by ctid or a
-- lookup of a few rows was a scan of the whole table
-- (tests/sql/planned_empty.sql). With them off, a table without a fitting
-- index is still scanned.

-- Raises the error the spec names: SQLSTATE A200N for a2_store_code -N, the
-- message "NAME: text". Returns nothing: the return type lets SQL
-- expressions call it.
create or replace function a2__fail(code text, message text)
returns boolean
language plpgsql
as $fn$
begin
    raise exception using
        errcode = case code
            when 'INVALID_ARGUMENT' then 'A2001'
            when 'STORE_UNAVAILABLE' then 'A2002'
            when 'SCHEMA_MISSING' then 'A2003'
            when 'PARTIAL_DUPLICATE_BATCH' then 'A2004'
            when 'SUPERSEDED_ATTEMPT' then 'A2005'
            when 'SESSION_CLEARED' then 'A2006'
            when 'NO_SUCH_EVENT' then 'A2007'
            else 'A2008' end,
        message = code || ': ' || message;
end
$fn$;

-- Epoch milliseconds of the server's clock, for a call that passes no
-- now_ms.
create or replace function a2__now_ms()
returns bigint
language sql
volatile
as $fn$ select (extract(epoch from clock_timestamp()) * 1000)::bigint $fn$;

-- Refuses a writing call outside READ COMMITTED: under REPEATABLE READ or
-- SERIALIZABLE every statement reads the transaction's first snapshot, so a
-- statement after the session lock would not see what the lock's last
-- holder committed (an index would be assigned twice).
create or replace function a2__writable(fn text)
returns void
language plpgsql
volatile
as $fn$
begin
    if current_setting('transaction_isolation') <> 'read committed' then
        perform a2__fail('INVALID_ARGUMENT',
                         format('%s must run under READ COMMITTED, not %s: it takes a fresh '
                                'snapshot after the session lock', fn,
                                upper(current_setting('transaction_isolation'))));
    end if;
end
$fn$;

-- A delayed head's hold: t when it is after now, else none (due: at once).
create or replace function a2__hold(t bigint, now bigint)
returns bigint
language sql
immutable
as $fn$ select case when t > now then t end $fn$;

-- Whether v (a JSON value or none) is a valid not_before: absent, null, or
-- whole epoch milliseconds from 0 to the end of year 9999.
create or replace function a2__time_ok(v jsonb)
returns boolean
language sql
immutable
as $fn$
select v is null or jsonb_typeof(v) = 'null'
       or (jsonb_typeof(v) = 'number' and v::text::numeric = trunc(v::text::numeric)
           and v::text::numeric between 0 and 253402300799999)
$fn$;

-- A name (session, type, id, consumer, lane, holder ...): 1 to 1024 bytes.
-- Returns it; what names it in the error.
create or replace function a2__name(what text, v text)
returns text
language plpgsql
volatile
as $fn$
begin
    if v is null or v = '' then
        perform a2__fail('INVALID_ARGUMENT', what || ' must not be empty');
    elsif octet_length(v) > 1024 then
        perform a2__fail('INVALID_ARGUMENT', what || ' is longer than 1024 bytes');
    end if;
    return v;
end
$fn$;

-- The same check of a name that may be null.
create or replace function a2__opt_name(what text, v text)
returns text
language plpgsql
volatile
as $fn$
begin
    return case when v is null then null else a2__name(what, v) end;
end
$fn$;

-- A cursor's key: "#<index>" for a concurrent cursor, "lane:<lane>" for a
-- lane or log cursor.
create or replace function a2__cursor_key(lane text, idx bigint)
returns text
language sql
immutable
as $fn$ select case when lane is null then '#' || idx::text else 'lane:' || lane end $fn$;

-- Checks an attempt's reference (consumer, lane, index, attempt).
create or replace function a2__check_attempt(consumer text, lane text,
                                             idx bigint, attempt integer)
returns boolean
language plpgsql
volatile
as $fn$
begin
    perform a2__name('consumer', consumer);
    perform a2__opt_name('lane', lane);
    if idx is null or idx < 1 or attempt is null or attempt < 1 then
        perform a2__fail('INVALID_ARGUMENT', 'index and attempt must be at least 1');
    end if;
    return true;
end
$fn$;

-- A cause ({"consumer", "lane", "index", "attempt"}) checked; what names it
-- in the errors.
create or replace function a2__check_cause(what text, cause jsonb)
returns boolean
language plpgsql
volatile
as $fn$
begin
    if jsonb_typeof(cause) is distinct from 'object' then
        perform a2__fail('INVALID_ARGUMENT', what || ' must be a JSON object');
    end if;
    if jsonb_typeof(cause->'consumer') is distinct from 'string' then
        perform a2__fail('INVALID_ARGUMENT', what || ' needs a consumer');
    end if;
    perform a2__name(what || '''s consumer', cause->>'consumer');
    if jsonb_typeof(cause->'lane') not in ('string', 'null') then
        perform a2__fail('INVALID_ARGUMENT', what || '''s lane must be a string or null');
    end if;
    perform a2__opt_name(what || '''s lane', cause->>'lane');
    if jsonb_typeof(cause->'index') is distinct from 'number'
       or jsonb_typeof(cause->'attempt') is distinct from 'number'
       or (cause->>'index')::numeric < 1 or (cause->>'attempt')::numeric < 1
       or (cause->>'index')::numeric <> trunc((cause->>'index')::numeric)
       or (cause->>'attempt')::numeric <> trunc((cause->>'attempt')::numeric)
       or (cause->>'attempt')::numeric > 2147483647
       or (cause->>'index')::numeric > 9223372036854775807 then
        perform a2__fail('INVALID_ARGUMENT',
                         what || ' needs an index and an attempt of at least 1');
    end if;
    return true;
end
$fn$;

-- A whole number from a JSON value, or an error naming it.
create or replace function a2__json_int(what text, v jsonb)
returns bigint
language plpgsql
volatile
as $fn$
begin
    if v is null or jsonb_typeof(v) = 'null' then
        return null;
    end if;
    if jsonb_typeof(v) <> 'number' or v::text::numeric <> trunc(v::text::numeric)
       or v::text::numeric not between -9223372036854775808 and 9223372036854775807 then
        perform a2__fail('INVALID_ARGUMENT', what || ' must be a whole number');
    end if;
    return v::text::bigint;
end
$fn$;

-- The consumers a caller serves: null (every consumer), or an array of
-- names and of objects {"name", "log": {"lane", "types", "backfill"}}.
-- Checks them; returns their names.
create or replace function a2__served(consumers jsonb)
returns text[]
language plpgsql
volatile
as $fn$
declare
    c jsonb;
    log jsonb;
    names text[] := '{}';
begin
    if consumers is null or jsonb_typeof(consumers) = 'null' then
        return null;
    end if;
    if jsonb_typeof(consumers) <> 'array' then
        perform a2__fail('INVALID_ARGUMENT', 'consumers must be a JSON array or null');
    end if;
    -- One name (the common case: a worker of one consumer), in plain
    -- expressions; the loop's query costs more.
    if jsonb_array_length(consumers) = 1 and jsonb_typeof(consumers->0) = 'string'
       and consumers->>0 <> '' and octet_length(consumers->>0) <= 1024 then
        return array[consumers->>0];
    end if;
    -- One log consumer of at most one type (a log worker's), the same way.
    c := consumers->0;
    log := c->'log';
    if jsonb_array_length(consumers) = 1 and jsonb_typeof(c->'name') = 'string'
       and octet_length(c->>'name') between 1 and 1024
       and jsonb_typeof(log->'lane') = 'string'
       and octet_length(log->>'lane') between 1 and 1024
       and (log->'types' is null or jsonb_typeof(log->'types') = 'null'
            or (jsonb_typeof(log->'types') = 'array' and jsonb_array_length(log->'types') <= 1
                and coalesce(jsonb_typeof(log->'types'->0), 'string') = 'string'
                and coalesce(octet_length(log->'types'->>0), 1) between 1 and 1024))
       and coalesce(jsonb_typeof(log->'backfill'), 'null') in ('null', 'boolean') then
        return array[c->>'name'];
    end if;
    for c in select value from jsonb_array_elements(consumers) loop
        if jsonb_typeof(c) = 'string' then
            names := names || a2__name('a consumer''s name', c #>> '{}');
            continue;
        end if;
        if jsonb_typeof(c) <> 'object' or jsonb_typeof(c->'name') is distinct from 'string' then
            perform a2__fail('INVALID_ARGUMENT',
                             'a consumer must be a name or an object with a "name"');
        end if;
        names := names || a2__name('a consumer''s name', c->>'name');
        log := c->'log';
        if log is null or jsonb_typeof(log) = 'null' then
            continue;
        end if;
        if jsonb_typeof(log) <> 'object' or jsonb_typeof(log->'lane') is distinct from 'string' then
            perform a2__fail('INVALID_ARGUMENT', 'a log consumer needs a "lane"');
        end if;
        perform a2__name('a log consumer''s lane', log->>'lane');
        if jsonb_typeof(log->'types') not in ('array', 'null') then
            perform a2__fail('INVALID_ARGUMENT', 'log types must be an array or null');
        end if;
        if exists (select 1 from jsonb_array_elements(case when jsonb_typeof(log->'types') = 'array'
                                                           then log->'types' end) t
                    where jsonb_typeof(t) <> 'string' or t #>> '{}' = ''
                       or octet_length(t #>> '{}') > 1024) then
            perform a2__fail('INVALID_ARGUMENT', 'a log type must be a name of 1 to 1024 bytes');
        end if;
        if jsonb_typeof(log->'backfill') not in ('boolean', 'null') then
            perform a2__fail('INVALID_ARGUMENT', 'backfill must be true or false');
        end if;
    end loop;
    return names;
end
$fn$;

-- The log consumers among consumers (see a2__served), one row each.
create or replace function a2__log_consumers(consumers jsonb)
returns table (consumer text, lane text, types jsonb, backfill boolean)
language sql
immutable
as $fn$
select c->>'name', c->'log'->>'lane', nullif(c->'log'->'types', 'null'::jsonb),
       coalesce((c->'log'->>'backfill')::boolean, false)
  from jsonb_array_elements(case when jsonb_typeof(consumers) = 'array' then consumers end) c
 where jsonb_typeof(c) = 'object' and jsonb_typeof(c->'log') = 'object'
$fn$;

-- The events of an append or a completion: an array of objects {"type",
-- "payload" (or "payload_text": its JSON text), "id", "cause", "targets":
-- [{"consumer", "lane"}]}. Checks them (ids required in completions, where
-- causes are ignored) and says what the batch holds: how many events, the
-- ids supplied (in order), whether any has a cause, a target without a lane
-- (singles), a lane target, and a target of a served consumer (served null:
-- every consumer). Repeated ids are the caller's to refuse. One query when
-- the batch is sound; the error of one that is not comes from
-- a2__events_problem.
create or replace function a2__check_events(events jsonb, ids_required boolean, served text[],
                                            out n integer, out ids text[], out caused boolean,
                                            out singles boolean, out lanes boolean,
                                            out started boolean)
language plpgsql
volatile
as $fn$
declare
    sound boolean;
begin
    if jsonb_typeof(events) is distinct from 'array' or jsonb_array_length(events) > 10000 then
        perform a2__events_problem(events, ids_required);
    end if;
    select count(*),
           coalesce(array_agg(x.e->>'id' order by x.ord)
                        filter (where jsonb_typeof(x.e->'id') = 'string'), '{}'),
           coalesce(bool_or(jsonb_typeof(x.e->'cause') = 'object') and not ids_required, false),
           coalesce(bool_or(t.singles), false), coalesce(bool_or(t.lanes), false),
           coalesce(bool_or(t.served), false),
           coalesce(bool_and(
               jsonb_typeof(x.e) = 'object'
               and jsonb_typeof(x.e->'type') = 'string'
               and x.e->>'type' <> '' and octet_length(x.e->>'type') <= 1024
               and x.e->>'type' <> 'a2.cleared'
               and case jsonb_typeof(x.e->'id')
                       when 'string' then x.e->>'id' <> '' and octet_length(x.e->>'id') <= 1024
                       when 'null' then not ids_required
                       else x.e->'id' is null and not ids_required end
               and (x.e->'payload' is null or pg_column_size(x.e->'payload') <= 67108864)
               and (jsonb_typeof(x.e->'payload_text') is distinct from 'number'
                    and jsonb_typeof(x.e->'payload_text') in ('string', 'null')
                    or x.e->'payload_text' is null)
               and a2__time_ok(x.e->'not_before')
               and (ids_required or jsonb_typeof(x.e->'cause') is null
                    or jsonb_typeof(x.e->'cause') in ('object', 'null'))
               and t.sound), true)
      into n, ids, caused, singles, lanes, started, sound
      from jsonb_array_elements(events) with ordinality as x(e, ord)
     cross join lateral (
           select coalesce(bool_and(jsonb_typeof(tg) = 'object'
                                    and jsonb_typeof(tg->'consumer') = 'string'
                                    and tg->>'consumer' <> ''
                                    and octet_length(tg->>'consumer') <= 1024
                                    and (tg->'lane' is null or jsonb_typeof(tg->'lane') = 'null'
                                         or (jsonb_typeof(tg->'lane') = 'string'
                                             and tg->>'lane' <> ''
                                             and octet_length(tg->>'lane') <= 1024))
                                    and a2__time_ok(tg->'not_before')), true)
                  and (jsonb_typeof(x.e->'targets') is null
                       or jsonb_typeof(x.e->'targets') = 'null'
                       or (jsonb_typeof(x.e->'targets') = 'array'
                           and jsonb_array_length(x.e->'targets') <= 256)) as sound,
                  bool_or(tg->>'lane' is null) as singles,
                  bool_or(tg->>'lane' is not null) as lanes,
                  bool_or(served is null or tg->>'consumer' = any(served)) as served
             from jsonb_array_elements(case when jsonb_typeof(x.e->'targets') = 'array'
                                            then x.e->'targets' else '[]' end) tg) t;
    if not sound then
        perform a2__events_problem(events, ids_required);
    end if;
    -- A cause is checked in full: its shape decides the fence's query.
    if caused then
        perform a2__check_cause('a cause', x.e->'cause')
           from jsonb_array_elements(events) as x(e)
          where jsonb_typeof(x.e->'cause') = 'object';
    end if;
end
$fn$;

-- Raises the error of the first problem in events (see a2__check_events).
-- Never returns: the return type lets SQL expressions call it.
create or replace function a2__events_problem(events jsonb, ids_required boolean)
returns boolean
language plpgsql
volatile
as $fn$
declare
    e jsonb;
    t jsonb;
    n integer := 0;
begin
    if events is null or jsonb_typeof(events) <> 'array' then
        perform a2__fail('INVALID_ARGUMENT', 'events must be a JSON array');
    end if;
    if jsonb_array_length(events) > 10000 then
        perform a2__fail('INVALID_ARGUMENT', 'more than 10000 events in one batch');
    end if;
    for e in select value from jsonb_array_elements(events) loop
        n := n + 1;
        if jsonb_typeof(e) <> 'object' then
            perform a2__fail('INVALID_ARGUMENT', format('event %s is not a JSON object', n));
        end if;
        if jsonb_typeof(e->'type') is distinct from 'string' then
            perform a2__fail('INVALID_ARGUMENT', format('event %s needs a type', n));
        end if;
        perform a2__name('an event''s type', e->>'type');
        if e->>'type' = 'a2.cleared' then
            perform a2__fail('INVALID_ARGUMENT',
                             'event type a2.cleared is reserved for clear markers');
        end if;
        if jsonb_typeof(e->'id') = 'string' then
            perform a2__name('an event''s id', e->>'id');
        elsif ids_required or jsonb_typeof(e->'id') <> 'null' then
            perform a2__fail('INVALID_ARGUMENT', format('event %s needs an id', n));
        end if;
        if pg_column_size(e->'payload') > 67108864 then
            perform a2__fail('INVALID_ARGUMENT', format('payload of event %s is too large', n));
        end if;
        if jsonb_typeof(e->'payload_text') not in ('string', 'null') then
            perform a2__fail('INVALID_ARGUMENT',
                             format('payload_text of event %s must be a string', n));
        end if;
        if not a2__time_ok(e->'not_before') then
            perform a2__fail('INVALID_ARGUMENT',
                             format('not_before of event %s must be whole epoch milliseconds '
                                    '(0 to 253402300799999), not %s', n, e->'not_before'));
        end if;
        if not ids_required and jsonb_typeof(e->'cause') not in ('object', 'null') then
            perform a2__fail('INVALID_ARGUMENT', 'a cause must be a JSON object');
        end if;
        if jsonb_typeof(e->'targets') <> 'null' then
            if jsonb_typeof(e->'targets') <> 'array' then
                perform a2__fail('INVALID_ARGUMENT', format('targets of event %s must be an array', n));
            end if;
            if jsonb_array_length(e->'targets') > 256 then
                perform a2__fail('INVALID_ARGUMENT', 'more than 256 targets on one event');
            end if;
            for t in select value from jsonb_array_elements(e->'targets') loop
                if jsonb_typeof(t) <> 'object' or jsonb_typeof(t->'consumer') is distinct from 'string'
                   or jsonb_typeof(t->'lane') not in ('string', 'null') then
                    perform a2__fail('INVALID_ARGUMENT',
                                     'a target must be an object {"consumer", "lane"}');
                end if;
                perform a2__name('a target''s consumer', t->>'consumer');
                perform a2__opt_name('a target''s lane', t->>'lane');
                if not a2__time_ok(t->'not_before') then
                    perform a2__fail('INVALID_ARGUMENT',
                                     format('not_before of a target of event %s must be whole '
                                            'epoch milliseconds (0 to 253402300799999), not %s',
                                            n, t->'not_before'));
                end if;
            end loop;
        end if;
    end loop;
    perform a2__fail('INVALID_ARGUMENT', 'the events are not valid');
end
$fn$;

-- The session's event with this id, if any: one lookup of a2_events_ids.
-- Called in FROM, laterally (from unnest(ids) i, a2__event_with_id(s, i) e),
-- and inlined there; the subquery stays a lookup an id (a plain
-- "event_id = any(ids) and idx >= n" can be planned on the primary key,
-- reading every event of the session).
create or replace function a2__event_with_id(session text, id text)
returns setof a2_events
language sql
stable
as $fn$
select * from a2_events e where e.session_id = session and e.event_id = id offset 0
$fn$;

-- An event row as the functions return it. text_payloads: the payload as a
-- JSON string holding its stored text (exact for every number).
create or replace function a2__event_json(e a2_events, text_payloads boolean)
returns jsonb
language sql
stable
as $fn$
select jsonb_build_object(
    'session_id', e.session_id, 'index', e.idx, 'type', e.event_type,
    'payload', case when text_payloads then to_jsonb(e.payload::text) else e.payload end,
    'id', e.event_id, 'created_at', e.created_at, 'cause', e.cause)
$fn$;

-- A head as a2_claim returns it (a2_dead_letters' columns): its cursor's
-- dispatch state, its event, and the session's clear marker clr.
create or replace function a2__head_json(c a2_cursors, e a2_events, clr bigint,
                                         text_payloads boolean)
returns jsonb
language sql
stable
as $fn$
select jsonb_build_object(
    'session_id', c.session_id, 'consumer', c.consumer, 'lane', c.lane,
    'cursor_key', c.cursor_key, 'kind', c.kind, 'epoch', c.epoch, 'index', c.head,
    'attempt', c.attempt_count, 'first_claimed_at', c.first_claimed_at,
    'last_claimed_at', c.last_claimed_at, 'holder', c.claim_holder,
    'expires_at', c.claim_expires_at, 'failure_count', c.failure_count,
    'last_failed_at', c.last_failed_at, 'last_failed_attempt', c.last_failed_attempt,
    'last_error', c.last_error, 'failed_at', c.failed_at,
    'type', e.event_type,
    'payload', case when text_payloads then to_jsonb(e.payload::text) else e.payload end,
    'id', e.event_id, 'created_at', e.created_at, 'cause', e.cause, 'clear_index', clr)
$fn$;

-- A cursor run as a2_cursors reports it, given the session's clear marker
-- clr: a log cursor the marker passed (its epoch at or below it) counts from
-- the marker with nothing to run, its row untouched.
create or replace function a2__cursor_json(c a2_cursors, clr bigint)
returns jsonb
language sql
stable
as $fn$
select case when c.kind = 'log' and c.epoch <= clr then
    jsonb_build_object(
        'consumer', c.consumer, 'lane', c.lane, 'cursor_key', c.cursor_key, 'kind', c.kind,
        'epoch', c.epoch, 'position', greatest(c.position, clr), 'head', null,
        'types', c.types, 'attempt', 0, 'first_claimed_at', null, 'last_claimed_at', null,
        'holder', null, 'expires_at', null, 'failure_count', 0, 'last_failed_at', null,
        'last_failed_attempt', null, 'last_error', null, 'failed_at', null)
else
    jsonb_build_object(
        'consumer', c.consumer, 'lane', c.lane, 'cursor_key', c.cursor_key, 'kind', c.kind,
        'epoch', c.epoch, 'position', c.position, 'head', c.head, 'types', c.types,
        'attempt', c.attempt_count, 'first_claimed_at', c.first_claimed_at,
        'last_claimed_at', c.last_claimed_at, 'holder', c.claim_holder,
        'expires_at', c.claim_expires_at, 'failure_count', c.failure_count,
        'last_failed_at', c.last_failed_at, 'last_failed_attempt', c.last_failed_attempt,
        'last_error', c.last_error, 'failed_at', c.failed_at)
end
$fn$;

-- The next event after `after` a log cursor of the session takes: types a
-- JSON array of its types, or null for every type but the clear marker.
-- One probe of a2_events_types per type.
create or replace function a2__next_log_head(session text, types jsonb, after bigint)
returns bigint
language plpgsql
stable
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__next_log_head.session;
    v_after bigint := a2__next_log_head.after;
    v_next bigint;
begin
    if a2__next_log_head.types is null then
        select e.idx into v_next from a2_events e
         where e.session_id = v_session and e.idx > v_after and e.event_type <> 'a2.cleared'
         order by e.idx limit 1;
    else
        select min(nx.idx) into v_next
          from jsonb_array_elements_text(a2__next_log_head.types) as wanted(event_type)
         cross join lateral (select e.idx from a2_events e
                              where e.session_id = v_session
                                and e.event_type = wanted.event_type and e.idx > v_after
                              order by e.idx limit 1) nx
         where wanted.event_type <> 'a2.cleared';
    end if;
    return v_next;
end
$fn$;

-- Writes the session's clear marker again (the same value) before a
-- transaction deletes cursor runs the marker passed: a2-consumer reads the
-- marker from this change in the stream, ahead of the deletes, and audits
-- them as retired by the clear (not deleted by hand) without asking the
-- database.
create or replace function a2__announce_clear(session text)
returns void
language sql
as $fn$
update a2_clears set clear_index = clear_index where session_id = session
$fn$;

-- Releases the snapshot pins the heads (heads[i] of consumers[i]'s cursor
-- cursor_keys[i]) held, and the history of the session no other pin keeps
-- (in one statement: the pins' delete is not seen by the history's, hence
-- the exclusion).
create or replace function a2__unpin(session text, heads bigint[], consumers text[],
                                     cursor_keys text[])
returns void
language plpgsql
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__unpin.session;
begin
    -- A session with no pin and no history (one that never wrote a pinned
    -- snapshot: most) has nothing to release; two lookups cost a fraction
    -- of the two deletes' statement.
    if not exists (select 1 from a2_snapshot_pins pin where pin.session_id = v_session)
       and not exists (select 1 from a2_snapshot_history history
                        where history.session_id = v_session) then
        return;
    end if;
    with unpinned as (
        delete from a2_snapshot_pins pin
         using unnest(a2__unpin.heads, a2__unpin.consumers, a2__unpin.cursor_keys)
               h(head, consumer, cursor_key)
         where pin.session_id = v_session and pin.event_index = h.head
           and pin.consumer = h.consumer and pin.cursor_key = h.cursor_key)
    delete from a2_snapshot_history history
     where history.session_id = v_session
       and not exists (select 1 from a2_snapshot_pins pin
                        where pin.session_id = history.session_id
                          and pin.reducer_name = history.reducer_name
                          and pin.up_to_index = history.up_to_index
                          and not exists (select 1
                                            from unnest(a2__unpin.heads, a2__unpin.consumers,
                                                        a2__unpin.cursor_keys)
                                                 h(head, consumer, cursor_key)
                                           where pin.event_index = h.head
                                             and pin.consumer = h.consumer
                                             and pin.cursor_key = h.cursor_key));
end
$fn$;

-- Waits, at most wait_ms, until transaction xid (its 32 low bits, as a
-- wake-up carries them) is no longer in progress for new snapshots; true
-- when it is not (committed, aborted, unknown or the caller's own), false
-- when the wait ran out.
--
-- A commit is flushed, decoded and pushed to the workers before its
-- backend leaves the proc array, so a claim woken by it can run before it
-- is visible. Every a2 write holds its session's advisory lock until after
-- that (locks are released last), so a shared lock on the session's key
-- waits for the commit itself and returns the moment it is visible; a
-- writer that took no session lock is polled for every millisecond.
create or replace function a2__await_xid(session text, xid bigint, wait_ms bigint)
returns boolean
language plpgsql
volatile
as $fn$
declare
    v_next bigint;
    v_full bigint;
    v_until timestamptz;
    v_timeout text;
begin
    if xid is null then
        return true;
    end if;
    if xid < 0 or xid > 4294967295 then
        perform a2__fail('INVALID_ARGUMENT', 'after_xid must be a 32-bit transaction id');
    end if;
    if wait_ms is null or wait_ms < 0 then
        perform a2__fail('INVALID_ARGUMENT', 'wait_ms must not be negative');
    end if;
    -- The full id: the one of that low word nearest the snapshot's xmax
    -- (a commit still in the proc array is at or above it, when it is the
    -- latest).
    v_next := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
    v_full := (xid - v_next) & 4294967295;
    v_full := v_next + case when v_full >= 2147483648 then v_full - 4294967296 else v_full end;
    if v_full < 3 or v_full::text::xid8 = pg_current_xact_id_if_assigned() then
        return true;
    end if;
    if v_full < v_next then
        if pg_xact_status(v_full::text::xid8) is distinct from 'in progress' then
            return true;
        end if;
    else
        begin
            if pg_xact_status(v_full::text::xid8) is distinct from 'in progress' then
                return true;
            end if;
        exception when invalid_parameter_value then
            return true; -- "in the future": no such transaction
        end;
    end if;
    v_until := clock_timestamp() + make_interval(secs => wait_ms / 1000.0);
    v_timeout := current_setting('lock_timeout');
    perform set_config('lock_timeout', greatest(wait_ms, 1) || 'ms', true);
    begin
        perform pg_advisory_lock_shared(hashtext(session));
        perform pg_advisory_unlock_shared(hashtext(session));
    exception when lock_not_available then
        null;
    end;
    perform set_config('lock_timeout', v_timeout, true);
    while pg_xact_status(v_full::text::xid8) = 'in progress' loop
        if clock_timestamp() >= v_until then
            return false;
        end if;
        perform pg_sleep(0.001);
    end loop;
    return true;
end
$fn$;
