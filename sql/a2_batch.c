/*
 * a2_batch.so: a2_batch(statements text[], params jsonb) in C.
 *
 * The same contract as the PL/pgSQL a2_batch in schema.sql: each statement
 * runs in order, in the caller's transaction, with params as its one jsonb
 * parameter ($1) and a snapshot of its own taken when it starts; its jsonb
 * rows are returned; a row holding "abort" raises SQLSTATE A2001 (message
 * "a2 batch aborted: <abort>", the row as detail) and a row holding "stop"
 * ends the batch after its statement.
 *
 * What it saves: the PL/pgSQL version runs each statement as
 * EXECUTE name('<params as a literal>'::jsonb), which parses the utility
 * statement and the whole params document again for every statement. Here
 * each statement text is prepared once per server process through SPI
 * (SPI_keepplan) and executed with the params datum as it came. Plans are
 * kept in a hash table keyed by a 64-bit hash of the text, which is compared
 * in full on every lookup; past A2_BATCH_PLANS texts, or on a collision, a
 * statement runs unprepared. Plan invalidation (DDL, search_path) is the
 * plan cache's, as for any SPI plan.
 *
 * Load with sql/a2_batch_native.sql after sql/schema.sql; schema.sql puts
 * the PL/pgSQL version back.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"

PG_MODULE_MAGIC;

#define A2_BATCH_PLANS 512
#define A2_BATCH_ABORT MAKE_SQLSTATE('A', '2', '0', '0', '1')

typedef struct plan_entry {
    uint64 key;      /* hash of the statement text (the table's key) */
    char *sql;       /* the text, in TopMemoryContext */
    SPIPlanPtr plan; /* kept by SPI_keepplan */
} plan_entry;

static HTAB *plans;

/* The kept plan of statement `sql`, prepared on first use; NULL when it must
 * run unprepared (the table is full, or another text has the same hash). */
static SPIPlanPtr plan_for(const char *sql)
{
    if (!plans) {
        HASHCTL ctl;
        memset(&ctl, 0, sizeof ctl);
        ctl.keysize = sizeof(uint64);
        ctl.entrysize = sizeof(plan_entry);
        plans = hash_create("a2_batch plans", 64, &ctl, HASH_ELEM | HASH_BLOBS);
    }
    size_t len = strlen(sql);
    uint64 key = hash_bytes_extended((const unsigned char *)sql, (int)len, 0);
    plan_entry *e = hash_search(plans, &key, HASH_FIND, NULL);
    if (e)
        return strcmp(e->sql, sql) == 0 ? e->plan : NULL;
    if (hash_get_num_entries(plans) >= A2_BATCH_PLANS)
        return NULL;
    Oid argtypes[1] = {JSONBOID};
    SPIPlanPtr plan = SPI_prepare(sql, 1, argtypes);
    if (!plan)
        elog(ERROR, "a2_batch: could not prepare a statement: %s",
             SPI_result_code_string(SPI_result));
    if (SPI_keepplan(plan) != 0)
        elog(ERROR, "a2_batch: could not keep a statement's plan");
    char *copy = MemoryContextStrdup(TopMemoryContext, sql);
    bool found;
    e = hash_search(plans, &key, HASH_ENTER, &found);
    e->sql = copy;
    e->plan = plan;
    return plan;
}

/* The value of `key` when jb is an object holding it, as text (NULL for a
 * JSON null); *has says whether the key is there. */
static char *key_text(Jsonb *jb, const char *key, bool *has)
{
    *has = false;
    if (!JB_ROOT_IS_OBJECT(jb))
        return NULL;
    JsonbValue *v = getKeyJsonValueFromContainer(&jb->root, key,
                                                 (int)strlen(key), NULL);
    if (!v)
        return NULL;
    *has = true;
    if (v->type == jbvNull)
        return NULL;
    if (v->type == jbvString)
        return pnstrdup(v->val.string.val, v->val.string.len);
    Jsonb *scalar = JsonbValueToJsonb(v);
    return JsonbToCString(NULL, &scalar->root, VARSIZE(scalar));
}

PG_FUNCTION_INFO_V1(a2_batch);

Datum a2_batch(PG_FUNCTION_ARGS)
{
    ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
    if (!rsinfo || !IsA(rsinfo, ReturnSetInfo) ||
        !(rsinfo->allowedModes & SFRM_Materialize))
        ereport(ERROR,
                (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                 errmsg("a2_batch must be called where a set is accepted")));

    MemoryContext per_query = rsinfo->econtext->ecxt_per_query_memory;
    MemoryContext old = MemoryContextSwitchTo(per_query);
    TupleDesc desc = CreateTemplateTupleDesc(1);
    TupleDescInitEntry(desc, (AttrNumber)1, "a2_batch", JSONBOID, -1, 0);
    Tuplestorestate *store = tuplestore_begin_heap(true, false, work_mem);
    MemoryContextSwitchTo(old);
    rsinfo->returnMode = SFRM_Materialize;
    rsinfo->setResult = store;
    rsinfo->setDesc = desc;

    if (PG_ARGISNULL(0))
        return (Datum)0;
    ArrayType *statements = PG_GETARG_ARRAYTYPE_P(0);
    Datum params = PG_ARGISNULL(1) ? (Datum)0 : PG_GETARG_DATUM(1);
    char params_null = PG_ARGISNULL(1) ? 'n' : ' ';

    Datum *texts;
    bool *text_nulls;
    int n;
    deconstruct_array(statements, TEXTOID, -1, false, TYPALIGN_INT, &texts,
                      &text_nulls, &n);

    if (SPI_connect() != SPI_OK_CONNECT)
        elog(ERROR, "a2_batch: SPI_connect failed");
    Oid argtypes[1] = {JSONBOID};
    bool stopping = false;
    for (int i = 0; i < n && !stopping; i++) {
        if (text_nulls[i])
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("a2_batch: statement %d is null", i + 1)));
        char *sql = TextDatumGetCString(texts[i]);
        SPIPlanPtr plan = plan_for(sql);
        int rc = plan ? SPI_execute_plan(plan, &params, &params_null, false, 0)
                      : SPI_execute_with_args(sql, 1, argtypes, &params,
                                              &params_null, false, 0);
        if (rc < 0)
            elog(ERROR, "a2_batch: statement %d failed: %s", i + 1,
                 SPI_result_code_string(rc));
        SPITupleTable *tt = SPI_tuptable;
        if (tt) {
            if (tt->tupdesc->natts < 1 ||
                SPI_gettypeid(tt->tupdesc, 1) != JSONBOID)
                ereport(ERROR, (errcode(ERRCODE_DATATYPE_MISMATCH),
                                errmsg("a2_batch: statement %d does not return "
                                       "jsonb rows",
                                       i + 1)));
            for (uint64 k = 0; k < SPI_processed; k++) {
                bool isnull;
                Datum d = SPI_getbinval(tt->vals[k], tt->tupdesc, 1, &isnull);
                if (!isnull) {
                    Jsonb *jb = DatumGetJsonbP(d);
                    d = JsonbPGetDatum(jb);
                    bool has;
                    char *why = key_text(jb, "abort", &has);
                    if (has)
                        ereport(ERROR,
                                (errcode(A2_BATCH_ABORT),
                                 errmsg("a2 batch aborted: %s",
                                        why ? why : "abort"),
                                 errdetail_internal(
                                         "%s", JsonbToCString(NULL, &jb->root,
                                                              VARSIZE(jb)))));
                    key_text(jb, "stop", &has);
                    if (has)
                        stopping = true;
                }
                tuplestore_putvalues(store, desc, &d, &isnull);
            }
            SPI_freetuptable(tt);
        }
        pfree(sql);
    }
    SPI_finish();
    return (Datum)0;
}
