-- The a2 tables, their indexes and replica identity.
-- Timestamps are epoch milliseconds from the caller's clock, never now().

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
-- by types. epoch is the head a run started at. Only the store's functions
-- write it, kind always as one of those three literals: the table has no
-- CHECK constraint, since PostgreSQL prepares a table's CHECK expressions
-- anew in every statement that inserts or updates a row (about 5 us a
-- statement, measured on an append and on a claim's completion).
create table if not exists a2_cursors (
    session_id          text    not null,
    consumer            text    not null,
    cursor_key          text    not null,
    epoch               bigint  not null,
    kind                text    not null,
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
-- Heads a claim may take, in head order (dead letters are not).
--
-- Both indexes of live heads carry "failed_at is null" in their predicate,
-- and a2_cursors_pending ends in head, so that a lookup of one head, or of
-- one session's heads, is exact whichever the planner takes: with no
-- statistics yet (a table just filled) it takes that clause for rare, and
-- an index with it looks the smallest of all. With it in
-- a2_cursors_pending's alone, keyed (consumer, session_id), that index was
-- scanned whole for one session's heads (a claim), or read every head of
-- the session at each completion. Schema 6; older definitions are rebuilt.
--
-- a2_cursors_pending also carries "consumer <> ''", true of every row (a
-- consumer's name is never empty). An index with a clause in its predicate
-- serves only the queries that state it, and only the consumer-scoped
-- walks do: a query of one session's heads cannot take it and scan it
-- whole for its non-leading session_id, as generic plans did when a vacuum
-- had recorded both indexes of heads empty and this one the smaller. The
-- claim that scan served read every pending head of every session to find
-- one. Schema 7.
do $$
begin
    if exists (select 1 from pg_index i
                where i.indexrelid = to_regclass('a2_cursors_heads')
                  and pg_get_expr(i.indpred, i.indrelid) not like '%failed_at IS NULL%') then
        drop index a2_cursors_heads;
    end if;
    if exists (select 1 from pg_index i
                where i.indexrelid = to_regclass('a2_cursors_pending')
                  and (i.indnkeyatts <> 3
                       or pg_get_expr(i.indpred, i.indrelid) not like '%consumer <> %')) then
        drop index a2_cursors_pending;
    end if;
end
$$;
create index if not exists a2_cursors_heads on a2_cursors (session_id, head)
    where head is not null and failed_at is null;
-- Sessions where a consumer has a head (pending_sessions and a2_backlog,
-- without a2_events), and a consumer's head in a session.
create index if not exists a2_cursors_pending on a2_cursors (consumer, session_id, head)
    where head is not null and failed_at is null and consumer <> '';
-- No index names a claim's columns (claim_holder, claim_expires_at,
-- attempt_count, the claim times), so a claim, a renewal and a retry hold
-- update the row in place, a heap-only update, without a new entry in every
-- index (schema 7 drops a2_cursors_holds, which a2-consumer's read of the
-- live claims on start used; a2_cursors_heads serves that read), and the
-- table leaves a fifth of each page for those versions.
drop index if exists a2_cursors_holds;
do $$
begin
    if not exists (select 1 from pg_class
                    where oid = 'a2_cursors'::regclass and 'fillfactor=80' = any(reloptions)) then
        alter table a2_cursors set (fillfactor = 80);
    end if;
end
$$;
-- Dead letters across sessions, newest failure first (a2_find_dead_letters,
-- a2_redrive_matching, a2_backlog): all of them, and one consumer's.
create index if not exists a2_cursors_dead
    on a2_cursors (failed_at, session_id, consumer, cursor_key, epoch)
    where failed_at is not null;
create index if not exists a2_cursors_dead_consumer
    on a2_cursors (consumer, failed_at, session_id, cursor_key, epoch)
    where failed_at is not null;
-- Updates and deletes carry the whole old row into the WAL.
-- Schema 7 and older checked kind in the table.
alter table a2_cursors drop constraint if exists a2_cursors_kind_check;
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
-- Delayed dispatch (schema 3): an event's not_before (epoch ms, null: at
-- once) holds its heads until then; a lane target's own time (or the
-- event's) is kept on its lane event for when the lane reaches it.
alter table a2_events add column if not exists not_before bigint;
alter table a2_lane_events add column if not exists not_before bigint;

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
