-- Test-only: records every row version of a2_cursors, with the writing
-- transaction's xid, so the chaos run can compare the audit trail with the
-- table's real history. Never part of sql/schema.sql.
set client_min_messages = warning;
create table if not exists chaos_versions (
    seq        bigserial primary key,
    xid        bigint  not null,
    op         text    not null,
    session_id text    not null,
    consumer   text    not null,
    cursor_key text    not null,
    epoch      bigint  not null,
    sig        text    not null
);
create or replace function chaos_record() returns trigger language plpgsql as $$
declare
    r a2_cursors;
begin
    if tg_op = 'DELETE' then r := old; else r := new; end if;
    insert into chaos_versions(xid, op, session_id, consumer, cursor_key, epoch, sig)
    values (txid_current() % 4294967296, lower(tg_op), r.session_id, r.consumer,
            r.cursor_key, r.epoch,
            concat_ws('|', coalesce(r.head::text, 'null'), r.position::text,
                      r.attempt_count::text, coalesce(r.claim_holder, 'null'),
                      coalesce(r.claim_expires_at::text, 'null'),
                      r.failure_count::text, coalesce(r.failed_at::text, 'null'),
                      coalesce(md5(r.last_error), 'null')));
    return null;
end $$;
drop trigger if exists chaos_versions on a2_cursors;
create trigger chaos_versions after insert or update or delete on a2_cursors
    for each row execute function chaos_record();
