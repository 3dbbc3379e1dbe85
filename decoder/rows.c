/*
 * The a2 tables' columns: the spec of every column (name, type, nullable,
 * key, where it lives in the row struct), the scanning of a message's
 * "columns" and "identity" arrays into entries, and the mapping of those
 * entries onto a typed row with its `present` mask.
 */
#include "decoder_int.h"

/* ---- column specs of the a2 tables ---- */

enum kind { K_TEXT, K_JSONB, K_I64, K_I32, K_BOOL };
#define F_NULL 1u /* nullable: the field is a2_change_int / NULL text */
#define F_KEY  2u /* primary-key column: always in identity */

typedef struct colspec {
    const char *name;
    size_t len;
    unsigned char kind;
    unsigned char flags;
    size_t off;
} colspec;

#define COL(type, field, k, f)                                                 \
    {                                                                          \
#field, sizeof(#field) - 1, k, f, offsetof(type, field)                \
    }

static const colspec event_cols[A2_EVENT_NCOLS] = {
        COL(a2_event_row, session_id, K_TEXT, F_KEY),
        COL(a2_event_row, idx, K_I64, F_KEY),
        COL(a2_event_row, event_type, K_TEXT, 0),
        COL(a2_event_row, payload, K_JSONB, 0),
        COL(a2_event_row, event_id, K_TEXT, 0),
        COL(a2_event_row, created_at, K_I64, 0),
        COL(a2_event_row, cause, K_JSONB, F_NULL),
};

static const colspec cursor_cols[A2_CURSOR_NCOLS] = {
        COL(a2_cursor_row, session_id, K_TEXT, F_KEY),
        COL(a2_cursor_row, consumer, K_TEXT, F_KEY),
        COL(a2_cursor_row, cursor_key, K_TEXT, F_KEY),
        COL(a2_cursor_row, epoch, K_I64, F_KEY),
        COL(a2_cursor_row, kind, K_TEXT, 0),
        COL(a2_cursor_row, lane, K_TEXT, F_NULL),
        COL(a2_cursor_row, position, K_I64, 0),
        COL(a2_cursor_row, head, K_I64, F_NULL),
        COL(a2_cursor_row, types, K_JSONB, F_NULL),
        COL(a2_cursor_row, attempt_count, K_I32, 0),
        COL(a2_cursor_row, first_claimed_at, K_I64, F_NULL),
        COL(a2_cursor_row, last_claimed_at, K_I64, F_NULL),
        COL(a2_cursor_row, claim_holder, K_TEXT, F_NULL),
        COL(a2_cursor_row, claim_expires_at, K_I64, F_NULL),
        COL(a2_cursor_row, failure_count, K_I32, 0),
        COL(a2_cursor_row, last_failed_at, K_I64, F_NULL),
        COL(a2_cursor_row, last_failed_attempt, K_I32, F_NULL),
        COL(a2_cursor_row, last_error, K_TEXT, F_NULL),
        COL(a2_cursor_row, failed_at, K_I64, F_NULL),
        COL(a2_cursor_row, completed_idx, K_I64, F_NULL),
        COL(a2_cursor_row, completed_attempt, K_I32, F_NULL),
        COL(a2_cursor_row, returned_event_ids, K_JSONB, F_NULL),
};

static const colspec clear_cols[A2_CLEAR_NCOLS] = {
        COL(a2_clear_row, session_id, K_TEXT, F_KEY),
        COL(a2_clear_row, clear_index, K_I64, 0),
};

static const colspec lane_event_cols[A2_LANE_EVENT_NCOLS] = {
        COL(a2_lane_event_row, session_id, K_TEXT, F_KEY),
        COL(a2_lane_event_row, consumer, K_TEXT, F_KEY),
        COL(a2_lane_event_row, lane, K_TEXT, F_KEY),
        COL(a2_lane_event_row, idx, K_I64, F_KEY),
        COL(a2_lane_event_row, done, K_BOOL, 0),
        COL(a2_lane_event_row, completed_attempt, K_I32, F_NULL),
        COL(a2_lane_event_row, returned_event_ids, K_JSONB, F_NULL),
};

static const colspec presence_cols[A2_PRESENCE_NCOLS] = {
        COL(a2_presence_row, ns, K_TEXT, F_KEY),
        COL(a2_presence_row, participant, K_TEXT, F_KEY),
        COL(a2_presence_row, field, K_TEXT, F_KEY),
        COL(a2_presence_row, value, K_JSONB, 0),
        COL(a2_presence_row, seen, K_I64, F_NULL),
        COL(a2_presence_row, at, K_I64, 0),
        COL(a2_presence_row, expires_at, K_I64, 0),
};

typedef struct tablespec {
    const char *name;
    size_t len;
    const colspec *cols;
    size_t ncols;
    bool full_identity; /* REPLICA IDENTITY FULL: old rows are complete */
} tablespec;

/* Indexed by a2_table. */
static const tablespec tables[] = {
        [A2_TABLE_NONE] = {"", 0, NULL, 0, false},
        [A2_TABLE_EVENTS] = {"a2_events", 9, event_cols, A2_EVENT_NCOLS, false},
        [A2_TABLE_CURSORS] = {"a2_cursors", 10, cursor_cols, A2_CURSOR_NCOLS,
                              true},
        [A2_TABLE_CLEARS] = {"a2_clears", 9, clear_cols, A2_CLEAR_NCOLS, false},
        [A2_TABLE_LANE_EVENTS] = {"a2_lane_events", 14, lane_event_cols,
                                  A2_LANE_EVENT_NCOLS, false},
        [A2_TABLE_PRESENCE] = {"a2_presence", 11, presence_cols,
                               A2_PRESENCE_NCOLS, false},
        [A2_TABLE_OTHER] = {"", 0, NULL, 0, false},
};

/* ---- "columns" and "identity" arrays ---- */

/* The JSON type of an entry's value (a2__decoder_centry.vt). */
enum vtype { V_NULL, V_BOOL, V_NUM, V_STR, V_OTHER };

static bool key_is(const a2_change_text *k, const char *lit)
{
    size_t n = strlen(lit);
    return k->len == n && memcmp(k->ptr, lit, n) == 0;
}

/* Scans a column's value (any JSON value) into ce. */
static int scan_cvalue(a2__decoder_scan *s, a2__decoder_centry *ce)
{
    ce->voff = a2__decoder_off(s);
    if (s->p >= s->end)
        return a2__decoder_fail(&s->d->err, A2_EDEC_SYNTAX, a2__decoder_off(s),
                                "unexpected end of line, expected a value");
    switch (*s->p) {
    case '"':
        ce->vt = V_STR;
        return a2__decoder_scan_string(s, &ce->s, true);
    case 'n':
        ce->vt = V_NULL;
        return a2__decoder_scan_literal(s, "null", 4);
    case 't':
        ce->vt = V_BOOL;
        ce->b = true;
        return a2__decoder_scan_literal(s, "true", 4);
    case 'f':
        ce->vt = V_BOOL;
        ce->b = false;
        return a2__decoder_scan_literal(s, "false", 5);
    case '{':
    case '[':
        ce->vt = V_OTHER;
        return a2__decoder_skip_value(s, 3);
    default:
        ce->vt = V_NUM;
        return a2__decoder_scan_number(s, &ce->s, &ce->num_int, &ce->iv,
                                       &ce->fits);
    }
}

/* One column object {"name":..,"type":..,"value":..}; depth 3. */
static int scan_column(a2__decoder_scan *s, a2__decoder_centry *ce)
{
    a2_change_text key;
    bool have_name = false, have_value = false;
    size_t start = a2__decoder_off(s);
    int r;

    ce->name.ptr = NULL;
    ce->name.len = 0;
    if (a2__decoder_expect(s, '{', "'{' (a column)") < 0)
        return s->d->err.code;
    if (a2__decoder_closes(s, '}'))
        goto done;
    do {
        size_t koff;
        int kid;
        a2__decoder_skip_ws(s);
        koff = a2__decoder_off(s);
        /* wal2json's own keys, as it writes them, without unescaping. */
        if (a2__decoder_starts(s, "\"name\":", 7)) {
            kid = 1;
        } else if (a2__decoder_starts(s, "\"value\":", 8)) {
            kid = 2;
        } else if (a2__decoder_starts(s, "\"type\":\"", 8)) {
            s->p--; /* the type's opening quote */
            kid = 0;
        } else {
            if (a2__decoder_scan_key(s, &key) < 0)
                return s->d->err.code;
            kid = key_is(&key, "name") ? 1 : key_is(&key, "value") ? 2 : 0;
        }
        a2__decoder_skip_ws(s);
        if (kid == 1) {
            if (have_name)
                return a2__decoder_fail(&s->d->err, A2_EDEC_VALUE, koff,
                                        "duplicate key \"name\"");
            if (s->p >= s->end || *s->p != '"')
                return a2__decoder_wrong_type(
                        s, 3, a2__decoder_off(s),
                        "column \"name\": expected a string");
            if (a2__decoder_scan_string(s, &ce->name, true) < 0)
                return s->d->err.code;
            have_name = true;
        } else if (kid == 2) {
            if (have_value)
                return a2__decoder_fail(&s->d->err, A2_EDEC_VALUE, koff,
                                        "duplicate key \"value\"");
            have_value = true;
            if (scan_cvalue(s, ce) < 0)
                return s->d->err.code;
        } else if (a2__decoder_skip_value(s, 3) < 0) {
            return s->d->err.code;
        }
    } while ((r = a2__decoder_next_member(s, '}')) == 1);
    if (r < 0)
        return r;
done:
    if (!have_name)
        return a2__decoder_fail(&s->d->err, A2_EDEC_MISSING, start,
                                "column without \"name\"");
    if (!have_value)
        return a2__decoder_fail(&s->d->err, A2_EDEC_MISSING, start,
                                "column \"%.*s\" without \"value\"",
                                (int)(ce->name.len > 64 ? 64 : ce->name.len),
                                ce->name.ptr);
    return 0;
}

/*
 * The column exactly as wal2json writes it, {"name":"..","type":"..",
 * "value":..} or, with include-types off, {"name":"..","value":..}, with
 * plain (unescaped ASCII) name and type. Returns 1 when it matched, 0 to
 * take the generic path from the same place, or an error.
 */
static int scan_column_fast(a2__decoder_scan *s, a2__decoder_centry *ce)
{
    const unsigned char *start = s->p, *p, *q;
    size_t used = s->d->used;
    if (!a2__decoder_starts(s, "{\"name\":\"", 9))
        return 0;
    p = s->p;
    q = a2__decoder_plain_run(p, s->end);
    if (q >= s->end || *q != '"')
        goto generic;
    ce->name.ptr = (const char *)p;
    ce->name.len = (size_t)(q - p);
    s->p = q + 1;
    if (a2__decoder_starts(s, ",\"type\":\"", 9)) {
        q = a2__decoder_plain_run(s->p, s->end);
        if (q >= s->end || *q != '"')
            goto generic;
        s->p = q + 1;
    }
    if (!a2__decoder_starts(s, ",\"value\":", 9))
        goto generic;
    if (scan_cvalue(s, ce) < 0)
        return s->d->err.code;
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 1;
    }
generic:
    /* Give back what the value kept: the generic path scans it again, and
     * the arena's bound (its use never passes the bytes scanned) needs each
     * string kept once. */
    s->p = start;
    s->d->used = used;
    memset(ce, 0, sizeof *ce);
    return 0;
}

int a2__decoder_scan_columns(a2__decoder_scan *s, a2__decoder_colarray *ca,
                             const char *what)
{
    int r;
    ca->off = a2__decoder_off(s);
    ca->n = 0;
    ca->seen = true;
    if (s->p >= s->end || *s->p != '[')
        return a2__decoder_wrong_type(s, 1, ca->off,
                                      "\"%s\": expected an array", what);
    s->p++;
    if (a2__decoder_closes(s, ']'))
        return 0;
    do {
        if (ca->n >= A2_DECODER_MAX_COLUMNS)
            return a2__decoder_fail(&s->d->err, A2_EDEC_VALUE,
                                    a2__decoder_off(s),
                                    "\"%s\": more than %d columns", what,
                                    A2_DECODER_MAX_COLUMNS);
        a2__decoder_centry *ce =
                &ca->e[ca->n]; /* every field is set before it is read */
        a2__decoder_skip_ws(s);
        int fast = scan_column_fast(s, ce);
        if (fast < 0 || (fast == 0 && scan_column(s, ce) < 0))
            return s->d->err.code;
        ca->n++;
    } while ((r = a2__decoder_next_member(s, ']')) == 1);
    return r;
}

/* ---- entries -> rows ---- */

static bool col_named(const colspec *c, const a2_change_text *name)
{
    return c->len == name->len &&
           a2__decoder_same_bytes(c->name, name->ptr, name->len);
}

/* The spec index of column `name`; wal2json sends columns in table order,
 * so the one after the previous match (*guess) is tried first. */
static int find_col(const tablespec *t, const a2_change_text *name,
                    size_t *guess)
{
    size_t g = *guess;
    if (g < t->ncols && col_named(&t->cols[g], name)) {
        *guess = g + 1;
        return (int)g;
    }
    for (size_t i = 0; i < t->ncols; i++)
        if (col_named(&t->cols[i], name)) {
            *guess = i + 1;
            return (int)i;
        }
    return -1;
}

/* Maps each known column to its entry in ca (-1 when absent), once. */
static int index_cols(a2_decoder *d, const tablespec *t,
                      a2__decoder_colarray *ca)
{
    int *map = ca->map;
    size_t guess = 0;
    if (ca->indexed)
        return 0;
    ca->indexed = true;
    for (size_t i = 0; i < t->ncols; i++)
        map[i] = -1;
    for (size_t k = 0; k < ca->n; k++) {
        int c = find_col(t, &ca->e[k].name, &guess);
        if (c < 0)
            continue; /* a column a2 does not know: skipped */
        if (map[c] >= 0)
            return a2__decoder_fail(&d->err, A2_EDEC_VALUE, ca->e[k].voff,
                                    "duplicate column \"%s\" in %s",
                                    t->cols[c].name, t->name);
        map[c] = (int)k;
    }
    return 0;
}

static int set_field(a2_decoder *d, const tablespec *t, const colspec *c,
                     const a2__decoder_centry *ce, a2_row *row)
{
    char *field = (char *)row + c->off;
    bool nullable = c->flags & F_NULL;

    if (ce->vt == V_NULL) {
        if (!nullable)
            return a2__decoder_fail(
                    &d->err, A2_EDEC_TYPE, ce->voff,
                    "column \"%s\" of %s: null in a not-null column", c->name,
                    t->name);
        if (c->kind == K_TEXT || c->kind == K_JSONB) {
            a2_change_text nul = {NULL, 0};
            memcpy(field, &nul, sizeof nul);
        } else {
            a2_change_int nul = {0, true};
            memcpy(field, &nul, sizeof nul);
        }
        return 0;
    }
    switch (c->kind) {
    case K_TEXT:
    case K_JSONB:
        if (ce->vt != V_STR)
            return a2__decoder_fail(&d->err, A2_EDEC_TYPE, ce->voff,
                                    "column \"%s\" of %s: expected a string",
                                    c->name, t->name);
        memcpy(field, &ce->s, sizeof ce->s);
        return 0;
    case K_I64:
    case K_I32: {
        int64_t v;
        if (ce->vt != V_NUM || !ce->num_int)
            return a2__decoder_fail(&d->err, A2_EDEC_TYPE, ce->voff,
                                    "column \"%s\" of %s: expected an integer",
                                    c->name, t->name);
        v = ce->iv;
        if (!ce->fits || (c->kind == K_I32 && (v < INT32_MIN || v > INT32_MAX)))
            return a2__decoder_fail(
                    &d->err, A2_EDEC_RANGE, ce->voff,
                    "column \"%s\" of %s: %.*s is out of range for %s", c->name,
                    t->name, (int)(ce->s.len > 40 ? 40 : ce->s.len), ce->s.ptr,
                    c->kind == K_I32 ? "integer" : "bigint");
        if (nullable) {
            a2_change_int iv = {v, false};
            memcpy(field, &iv, sizeof iv);
        } else {
            memcpy(field, &v, sizeof v);
        }
        return 0;
    }
    default: /* K_BOOL */
        if (ce->vt != V_BOOL)
            return a2__decoder_fail(&d->err, A2_EDEC_TYPE, ce->voff,
                                    "column \"%s\" of %s: expected a boolean",
                                    c->name, t->name);
        memcpy(field, &ce->b, sizeof ce->b);
        return 0;
    }
}

int a2__decoder_fill_row(a2_decoder *d, a2_table table, a2_row *row,
                         a2__decoder_colarray *prim, a2__decoder_colarray *fb,
                         a2__decoder_rowmode mode)
{
    const tablespec *t = &tables[table];
    const int *pmap = prim->map, *fmap = fb ? fb->map : NULL;
    uint32_t present = 0;

    memset(row, 0, sizeof *row);
    if (index_cols(d, t, prim) < 0)
        return d->err.code;
    if (fb && index_cols(d, t, fb) < 0)
        return d->err.code;
    for (size_t i = 0; i < t->ncols; i++) {
        const colspec *c = &t->cols[i];
        const a2__decoder_centry *ce = NULL;
        if (pmap[i] >= 0)
            ce = &prim->e[pmap[i]];
        else if (fb && fmap[i] >= 0)
            ce = &fb->e[fmap[i]];
        if (!ce) {
            bool required;
            if (mode == A2__DECODER_ROW_INSERT)
                required = true;
            else if (mode == A2__DECODER_ROW_NEW)
                required = (c->flags & F_KEY) ||
                           (c->kind != K_TEXT && c->kind != K_JSONB);
            else
                required = (c->flags & F_KEY) || t->full_identity;
            if (required)
                return a2__decoder_fail(&d->err, A2_EDEC_MISSING, prim->off,
                                        "%s of %s: column \"%s\" is missing",
                                        mode == A2__DECODER_ROW_OLD ? "identity"
                                                                    : "columns",
                                        t->name, c->name);
            continue;
        }
        if (set_field(d, t, c, ce, row) < 0)
            return d->err.code;
        present |= 1u << i;
    }
    /* present is the first member of every row struct. */
    memcpy(row, &present, sizeof present);
    return 0;
}

a2_table a2__decoder_table_of(const a2_change *c)
{
    if (c->schema.ptr &&
        !(c->schema.len == 6 && memcmp(c->schema.ptr, "public", 6) == 0))
        return A2_TABLE_OTHER;
    for (int t = A2_TABLE_EVENTS; t < A2_TABLE_OTHER; t++)
        if (tables[t].len == c->table_name.len &&
            memcmp(tables[t].name, c->table_name.ptr, c->table_name.len) == 0)
            return (a2_table)t;
    return A2_TABLE_OTHER;
}

void a2__decoder_visit_row(a2_table table, a2_row *row, a2__decoder_text_fn fn,
                           void *arg)
{
    const tablespec *t = &tables[table];
    for (size_t i = 0; i < t->ncols; i++)
        if (t->cols[i].kind == K_TEXT || t->cols[i].kind == K_JSONB)
            fn((a2_change_text *)(void *)((char *)row + t->cols[i].off), arg);
}

const char *a2_table_name(a2_table t)
{
    if (t < A2_TABLE_NONE || t > A2_TABLE_OTHER)
        return "";
    return tables[t].name;
}
