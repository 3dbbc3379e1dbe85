-- Presence: field-wise last-writer-wins registers with a TTL
-- (a2_presence_write, a2_presence_read, a2_presence_reap). A namespace's
-- advisory lock is (24882, hashtext(ns)), in the two-key space apart from
-- the session locks: writes and reaps hold it shared, a read exclusively.

-- A presence entry as the functions return it.
create or replace function a2__presence_json(p a2_presence, text_payloads boolean)
returns jsonb
language sql
stable
as $fn$
select jsonb_build_object(
    'participant', p.participant, 'field', p.field,
    'value', case when text_payloads then to_jsonb(p.value::text) else p.value end,
    'seen', p.seen, 'at', p.at, 'expires_at', p.expires_at)
$fn$;

-- a2_presence_write(ns, participant, fields, ttl_ms, at, seen, now_ms,
--                   text_payloads)
--
-- Writes fields ([{"field", "value"} (or "value_text": its JSON text); no
-- value or JSON null: a tombstone], 1..1024, names distinct) of
-- participant in namespace ns: for each field an unexpired stored row with
-- a strictly newer `at` survives, anything else is replaced. The row lives
-- until now_ms + ttl_ms. Result: {"written": [<entry>]}, the fields that
-- won, in the order given.
--
-- Locks: the namespace's lock, shared.
create or replace function a2_presence_write(ns text, participant text, fields jsonb,
                                             ttl_ms bigint, at bigint, seen bigint default null,
                                             now_ms bigint default null,
                                             text_payloads boolean default false)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_ns text := a2_presence_write.ns;
    v_participant text := a2_presence_write.participant;
    v_now bigint := coalesce(a2_presence_write.now_ms, a2__now_ms());
    v_out jsonb;
begin
    perform a2__writable('a2_presence_write');
    perform a2__name('ns', v_ns);
    perform a2__name('participant', v_participant);
    if a2_presence_write.ttl_ms is null or a2_presence_write.ttl_ms <= 0 then
        perform a2__fail('INVALID_ARGUMENT', 'ttl_ms must be positive');
    end if;
    if a2_presence_write.ttl_ms > 9223372036854775807 - v_now then
        perform a2__fail('INVALID_ARGUMENT', 'ttl_ms is too large');
    end if;
    if a2_presence_write.at is null or a2_presence_write.at < 0 then
        perform a2__fail('INVALID_ARGUMENT', 'at must not be negative');
    end if;
    if a2_presence_write.fields is null or jsonb_typeof(a2_presence_write.fields) <> 'array'
       or jsonb_array_length(a2_presence_write.fields) = 0 then
        perform a2__fail('INVALID_ARGUMENT', 'a presence write needs at least one field');
    end if;
    if jsonb_array_length(a2_presence_write.fields) > 1024 then
        perform a2__fail('INVALID_ARGUMENT', 'more than 1024 fields in one write');
    end if;
    if exists (select 1 from jsonb_array_elements(a2_presence_write.fields) x
                where a2__name('a field''s name', x->>'field') is null) then
        perform a2__fail('INVALID_ARGUMENT', 'a field needs a name');
    end if;
    if (select count(distinct x->>'field') < count(*)
          from jsonb_array_elements(a2_presence_write.fields) x) then
        perform a2__fail('INVALID_ARGUMENT', 'a field is given twice');
    end if;

    perform pg_advisory_xact_lock_shared(24882, hashtext(v_ns));

    with input as materialized (
        select e.n, e.item->>'field' as field,
               coalesce(e.item->'value', (e.item->>'value_text')::jsonb, 'null') as value
          from jsonb_array_elements(a2_presence_write.fields) with ordinality as e(item, n)),
    written as (
        insert into a2_presence (ns, participant, field, value, seen, at, expires_at)
        select v_ns, v_participant, input.field, input.value, a2_presence_write.seen,
               a2_presence_write.at, v_now + a2_presence_write.ttl_ms
          from input
        on conflict (ns, participant, field)
        do update set value = excluded.value, seen = excluded.seen, at = excluded.at,
                      expires_at = excluded.expires_at
              where a2_presence.at <= excluded.at or a2_presence.expires_at <= v_now
        returning a2_presence.*)
    select jsonb_agg(a2__presence_json(written, a2_presence_write.text_payloads) order by input.n)
      into v_out
      from written join input on input.field = written.field;
    return jsonb_build_object('written', coalesce(v_out, '[]'));
end
$fn$;

-- a2_presence_read(ns, now_ms, text_payloads)
--
-- The namespace's live registers (no tombstones, nothing expired), by
-- participant, then field (byte order), and the WAL position they are
-- exact at; deletes the namespace's expired rows. Result:
--   {"entries": [<entry>], "lsn": the WAL insert position, as a decimal
--    string of its 64 bits}
-- Every change of the namespace whose commit ends at or below lsn is in
-- the entries; every later one ends above it (docs/protocol.md).
--
-- Locks: the namespace's lock, exclusive: writes in flight are waited for,
-- and writes that start meanwhile wait.
create or replace function a2_presence_read(ns text, now_ms bigint default null,
                                            text_payloads boolean default false)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_ns text := a2__name('ns', a2_presence_read.ns);
    v_now bigint := coalesce(a2_presence_read.now_ms, a2__now_ms());
    v_out jsonb;
begin
    perform a2__writable('a2_presence_read');
    perform pg_advisory_xact_lock(24882, hashtext(v_ns));
    -- One snapshot, after the lock: the rows and the position.
    with reaped as (
        delete from a2_presence p where p.ns = v_ns and p.expires_at <= v_now),
    live as (
        select p.* from a2_presence p
         where p.ns = v_ns and p.expires_at > v_now and p.value <> 'null'::jsonb)
    select jsonb_build_object(
               'entries', coalesce((select jsonb_agg(a2__presence_json(live, a2_presence_read.text_payloads)
                                                     order by live.participant collate "C",
                                                              live.field collate "C")
                                      from live), '[]'),
               'lsn', (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text)
      into v_out;
    return v_out;
end
$fn$;

-- a2_presence_reap(ns, max_rows, now_ms)
--
-- Deletes at most max_rows (1..100000) expired rows of namespace ns (null:
-- of every namespace). Result: {"reaped": how many}. Call again while it
-- returns max_rows.
--
-- Locks: the shared lock of each namespace it deletes in, before its rows
-- (as writes), so a reap never commits inside a read's window; rows other
-- operations hold are skipped.
create or replace function a2_presence_reap(ns text default null, max_rows integer default 1000,
                                            now_ms bigint default null)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_ns text := a2__opt_name('ns', a2_presence_reap.ns);
    v_limit integer := a2_presence_reap.max_rows;
    v_now bigint := coalesce(a2_presence_reap.now_ms, a2__now_ms());
    v_reaped bigint;
begin
    perform a2__writable('a2_presence_reap');
    if v_limit is null or v_limit < 1 or v_limit > 100000 then
        perform a2__fail('INVALID_ARGUMENT', 'max_rows must be within 1..100000');
    end if;
    with spaces as materialized (
        select distinct p.ns from a2_presence p
         where p.expires_at <= v_now and (v_ns is null or p.ns = v_ns)
         limit v_limit),
    locked as materialized (
        select spaces.ns from spaces
         where pg_advisory_xact_lock_shared(24882, hashtext(spaces.ns))::text is not null),
    doomed as materialized (
        select p.ctid from a2_presence p
         where p.expires_at <= v_now and p.ns in (select locked.ns from locked)
         order by p.expires_at limit v_limit
           for update skip locked),
    gone as (delete from a2_presence p using doomed where p.ctid = doomed.ctid returning 1)
    select count(*) into v_reaped from gone;
    return jsonb_build_object('reaped', v_reaped);
end
$fn$;
