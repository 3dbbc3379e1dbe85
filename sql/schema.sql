-- a2 schema: tables, indexes, replica identity and the a2_batch function.
--
-- Applying this file twice is harmless: every object is created only when
-- missing, functions are replaced, and the version row is upserted.
-- Timestamps are epoch milliseconds from the store's clock, never now().

set client_min_messages = warning;

-- The schema version this file installs; `a2 schema check` compares it.
create table if not exists a2_meta (
    key   text primary key,
    value text not null
);

-- Per-session event logs. idx is dense per session, assigned under the
-- session's advisory lock; event ids are unique per session.
create table if not exists a2_events (
    session_id text   not null,
    idx        bigint not null,
    event_type text   not null,
    payload    jsonb  not null default 'null'::jsonb,
    event_id   text   not null,
    created_at bigint not null,
    cause      jsonb,
    primary key (session_id, idx)
);
create unique index if not exists a2_events_ids on a2_events (session_id, event_id);
create index if not exists a2_events_types on a2_events (session_id, event_type, idx);

-- One row per run of a consumer's cursor. kind 'event' runs one event
-- (cursor_key '#<idx>'), 'lane' a FIFO lane, 'log' the session log filtered
-- by types. epoch is the head a run started at.
create table if not exists a2_cursors (
    session_id          text    not null,
    consumer            text    not null,
    cursor_key          text    not null,
    epoch               bigint  not null,
    kind                text    not null check (kind in ('event', 'lane', 'log')),
    lane                text,
    position            bigint  not null default 0,
    head                bigint,
    types               jsonb,
    attempt_count       integer not null default 0,
    first_claimed_at    bigint,
    last_claimed_at     bigint,
    claim_holder        text,
    claim_expires_at    bigint,
    failure_count       integer not null default 0,
    last_failed_at      bigint,
    last_failed_attempt integer,
    last_error          text,
    failed_at           bigint,
    completed_idx       bigint,
    completed_attempt   integer,
    returned_event_ids  jsonb,
    primary key (session_id, cursor_key, consumer, epoch)
);
-- Heads a claim may take, in head order.
create index if not exists a2_cursors_heads on a2_cursors (session_id, head)
    where head is not null;
-- Sessions where a consumer has a head (pending_sessions, without a2_events).
create index if not exists a2_cursors_pending on a2_cursors (consumer, session_id)
    where head is not null and failed_at is null;
-- Live claims and retry holds, read once by a2-consumer on start.
create index if not exists a2_cursors_holds on a2_cursors (claim_expires_at)
    where claim_expires_at is not null;
-- Updates and deletes carry the whole old row into the WAL.
alter table a2_cursors replica identity full;

-- A lane's queue: the events targeted at (consumer, lane), with receipts.
create table if not exists a2_lane_events (
    session_id         text    not null,
    consumer           text    not null,
    lane               text    not null,
    idx                bigint  not null,
    done               boolean not null default false,
    completed_attempt  integer,
    returned_event_ids jsonb,
    primary key (session_id, consumer, lane, idx)
);

-- The session's latest clear marker.
create table if not exists a2_clears (
    session_id  text   primary key,
    clear_index bigint not null
);

-- Reducer snapshots: the latest per reducer, the history heads still read,
-- and the pins that keep that history while a head that read it is unfinished.
create table if not exists a2_snapshots (
    session_id   text   not null,
    reducer_name text   not null,
    up_to_index  bigint not null,
    state        jsonb  not null,
    written_at   bigint not null,
    primary key (session_id, reducer_name)
);
create table if not exists a2_snapshot_history (
    session_id   text   not null,
    reducer_name text   not null,
    up_to_index  bigint not null,
    state        jsonb  not null,
    written_at   bigint not null,
    primary key (session_id, reducer_name, up_to_index)
);
create table if not exists a2_snapshot_pins (
    session_id   text   not null,
    event_index  bigint not null,
    consumer     text   not null,
    cursor_key   text   not null,
    reducer_name text   not null,
    up_to_index  bigint not null,
    primary key (session_id, event_index, consumer, cursor_key, reducer_name, up_to_index)
);

-- Presence: field-wise last-writer-wins registers with a TTL. A JSON null
-- value is a tombstone kept until it expires.
create table if not exists a2_presence (
    ns          text   not null,
    participant text   not null,
    field       text   not null,
    value       jsonb  not null,
    seen        bigint,
    at          bigint not null,
    expires_at  bigint not null,
    primary key (ns, participant, field)
);
create index if not exists a2_presence_expiry on a2_presence (expires_at);

-- a2_batch(statements, params): runs each statement in order, in the
-- caller's transaction, and returns their jsonb rows. Each statement is a
-- select of jsonb rows that reads its values from $1 (params); it takes its
-- snapshot when it starts, so a statement after pg_advisory_xact_lock sees
-- what the lock's last holder committed.
--   * a row holding the key "abort" raises SQLSTATE A2001 with the row as the
--     error's detail: the whole call rolls back;
--   * a row holding the key "stop" ends the batch after its statement.
-- Statements are the store's constants: each is prepared once per server
-- session (named a2b_<md5 of its text>) so its plan is cached, and runs as
-- EXECUTE with params as its one jsonb argument. The setting a2.a2b_<md5>
-- remembers that the session prepared it, so the common path reads no
-- catalog view; a rolled-back call forgets the setting and the next call
-- looks in pg_prepared_statements once more. DISCARD ALL clears both. Past
-- a2_batch_prepared_limit() prepared statements a new text runs unprepared.
create or replace function a2_batch_prepared_limit() returns integer
language sql immutable as 'select 512';

create or replace function a2_batch(statements text[], params jsonb)
returns setof jsonb
language plpgsql
volatile
as $fn$
declare
    statement text;
    pname text;
    runner text;
    r jsonb;
    stopping boolean := false;
    arg text;
begin
    if statements is null then
        return;
    end if;
    arg := quote_nullable(params::text) || '::jsonb';
    foreach statement in array statements loop
        pname := 'a2b_' || md5(statement);
        runner := format('execute %I(%s)', pname, arg);
        if current_setting('a2.' || pname, true) is distinct from 'prepared' then
            if exists (select 1 from pg_prepared_statements p
                        where p.name = pname) then
                perform set_config('a2.' || pname, 'prepared', false);
            elsif (select count(*) from pg_prepared_statements p
                    where p.name like 'a2b\_%') < a2_batch_prepared_limit() then
                execute format('prepare %I(jsonb) as %s', pname, statement);
                perform set_config('a2.' || pname, 'prepared', false);
            else
                runner := null;
            end if;
        end if;
        for r in execute coalesce(runner, statement) using params loop
            if jsonb_typeof(r) = 'object' then
                if r ? 'abort' then
                    raise exception using
                        errcode = 'A2001',
                        message = 'a2 batch aborted: ' || coalesce(r ->> 'abort', 'abort'),
                        detail = r::text;
                end if;
                if r ? 'stop' then
                    stopping := true;
                end if;
            end if;
            return next r;
        end loop;
        exit when stopping;
    end loop;
    return;
end
$fn$;

insert into a2_meta (key, value) values ('schema_version', '1')
on conflict (key) do update set value = excluded.value;
