/*
 * The audit sink of a2-consumer: an append-only file of JSON lines, one per
 * a2_cursors change, in commit order, fsynced in groups, plus a small state
 * file beside it (PATH.lsn) holding the last commit LSN whose lines are all
 * durable.
 *
 * Resume. Every line carries "lsn": the end LSN of its transaction's commit
 * record (the position START_REPLICATION resumes after). On open, a torn last
 * line (a crash in the middle of a write) is cut off, and the tail is read:
 * L = the lsn of the last line, k = how many lines at the end carry L, and
 * L' = the lsn of the line before those. The transaction L may be incomplete
 * (a crash between its lines), so the daemon restarts streaming after
 * done = max(L', state file) and, when the transaction L arrives again, skips
 * its first k lines. Transactions ending at or before done are skipped whole.
 * Each transition is therefore written exactly once, whatever the crash
 * point. After a rotation (SIGHUP → a2__audit_reopen) the new file is empty
 * and the state file carries the position.
 */
#ifndef A2_CONSUMER_AUDIT_H
#define A2_CONSUMER_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/lsn.h"
#include "a2/decoder.h"

typedef struct a2__audit a2__audit;

/* Where to resume, from the file's tail and the state file. */
typedef struct {
    uint64_t done;          /* transactions ending at or before: all written */
    uint64_t partial_lsn;   /* 0, or the transaction whose first lines exist */
    size_t partial_lines;   /* how many of its lines exist */
    size_t truncated_bytes; /* bytes of a torn last line cut off on open */
} a2__audit_resume;

/*
 * Opens (creating, mode 0640) the audit file for appending, repairs a torn
 * tail and reads the resume point. Returns NULL with a one-line reason in err
 * ("could not open audit file \"x\": Permission denied").
 */
a2__audit *a2__audit_open(const char *path, a2__audit_resume *resume, char *err,
                          size_t errlen);

/* fsyncs what is pending, writes the state file, closes. NULL-safe. */
void a2__audit_close(a2__audit *a);

/*
 * Appends len bytes (whole lines). They are gathered in memory (up to 256 KiB)
 * and written by a2__audit_flush, which runs when the buffer is full and
 * before every fsync, rotation and close: a group of lines reaches the file
 * with one write(2) just before its fsync. Nothing durable depends on the
 * earlier write, since the flush position covers only fsynced lines. Returns
 * 0, or -1 with the reason in err when a write it had to do failed (the file
 * may then hold a torn line, which the next open repairs).
 */
__attribute__((warn_unused_result)) int
a2__audit_write(a2__audit *a, const char *buf, size_t len, size_t lines,
                char *err, size_t errlen);

/* Writes the gathered lines with one write(2). 0, or -1 with err. */
__attribute__((warn_unused_result)) int a2__audit_flush(a2__audit *a, char *err,
                                                        size_t errlen);

/* Records that every transaction ending at or before lsn is written. */
void a2__audit_mark(a2__audit *a, uint64_t lsn);

/* 1 when written lines await fsync. */
int a2__audit_dirty(const a2__audit *a);

/* Monotonic ms of the oldest write not yet fsynced (0 when clean). */
int64_t a2__audit_dirty_since(const a2__audit *a);

/* Lines written but not yet fsynced. */
size_t a2__audit_pending_lines(const a2__audit *a);

/*
 * fsyncs the file now (after any background fsync); afterwards everything
 * marked is durable. Writes the state
 * file when at least state_interval_ms passed since its last write (0 =
 * always). Returns 0 or -1 with the reason in err.
 */
__attribute__((warn_unused_result)) int
a2__audit_sync(a2__audit *a, int state_interval_ms, char *err, size_t errlen);

/*
 * Group fsync without waiting: asks a helper thread to fsync what is written
 * so far and, when state_interval_ms passed since the state file was last
 * written (0 = always) and it is behind, to write the state file at the
 * position it made durable. Nothing when one is already running, or when
 * nothing is written and the state file is not due. Poll
 * a2__audit_event_fd for readability, then call a2__audit_sync_finish, which
 * moves the durable LSN once the helper is done. Both return 0 or -1 with the
 * reason in err (a failed fsync or state file write is fatal: the lines'
 * durability is unknown).
 */
__attribute__((warn_unused_result)) int
a2__audit_sync_start(a2__audit *a, int state_interval_ms, char *err,
                     size_t errlen);
__attribute__((warn_unused_result)) int
a2__audit_sync_finish(a2__audit *a, char *err, size_t errlen);

/* The helper's eventfd, or -1 before the first a2__audit_sync_start. */
int a2__audit_event_fd(a2__audit *a);

/* 1 while a background fsync is outstanding. */
int a2__audit_busy(const a2__audit *a);

/* The last marked LSN that is durable. */
uint64_t a2__audit_durable(const a2__audit *a);

/*
 * What may be confirmed to the server: the durable LSN, but no further than
 * a restart will find the file to hold, the larger of the last durable
 * line's LSN and the state file's position. A position that moved with no
 * line (a keepalive, a transaction of other tables) is confirmed once the
 * state file says so: the syncs write it, at most every state interval,
 * even when no line is waiting (a2__audit_sync_start).
 */
uint64_t a2__audit_confirmable(const a2__audit *a);

/* Total lines written since open. */
uint64_t a2__audit_lines(const a2__audit *a);

/*
 * Syncs, writes the state file and reopens the path (after a rotation).
 * Returns 0 or -1 with the reason in err (the old file stays in use).
 */
__attribute__((warn_unused_result)) int
a2__audit_reopen(a2__audit *a, char *err, size_t errlen);

/*
 * Reads the tail of an audit file without changing it (for tests and the
 * daemon's open): the resume point the file and its state file give.
 * Returns 0, or -1 with the reason in err.
 */
int a2__audit_scan(const char *path, a2__audit_resume *resume, int repair,
                   char *err, size_t errlen);

/* ---- audit lines (audit_line.c) ----
 *
 * One line per a2_cursors change:
 *   {"lsn":"X/Y","xid":N,"at":"T","op":"update","transition":"claimed",
 *    "session":..,"consumer":..,"cursor":..,"epoch":..,"kind":..,
 *    "before":{row}|null,"after":{row}|null}
 * where a row is {"head","position","attempt","holder","expires_at",
 * "failures","failed_at","error"}; plus a "truncated" line for a TRUNCATE
 * of a2_cursors and a "gap" line for changes lost with a slot. "lsn" is the
 * transaction's commit end, "xid" and "at" (its commit time) are null when
 * unknown. */

/* The lines of one transaction, gathered in memory until they are written,
 * and the head they share (built once at its B). Zeroed: empty. */
typedef struct {
    char *buf;
    size_t len, cap;
    size_t lines;   /* whole lines in buf */
    uint64_t lsn;   /* the transaction's commit end */
    char xid[32];   /* its xid in decimal, "" when unknown */
    char at[40];    /* its commit time (a2__format_time_ms), "" when unknown */
    char head[128]; /* {"lsn":"X/Y","xid":N,"at":"T" */
    size_t head_len;
} a2__audit_text;

/* Starts the lines of a transaction ending at lsn: the head is built and
 * the buffer emptied. */
void a2__audit_text_begin(a2__audit_text *t, uint64_t lsn, a2_change_int xid,
                          bool has_time, int64_t time_us);

/* Empties the buffer (the head stays). */
void a2__audit_text_clear(a2__audit_text *t);

/* Frees the buffer; t is then empty. */
void a2__audit_text_free(a2__audit_text *t);

/* Appends the line of an a2_cursors insert, update or delete, named by its
 * transition. 0, or -1 when out of memory (nothing appended). */
__attribute__((warn_unused_result)) int
a2__audit_text_cursor(a2__audit_text *t, const a2_change *c,
                      const char *transition);

/* Appends the line of a TRUNCATE of a2_cursors. 0, or -1 when out of
 * memory. */
__attribute__((warn_unused_result)) int
a2__audit_text_truncate(a2__audit_text *t);

/* The gap record of changes lost between from and to (at: now_us, µs since
 * the Unix epoch) as one line ending in a newline, with its length in *len;
 * NULL when out of memory. The caller frees it. */
char *a2__audit_gap_line(uint64_t from, uint64_t to, const char *reason,
                         int64_t now_us, size_t *len);

/* Formats microseconds since the Unix epoch as RFC 3339 UTC with ms
 * ("2026-11-29T06:40:48.313Z") into buf (at least 32 bytes). */
char *a2__format_time_ms(int64_t us, char *buf, size_t len);

/* Formats lsn as "X/Y" into buf (at least 24 bytes); returns buf. */
char *a2__lsn_format(uint64_t lsn, char *buf, size_t len);

/* Writes v in base (10 or 16, upper case), zero-padded to width digits, at
 * out without a terminator; returns the digit count (at most 64). The audit
 * line heads are built with it instead of printf, once per transaction. */
size_t a2__put_uint(char *out, uint64_t v, unsigned base, int width);

/* Copies n bytes of text into buf (len bytes) as a string, cut to fit;
 * returns buf. */
char *a2__put_text(char *buf, size_t len, const char *text, size_t n);

#endif
