/*
 * a2 decoder: wal2json format-version 2 lines -> typed change records, and
 * the cursor-transition classifier. Part of liba2decoder.
 *
 * Pure code, no I/O: the caller hands over the bytes of one wal2json message
 * (the payload of one XLogData; JSON whitespace around the object, such as
 * the '\n' pg_recvlogical adds, is accepted) and gets back one a2_change, or
 * an error with the byte offset and the reason. The whole line is validated
 * (grammar, UTF-8, nesting, limits) even where it is skipped. The stream
 * this expects is wal2json 2.5 started with "format-version" '2',
 * "include-xids" '1', "include-timestamp" '1', "include-lsn" '1'
 * (include-transaction on) and "add-tables" naming the a2 tables; optional
 * keys (types, typeoids, positions, pk, origin) and columns a2 does not know
 * are accepted and skipped.
 *
 * Memory: a decoded change and every string it points to live in the
 * decoder's arena. They stay valid until the next a2_decoder_decode or
 * a2_decoder_reset on the same decoder, then they are gone. To keep a change
 * longer (the consumer buffers a transaction's changes until its C), copy it
 * with a2_change_dup, which makes one self-contained heap block, and free
 * that with a2_change_free.
 *
 * Strings: a2_change_text is a pointer and a length. ptr == NULL means SQL
 * NULL (or an absent optional key). Otherwise ptr[len] == '\0', the bytes are
 * valid UTF-8 and hold no NUL (PostgreSQL text cannot hold one), so ptr can
 * be used as a C string. JSON escapes are already undone.
 *
 * jsonb columns: wal2json sends a jsonb value as a JSON string holding
 * PostgreSQL's text of the value ("{\"a\": 1}", "null", "\"str\""). The
 * decoder hands that text out unparsed (an a2_change_text); parse it on
 * request with a2_decoder_parse_jsonb.
 *
 * Thread safety: a decoder is used by one thread at a time; separate
 * decoders are independent. The classifier functions are pure.
 */
#ifndef A2_DECODER_H
#define A2_DECODER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_t; /* jansson's json_t, only for a2_decoder_parse_jsonb */

/* ---- limits (hard; input past them is an error, never an allocation) ---- */

/* Longest line a2_decoder_decode accepts, in bytes (default and maximum of
 * a2_decoder_set_max_line). */
#define A2_DECODER_MAX_LINE        ((size_t)64 * 1024 * 1024)
/* Deepest nesting of arrays/objects in a line (wal2json needs 3). */
#define A2_DECODER_MAX_DEPTH       8
/* Most columns in one "columns" or "identity" array. */
#define A2_DECODER_MAX_COLUMNS     256
/* Deepest nesting a2_decoder_parse_jsonb accepts in a jsonb value. */
#define A2_DECODER_MAX_JSONB_DEPTH 64

/* ---- error codes: 0 is success, every error is negative ---- */

#define A2_EDEC_NOMEM   (-1) /* out of memory */
#define A2_EDEC_ARG     (-2) /* NULL decoder/line, or another bad argument */
#define A2_EDEC_TOOLONG (-3) /* line longer than the decoder's max line */
#define A2_EDEC_SYNTAX  (-4) /* not JSON: truncated, stray byte, bad escape */
#define A2_EDEC_UTF8                                                           \
    (-5) /* invalid UTF-8 (or \u escape of a NUL/lone surrogate) */
#define A2_EDEC_DEPTH   (-6) /* nesting deeper than the limit */
#define A2_EDEC_TYPE    (-7) /* a key or column holds the wrong JSON type */
#define A2_EDEC_RANGE   (-8) /* a number out of range for its column */
#define A2_EDEC_MISSING (-9) /* a required key or column is missing */
#define A2_EDEC_VALUE                                                          \
    (-10) /* well-typed but invalid: unknown action, bad LSN,                  \
           * bad timestamp, duplicate key or column, too many                  \
           * columns */

/* Details of the last failure of a decoder (or of a2_decoder_parse_jsonb). */
typedef struct a2_decoder_error {
    int code;          /* an A2_EDEC_* code, 0 after a success */
    size_t offset;     /* byte offset in the line where the problem was found */
    char message[160]; /* one line, lower case, no trailing period, e.g.
                        * "column \"idx\" of a2_events: expected a number" */
} a2_decoder_error;

/* ---- values ---- */

/* A string value; ptr == NULL for SQL NULL. See "Strings" above. */
typedef struct a2_change_text {
    const char *ptr;
    size_t len;
} a2_change_text;

/* A nullable integer column. */
typedef struct a2_change_int {
    int64_t value; /* 0 when null */
    bool null;
} a2_change_int;

/* ---- rows of the a2 tables (sql/schema.sql) ----
 *
 * Column indices double as bits of a row's `present` mask: bit
 * (1u << A2_EVENT_PAYLOAD) is set when the payload value is known. For an
 * insert every column is known (a missing one is an error). For an update's
 * new row, a column missing from "columns" (an unchanged TOASTed value) is
 * taken from "identity"; when identity lacks it too (replica identity
 * DEFAULT), its bit is clear and the field is NULL/0 (value unknown, but
 * unchanged). Only text and jsonb columns may be absent that way; the key
 * columns are always required. An old row (update or delete "identity") of a
 * table with REPLICA IDENTITY DEFAULT holds only the key columns; a2_cursors
 * is FULL, so its old rows are complete and every column is required.
 */

enum {
    A2_EVENT_SESSION_ID,
    A2_EVENT_IDX,
    A2_EVENT_EVENT_TYPE,
    A2_EVENT_PAYLOAD,
    A2_EVENT_EVENT_ID,
    A2_EVENT_CREATED_AT,
    A2_EVENT_CAUSE,
    A2_EVENT_NCOLS
};

typedef struct a2_event_row {
    uint32_t present;
    a2_change_text session_id;
    int64_t idx;
    a2_change_text event_type;
    a2_change_text payload; /* jsonb text ("null" for a JSON null) */
    a2_change_text event_id;
    int64_t created_at;
    a2_change_text cause; /* jsonb text, or SQL NULL */
} a2_event_row;

enum {
    A2_CURSOR_SESSION_ID,
    A2_CURSOR_CONSUMER,
    A2_CURSOR_CURSOR_KEY,
    A2_CURSOR_EPOCH,
    A2_CURSOR_KIND,
    A2_CURSOR_LANE,
    A2_CURSOR_POSITION,
    A2_CURSOR_HEAD,
    A2_CURSOR_TYPES,
    A2_CURSOR_ATTEMPT_COUNT,
    A2_CURSOR_FIRST_CLAIMED_AT,
    A2_CURSOR_LAST_CLAIMED_AT,
    A2_CURSOR_CLAIM_HOLDER,
    A2_CURSOR_CLAIM_EXPIRES_AT,
    A2_CURSOR_FAILURE_COUNT,
    A2_CURSOR_LAST_FAILED_AT,
    A2_CURSOR_LAST_FAILED_ATTEMPT,
    A2_CURSOR_LAST_ERROR,
    A2_CURSOR_FAILED_AT,
    A2_CURSOR_COMPLETED_IDX,
    A2_CURSOR_COMPLETED_ATTEMPT,
    A2_CURSOR_RETURNED_EVENT_IDS,
    A2_CURSOR_NCOLS
};

typedef struct a2_cursor_row {
    uint32_t present;
    a2_change_text session_id;
    a2_change_text consumer;
    a2_change_text cursor_key;
    int64_t epoch;
    a2_change_text kind; /* "event", "lane" or "log" */
    a2_change_text lane;
    int64_t position;
    a2_change_int head;
    a2_change_text types;  /* jsonb text or NULL */
    int64_t attempt_count; /* integer column: within int32 */
    a2_change_int first_claimed_at;
    a2_change_int last_claimed_at;
    a2_change_text claim_holder;
    a2_change_int claim_expires_at;
    int64_t failure_count; /* integer column */
    a2_change_int last_failed_at;
    a2_change_int last_failed_attempt; /* integer column */
    a2_change_text last_error;
    a2_change_int failed_at;
    a2_change_int completed_idx;
    a2_change_int completed_attempt;   /* integer column */
    a2_change_text returned_event_ids; /* jsonb text or NULL */
} a2_cursor_row;

enum { A2_CLEAR_SESSION_ID, A2_CLEAR_CLEAR_INDEX, A2_CLEAR_NCOLS };

typedef struct a2_clear_row {
    uint32_t present;
    a2_change_text session_id;
    int64_t clear_index;
} a2_clear_row;

enum {
    A2_LANE_EVENT_SESSION_ID,
    A2_LANE_EVENT_CONSUMER,
    A2_LANE_EVENT_LANE,
    A2_LANE_EVENT_IDX,
    A2_LANE_EVENT_DONE,
    A2_LANE_EVENT_COMPLETED_ATTEMPT,
    A2_LANE_EVENT_RETURNED_EVENT_IDS,
    A2_LANE_EVENT_NCOLS
};

typedef struct a2_lane_event_row {
    uint32_t present;
    a2_change_text session_id;
    a2_change_text consumer;
    a2_change_text lane;
    int64_t idx;
    bool done;
    a2_change_int completed_attempt;   /* integer column */
    a2_change_text returned_event_ids; /* jsonb text or NULL */
} a2_lane_event_row;

enum {
    A2_PRESENCE_NS,
    A2_PRESENCE_PARTICIPANT,
    A2_PRESENCE_FIELD,
    A2_PRESENCE_VALUE,
    A2_PRESENCE_SEEN,
    A2_PRESENCE_AT,
    A2_PRESENCE_EXPIRES_AT,
    A2_PRESENCE_NCOLS
};

typedef struct a2_presence_row {
    uint32_t present;
    a2_change_text ns;
    a2_change_text participant;
    a2_change_text field;
    a2_change_text value; /* jsonb text; "null" is a tombstone */
    a2_change_int seen;
    int64_t at;
    int64_t expires_at;
} a2_presence_row;

/* Which table a change is about. */
typedef enum a2_table {
    A2_TABLE_NONE = 0, /* B, C, M: no table */
    A2_TABLE_EVENTS,
    A2_TABLE_CURSORS,
    A2_TABLE_CLEARS,
    A2_TABLE_LANE_EVENTS,
    A2_TABLE_PRESENCE,
    A2_TABLE_OTHER /* any other table: names set, rows not decoded */
} a2_table;

/* One row; the change's `table` says which member is valid. */
typedef union a2_row {
    a2_event_row event;
    a2_cursor_row cursor;
    a2_clear_row clear;
    a2_lane_event_row lane_event;
    a2_presence_row presence;
} a2_row;

typedef enum a2_action {
    A2_ACTION_BEGIN = 'B',
    A2_ACTION_COMMIT = 'C',
    A2_ACTION_INSERT = 'I',
    A2_ACTION_UPDATE = 'U',
    A2_ACTION_DELETE = 'D',
    A2_ACTION_MESSAGE = 'M',
    A2_ACTION_TRUNCATE = 'T'
} a2_action;

/* One decoded wal2json message. */
typedef struct a2_change {
    a2_action action;

    /* "xid": null when absent or JSON null (non-transactional M). */
    a2_change_int xid;
    /* "timestamp": commit time text as sent, and parsed to microseconds
     * since the Unix epoch (UTC) when has_time. */
    a2_change_text timestamp;
    bool has_time;
    int64_t time_us;
    /* "lsn" (B/C: the commit record; I/U/D/T/M: the change) and "nextlsn"
     * (B/C only: end of the commit record, the resume point). */
    bool has_lsn;
    uint64_t lsn;
    bool has_nextlsn;
    uint64_t nextlsn;

    /* I, U, D, T: the table. schema is NULL when wal2json omits it; an a2
     * table is recognised only in schema "public" (or with no schema). */
    a2_table table;
    a2_change_text schema;
    a2_change_text table_name;
    /* The row after the change (I, U) and before it (U, D: from
     * "identity"); NULL when absent or when table is OTHER/NONE. */
    const a2_row *new_row;
    const a2_row *old_row;

    /* M only. */
    bool transactional;
    a2_change_text prefix;
    a2_change_text content;
} a2_change;

/* ---- the decoder ---- */

typedef struct a2_decoder a2_decoder;

/* A new decoder, or NULL when out of memory. Free with a2_decoder_free. */
a2_decoder *a2_decoder_new(void);

/* Frees the decoder and its arena (NULL is fine). Changes it returned are
 * gone; a2_change_dup copies are not affected. */
void a2_decoder_free(a2_decoder *d);

/*
 * Sets the longest line the decoder accepts (clamped to 1 ..
 * A2_DECODER_MAX_LINE, the default).
 */
void a2_decoder_set_max_line(a2_decoder *d, size_t max_line);

/*
 * Decodes one wal2json line of len bytes (need not be NUL-terminated).
 * Returns 0 and sets *out to a change borrowed from the decoder (valid until
 * the next decode or reset), or a negative A2_EDEC_* code with *out = NULL
 * and the details in a2_decoder_last_error. A failure loses nothing: the
 * decoder is ready for the next line. Never reads past line + len; the
 * memory it takes is bounded by a small multiple of len.
 */
__attribute__((warn_unused_result)) int
a2_decoder_decode(a2_decoder *d, const char *line, size_t len,
                  const a2_change **out);

/* Releases the arena now (a decoded change becomes invalid); the decoder
 * keeps a modest block for reuse. */
void a2_decoder_reset(a2_decoder *d);

/* The last error of d (code 0 after a success). Borrowed from d. */
const a2_decoder_error *a2_decoder_last_error(const a2_decoder *d);

/* A static, lower-case name of an A2_EDEC_* code ("syntax", "utf8", ...). */
const char *a2_decoder_strerror(int code);

/*
 * Parses jsonb text (a jsonb column's value) into a new jansson reference in
 * *out (caller json_decref's it). SQL NULL (v.ptr == NULL) gives *out = NULL
 * and 0. Integers are exact (json_int_t is 64-bit); nesting is bounded by
 * A2_DECODER_MAX_JSONB_DEPTH. On failure returns a negative A2_EDEC_* code,
 * *out = NULL, and fills *err when err is not NULL (offset within v).
 */
__attribute__((warn_unused_result)) int
a2_decoder_parse_jsonb(a2_change_text v, struct json_t **out,
                       a2_decoder_error *err);

/*
 * A deep copy of c in one heap block that owns all its strings and rows,
 * independent of the decoder; NULL when out of memory (or c is NULL). Free
 * it with a2_change_free.
 */
a2_change *a2_change_dup(const a2_change *c);

/* Frees a copy made by a2_change_dup (NULL is fine). Never pass a change
 * borrowed from a decoder. */
void a2_change_free(a2_change *c);

/* The name of an a2 table ("a2_events", ...), "" for NONE/OTHER. */
const char *a2_table_name(a2_table t);

/* ---- cursor transitions ---- */

typedef enum a2_transition {
    A2_TRANSITION_STARTED,       /* insert of a run */
    A2_TRANSITION_CLAIMED,       /* an unclaimed head claimed (attempt+1) */
    A2_TRANSITION_RENEWED,       /* the claim's lease moved, same attempt */
    A2_TRANSITION_TAKEN_OVER,    /* a lapsed claim re-claimed by a holder */
    A2_TRANSITION_COMPLETED,     /* head advanced to a next head */
    A2_TRANSITION_WENT_IDLE,     /* head completed, no next head (null) */
    A2_TRANSITION_FAILED,        /* attempt failed, held until retry time */
    A2_TRANSITION_DEAD_LETTERED, /* failed_at became set */
    A2_TRANSITION_RETRIED,       /* dead letter redriven (failed_at cleared) */
    A2_TRANSITION_SKIPPED,       /* dead head skipped: advanced past it */
    A2_TRANSITION_RETYPED,       /* a log cursor's types changed */
    A2_TRANSITION_RELEASED,      /* head dropped by a clear */
    A2_TRANSITION_RETIRED,       /* delete of an idle or superseded run */
    A2_TRANSITION_DELETED,       /* any other delete */
    A2_TRANSITION_CANCELLED,     /* a pending head cancelled (then skipped) */
    A2_TRANSITION_OTHER          /* a change no rule explains */
} a2_transition;

#define A2_TRANSITION_COUNT (A2_TRANSITION_OTHER + 1)

/*
 * Classifies one write to a2_cursors: before is the old row (NULL for an
 * insert), after the new row (NULL for a delete); both NULL gives OTHER.
 * Rows must be complete (as decoded from a2_cursors, REPLICA IDENTITY FULL).
 * Exhaustive: a change no rule explains is A2_TRANSITION_OTHER.
 */
a2_transition a2_transition_classify(const a2_cursor_row *before,
                                     const a2_cursor_row *after);

/*
 * a2_transition_classify knowing the session's clear marker (a2_clears
 * clear_index): a delete of a run whose head is at or below it is RETIRED
 * (superseded by the clear), as is the delete of an idle run (head null).
 * Without the marker, a delete of a run with a head is DELETED.
 */
a2_transition a2_transition_classify_cleared(const a2_cursor_row *before,
                                             const a2_cursor_row *after,
                                             int64_t clear_index);

/* a2_transition_classify on a decoded a2_cursors I/U/D; OTHER for any other
 * change. It knows no clear marker: a delete of a run superseded by a clear
 * (head at or below the marker; reclaim deletes those) comes out DELETED.
 * For deletes, call a2_transition_classify_cleared with the session's
 * clear_index (from the a2_clears rows in the stream, or read at start). */
a2_transition a2_change_transition(const a2_change *c);

/* The transition's name: "started", "claimed", ..., "other" (static). */
const char *a2_transition_name(a2_transition t);

#endif
