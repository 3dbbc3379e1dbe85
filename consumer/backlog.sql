-- a2-consumer's read of the backlog gauges (consumer/backlog.h), with the
-- definitions of a2_backlog(): per consumer, the heads above their
-- session's clear marker that are not dead-lettered (pending, running ones
-- included), those a claim holds (running), and the dead-lettered heads
-- above the marker (dead_letters).
--
-- One statement, so one snapshot: the first row (kind 's') carries that
-- snapshot (pg_current_snapshot) and the WAL insert position read after
-- it, which tell the consumer which streamed transactions the counts
-- already hold. Rows of kind 'c' are the counts; rows of kind 'm' the clear
-- markers of the sessions that still have cursor rows at or below them (at
-- most $1), which classify later changes to those rows.
with counts as (
    select cur.consumer,
           count(*) filter (where cur.failed_at is null) as pending,
           count(*) filter (where cur.failed_at is null
                              and cur.claim_holder is not null) as running,
           count(*) filter (where cur.failed_at is not null) as dead_letters
      from a2_cursors cur
      left join a2_clears clr on clr.session_id = cur.session_id
     where cur.head is not null
       and cur.head > coalesce(clr.clear_index, 0)
     group by cur.consumer
), markers as (
    select clr.session_id, clr.clear_index
      from a2_clears clr
     where exists (select 1 from a2_cursors cur
                    where cur.session_id = clr.session_id
                      and cur.head <= clr.clear_index)
     limit $1::bigint
)
select 's' as kind, pg_current_snapshot()::text as name, null::bigint as a,
       null::bigint as b, null::bigint as c,
       pg_current_wal_insert_lsn()::text as lsn
union all
select 'c', consumer, pending, running, dead_letters, null from counts
union all
select 'm', session_id, clear_index, null, null, null from markers
