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

#include <stddef.h>
#include <stdint.h>

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
 * so far (nothing when clean or when one is already running) and, when
 * state_interval_ms passed since the state file was last written (0 =
 * always), to write the state file at the position it made durable. Poll
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

/* Parses "X/Y" into *lsn; returns 0 or -1. */
int a2__lsn_parse(const char *s, uint64_t *lsn);

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
