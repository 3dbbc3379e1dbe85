/*
 * The database side of a2-consumer: the startup checks, the normal
 * connection (the timer rebuild query, the /metrics WAL position), the
 * connection of the heartbeats and presence expiry ticks, the backlog
 * reads' connection, and the logical replication connection (slot,
 * START_REPLICATION, CopyBoth messages, standby status updates). Follows
 * pg_recvlogical's protocol handling.
 *
 * Errors come back as one line in err, PostgreSQL style; *sqlstate (when
 * asked for) gets the server's SQLSTATE ("" when none).
 */
#ifndef A2_CONSUMER_REPL_H
#define A2_CONSUMER_REPL_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

/* Tables streamed (wal2json add-tables). */
#define A2C_ADD_TABLES                                                         \
    "public.a2_events,public.a2_cursors,public.a2_lane_events,"                \
    "public.a2_clears,public.a2_presence"

/* Microseconds between the Unix and the PostgreSQL epoch (2000-01-01). */
#define A2C_PG_EPOCH_US INT64_C(946684800000000)

/* ---- normal connection ---- */

/* Connects with conninfo (NULL or "" = PG* variables) plus TimeZone=UTC
 * and a default connect_timeout. Returns NULL with the reason in err. */
PGconn *a2__db_connect(const char *conninfo, char *err, size_t errlen);
/* The same, named `name` in pg_stat_activity (application_name). */
PGconn *a2__db_connect_as(const char *conninfo, const char *name, char *err,
                          size_t errlen);

/* What a2__db_check found about the slot. */
typedef struct {
    int exists;
    int lost;           /* wal_status = 'lost': invalidated */
    uint64_t confirmed; /* confirmed_flush_lsn */
    int active_pid;     /* the process streaming from it, or 0 */
} a2__slot_info;

/*
 * The startup checks, each with its own error: wal_level=logical, the
 * REPLICATION attribute, the a2 tables, the slot's plugin, database and
 * whether another process streams from it. Returns 0 or -1.
 */
int a2__db_check(PGconn *db, const char *slot, const char *plugin,
                 a2__slot_info *info, char *err, size_t errlen);

/* How long a2__db_query waits for an answer (ms; 0, the default: for
 * ever). A query that times out leaves its connection broken, so the next
 * check of the connection opens a new one. */
void a2__db_set_timeout(int ms);

/* Runs sql (with nparams text params) on the normal connection; NULL with
 * "could not <what>: <the server's first line>" in err when it fails or
 * gets no answer in time. */
PGresult *a2__db_query(PGconn *db, const char *sql, int nparams,
                       const char *const *params, const char *what, char *err,
                       size_t errlen);

/*
 * What the consumer sends on its tick connection without waiting: the two
 * logical messages it emits, and a read of the server's WAL position; on a
 * connection of their own (db is made nonblocking): poll PQsocket(db) for
 * input (and for output while PQflush(db) says more is to be sent), then
 * call a2__db_result_poll. 0 or -1 with the reason in err.
 *
 * a2__db_heartbeat_send: pg_logical_emit_message(false, 'a2-hb', now), which
 * moves the slot on a quiet database.
 *
 * a2__db_expire_tick_send: the commit of the presence expiry tick of time
 * now_ms (apply.h), a transactional logical message, so that it comes back
 * through the stream after every change committed before it.
 */
int a2__db_heartbeat_send(PGconn *db, char *err, size_t errlen);
int a2__db_expire_tick_send(PGconn *db, const char *secret, int64_t now_ms,
                            char *err, size_t errlen);
/* pg_current_wal_lsn(), for the lag metric: its value comes back through
 * a2__db_result_poll's first value. */
int a2__db_wal_position_send(PGconn *db, char *err, size_t errlen);

/* The backlog read (consumer/backlog.sql, at most max_markers clear
 * markers), sent the same way; its rows come back through
 * a2__db_result_poll. */
int a2__db_backlog_send(PGconn *db, long max_markers, char *err, size_t errlen);

/* Reads what arrived for a sent query or message: 1 while its result is
 * still to come (*out keeps what came so far: pass the same *out again), 0
 * once it is done (*out: its last result with rows, for the caller to
 * PQclear; NULL when none), -1 when it failed (err says "could not <what>:
 * why", *out is cleared; drop the connection: the rest of the answer is
 * not read). */
int a2__db_result_poll(PGconn *db, const char *what, PGresult **out, char *err,
                       size_t errlen);

/* Drops a slot (for an invalidated one); 0 or -1. */
int a2__db_drop_slot(PGconn *db, const char *slot, char *err, size_t errlen);

/* ---- replication connection ---- */

typedef struct a2__repl a2__repl;

/* One message from the server; data lives until the next a2__repl_read. */
typedef struct {
    char type;           /* 'w' XLogData or 'k' keepalive */
    uint64_t data_start; /* 'w' */
    uint64_t wal_end;
    int64_t send_time_us; /* server clock, µs since the Unix epoch */
    int reply_requested;  /* 'k' */
    const char *data;     /* 'w' payload (not NUL-terminated) */
    size_t len;
} a2__msg;

/* Connects with replication=database, TimeZone=UTC. NULL with err. */
a2__repl *a2__repl_connect(const char *conninfo, char *err, size_t errlen);

/* Creates the slot unless it exists; *created and *consistent tell what
 * happened. Returns 0 or -1 (err, sqlstate). */
int a2__repl_create_slot(a2__repl *r, const char *slot, const char *plugin,
                         int *created, uint64_t *consistent, char *err,
                         size_t errlen, char sqlstate[6]);

/* START_REPLICATION SLOT slot LOGICAL lsn (wal2json options); plugin is
 * the slot's, named when the server refuses it. 0 or -1. */
int a2__repl_start(a2__repl *r, const char *slot, const char *plugin,
                   uint64_t lsn, char *err, size_t errlen, char sqlstate[6]);

int a2__repl_socket(const a2__repl *r);

/* The walsender's process id. */
int a2__repl_backend_pid(const a2__repl *r);

/*
 * Reads one message without blocking: 1 with *m filled, 0 when none is
 * ready (poll the socket), -1 when the stream ended or failed (err). The
 * socket is read only after a2__repl_readable (poll saw it readable): once
 * libpq's buffer is drained, 0 costs no system call.
 */
void a2__repl_readable(a2__repl *r);
int a2__repl_read(a2__repl *r, a2__msg *m, char *err, size_t errlen);

/* Sends a standby status update (write, flush, apply = flush). 0 or -1. */
int a2__repl_feedback(a2__repl *r, uint64_t write_lsn, uint64_t flush_lsn,
                      int reply_requested, char *err, size_t errlen);

/* Ends streaming cleanly: final feedback, CopyDone, drain the rest. */
void a2__repl_stop(a2__repl *r, uint64_t write_lsn, uint64_t flush_lsn);

/* NULL-safe. */
void a2__repl_close(a2__repl *r);

#endif
