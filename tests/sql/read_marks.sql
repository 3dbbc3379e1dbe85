-- pg_temp.mark(what): "<what> <rows and index entries read> <blocks read>"
-- from the a2 tables and their indexes since the last mark, in this
-- transaction (pg_stat_get_xact_*). Rows alone miss a scan that filters a
-- non-leading key inside an index: it returns few entries and reads every
-- block. Included by the scripts test_store_scale runs, after \c.
create temporary table read_mark (rows bigint, blocks bigint);
insert into read_mark values (0, 0);
create function pg_temp.mark(what text) returns text
language plpgsql as $$
declare
    r bigint;
    b bigint;
    was read_mark;
begin
    select sum(pg_stat_get_xact_tuples_returned(c.oid) + pg_stat_get_xact_tuples_fetched(c.oid)),
           sum(pg_stat_get_xact_blocks_fetched(c.oid))
      into r, b
      from pg_class c
     where c.relname like 'a2\_%' and c.relkind in ('r', 'i');
    select * into was from read_mark;
    update read_mark set rows = r, blocks = b;
    return what || ' ' || (r - was.rows) || ' ' || (b - was.blocks);
end
$$;
