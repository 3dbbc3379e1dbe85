/*
 * a2 wire protocol v1: the msgpack framing spoken between a2-consumer and its
 * workers (liba2wire). Pure code, no sockets: encoders append frames to a
 * caller's buffer; a reader is fed bytes and hands back typed messages.
 *
 * The stream is a sequence of msgpack maps with string keys. Key "t" names
 * the message; unknown keys are ignored (forward compatibility), a key given
 * twice is an error.
 *
 *   from      t            other keys
 *   worker    hello        v (1), name, token (TCP only)
 *   worker    subscribe    consumer, log_types (array of strings, or nil for
 *                          every type; absent when not a log consumer)
 *   worker    presence     ns
 *   worker    ping         id
 *   consumer  welcome      v, lsn
 *   consumer  wake         consumer, session, cursor, head, lsn
 *   consumer  log          consumer, session, idx, type, lsn
 *   consumer  cleared      session, clear_index, lsn
 *   consumer  resync       consumer, sessions (array of strings, or nil = all)
 *   consumer  presence     ns, participant, fields (map; nil value = deleted),
 *                          lsn (the change's commit end; absent from an older
 *                          consumer: read as 0)
 *   consumer  pong         id
 *   consumer  error        code, message
 *
 * Types on the wire: strings are msgpack str (UTF-8 expected, not checked;
 * a NUL byte inside is rejected); v, id and every lsn are unsigned integers
 * (an LSN travels as the uint64 of PostgreSQL's XLogRecPtr, not as "X/Y"
 * text); head, idx and clear_index are signed 64-bit integers; error code is
 * a short string (A2_WIRE_CODE_*).
 *
 * Errors: functions return 0 (or 1, where said) or a negative A2_WIRE_E*
 * code. Nothing here prints, exits or aborts on input.
 */
#ifndef A2_WIRE_H
#define A2_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define A2_WIRE_VERSION 1

/*
 * Hard limits (bytes or elements). Encoders refuse to exceed them, readers
 * reject input exceeding them:
 *   MAX_WORKER_FRAME    one frame from a worker
 *   MAX_CONSUMER_FRAME  one frame from the consumer
 *   MAX_STRING          any string value or key, in bytes
 *   MAX_ARRAY           any array (log_types, sessions, presence values)
 *   MAX_FIELDS          any map (the frame, a presence `fields` map)
 *   MAX_DEPTH           nesting of maps and arrays; the frame's map is 1
 */
#define A2_WIRE_MAX_WORKER_FRAME   (64 * 1024)
#define A2_WIRE_MAX_CONSUMER_FRAME (1024 * 1024)
#define A2_WIRE_MAX_STRING         4096
#define A2_WIRE_MAX_ARRAY          4096
#define A2_WIRE_MAX_FIELDS         1024
#define A2_WIRE_MAX_DEPTH          16

/*
 * Return codes. A2_WIRE_EAGAIN is 0, not an error: what
 * a2_wire_reader_next returns when it needs more bytes. The others:
 *   EINVAL    bad argument (NULL where a value is required)
 *   ENOMEM    out of memory
 *   EFORMAT   not msgpack, not a map, a non-string key, a NUL byte inside a
 *             string, a duplicate key, a binary or extension value
 *   ETOOBIG   a frame, string, array or map over its limit
 *   EDEPTH    nesting deeper than A2_WIRE_MAX_DEPTH
 *   EMISSING  a required key is absent
 *   ETYPE     a key has the wrong type; fields JSON is not an object
 *   EUNKNOWN  `t` names no message of this direction
 *   EVERSION  `v` of hello or welcome is not A2_WIRE_VERSION
 */
#define A2_WIRE_EAGAIN   0
#define A2_WIRE_EINVAL   (-1)
#define A2_WIRE_ENOMEM   (-2)
#define A2_WIRE_EFORMAT  (-3)
#define A2_WIRE_ETOOBIG  (-4)
#define A2_WIRE_EDEPTH   (-5)
#define A2_WIRE_EMISSING (-6)
#define A2_WIRE_ETYPE    (-7)
#define A2_WIRE_EUNKNOWN (-8)
#define A2_WIRE_EVERSION (-9)

/*
 * Values of the `code` key of the `error` frames a2-consumer sends before it
 * closes a connection:
 *   protocol  a malformed or unexpected frame
 *   too_big   a frame over A2_WIRE_MAX_WORKER_FRAME (or a string/array over
 *             its limit)
 *   version   an unsupported protocol version in hello
 *   auth      a missing or wrong token (TCP)
 *   timeout   no hello in time
 */
#define A2_WIRE_CODE_PROTOCOL "protocol"
#define A2_WIRE_CODE_TOO_BIG  "too_big"
#define A2_WIRE_CODE_VERSION  "version"
#define A2_WIRE_CODE_AUTH     "auth"
#define A2_WIRE_CODE_TIMEOUT  "timeout"
/* The consumer is a standby: another a2-consumer is active for the slot. */
#define A2_WIRE_CODE_STANDBY  "standby"

/* The two directions; a reader accepts only the messages of its peer. */
typedef enum {
    A2_WIRE_FROM_WORKER = 0,   /* read by the consumer */
    A2_WIRE_FROM_CONSUMER = 1, /* read by a worker */
} a2_wire_from;

typedef enum {
    A2_WIRE_NONE = 0,
    /* worker -> consumer */
    A2_WIRE_HELLO,
    A2_WIRE_SUBSCRIBE,
    A2_WIRE_PRESENCE_SUB, /* `presence` {ns} from a worker */
    A2_WIRE_PING,
    /* consumer -> worker */
    A2_WIRE_WELCOME,
    A2_WIRE_WAKE,
    A2_WIRE_LOG,
    A2_WIRE_CLEARED,
    A2_WIRE_RESYNC,
    A2_WIRE_PRESENCE, /* `presence` patch from the consumer */
    A2_WIRE_PONG,
    A2_WIRE_ERROR,
} a2_wire_type;

/* The times a wake-up's `trace` carries, in order. */
enum {
    A2_WIRE_TRACE_COMMIT = 0, /* the commit (its timestamp in the stream) */
    A2_WIRE_TRACE_SENT = 1,   /* the walsender sent its commit record */
    A2_WIRE_TRACE_RECV = 2,   /* a2-consumer read that message */
    A2_WIRE_TRACE_PUSH = 3,   /* a2-consumer moved the frame to the socket */
    A2_WIRE_TRACE_N = 4,
};

/* What `log_types` of a subscribe said. */
typedef enum {
    A2_WIRE_LOG_NONE = 0,  /* key absent: not a log consumer */
    A2_WIRE_LOG_ALL = 1,   /* nil: every event type */
    A2_WIRE_LOG_TYPES = 2, /* array: log_types[0 .. n_log_types) */
} a2_wire_log_filter;

/*
 * One message. Only the fields of its type are meaningful; the others are
 * zero/NULL. When read, every pointer is borrowed from the reader and stays
 * valid until the next a2_wire_reader_next or a2_wire_reader_free on it (copy
 * what you keep); every string is NUL-terminated. When encoding, the caller
 * owns everything.
 */
typedef struct {
    a2_wire_type type;
    uint64_t v;                    /* hello, welcome: protocol version */
    const char *name;              /* hello: worker name */
    const char *token;             /* hello: NULL when absent */
    const char *consumer;          /* subscribe, wake, log, resync */
    a2_wire_log_filter log_filter; /* subscribe */
    const char *const *log_types;  /* subscribe, when A2_WIRE_LOG_TYPES */
    size_t n_log_types;
    const char *ns;         /* presence (both directions) */
    uint64_t id;            /* ping, pong */
    uint64_t lsn;           /* welcome, wake, log, cleared, presence */
    uint64_t xid; /* wake, log: the commit's transaction id (0: none, as for
                     a timer's wake-up); optional on the wire */
    const char *session;    /* wake, log, cleared */
    const char *cursor;     /* wake: cursor key */
    int64_t head;           /* wake */
    int64_t idx;            /* log */
    const char *event_type; /* log: key `type` */
    int64_t clear_index;    /* cleared */
    int all_sessions;       /* resync: 1 when sessions is nil (every session) */
    const char *const *sessions; /* resync, when !all_sessions */
    size_t n_sessions;
    const char *participant; /* presence patch */
    /* presence patch: `fields` as JSON object text, a null member meaning
     * deleted. Values are any msgpack/JSON value (no binary, ext or NaN). */
    const char *fields_json;
    const char *code;    /* error: A2_WIRE_CODE_* */
    const char *message; /* error: one line for humans */
    /* wake: optional key `trace`, times of the wake-up's commit on its way
     * (µs since the Unix epoch, A2_WIRE_TRACE_*); all 0: absent. Sent by an
     * a2-consumer started with --trace-wakes. */
    int64_t trace_us[A2_WIRE_TRACE_N];
} a2_wire_msg;

/* A growable byte buffer that encoders append frames to. Zero-initialise it
 * (or a2_wire_buf_init); release with a2_wire_buf_free. */
typedef struct {
    char *data;
    size_t len;
    size_t cap;
} a2_wire_buf;

void a2_wire_buf_init(a2_wire_buf *b);
/* Frees the storage and zeroes *b. NULL-safe. */
void a2_wire_buf_free(a2_wire_buf *b);
/* Drops the first n bytes (all of them when n >= len), keeping capacity. */
void a2_wire_buf_consume(a2_wire_buf *b, size_t n);

/*
 * Appends one frame for msg to b. The direction follows from msg->type.
 * Returns 0, or A2_WIRE_EINVAL (unknown type, NULL required string, version
 * other than A2_WIRE_VERSION in a welcome/hello with v != 0), A2_WIRE_ETOOBIG
 * (a limit above would be exceeded), A2_WIRE_ETYPE (fields_json is not a JSON
 * object, or nests too deep), A2_WIRE_ENOMEM. On error b is unchanged. A
 * hello or welcome with v == 0 is sent with A2_WIRE_VERSION.
 */
__attribute__((warn_unused_result)) int a2_wire_encode(a2_wire_buf *b,
                                                       const a2_wire_msg *msg);

/* Convenience encoders: same returns as a2_wire_encode. */
__attribute__((warn_unused_result)) int
a2_wire_encode_hello(a2_wire_buf *b, const char *name, const char *token);
/* log_types: A2_WIRE_LOG_NONE ignores types/n; A2_WIRE_LOG_ALL sends nil. */
__attribute__((warn_unused_result)) int
a2_wire_encode_subscribe(a2_wire_buf *b, const char *consumer,
                         a2_wire_log_filter filter, const char *const *types,
                         size_t n);
__attribute__((warn_unused_result)) int
a2_wire_encode_presence_sub(a2_wire_buf *b, const char *ns);
__attribute__((warn_unused_result)) int a2_wire_encode_ping(a2_wire_buf *b,
                                                            uint64_t id);
__attribute__((warn_unused_result)) int a2_wire_encode_welcome(a2_wire_buf *b,
                                                               uint64_t lsn);
__attribute__((warn_unused_result)) int
a2_wire_encode_wake(a2_wire_buf *b, const char *consumer, const char *session,
                    const char *cursor, int64_t head, uint64_t lsn);
__attribute__((warn_unused_result)) int
a2_wire_encode_log(a2_wire_buf *b, const char *consumer, const char *session,
                   int64_t idx, const char *type, uint64_t lsn);
__attribute__((warn_unused_result)) int
a2_wire_encode_cleared(a2_wire_buf *b, const char *session, int64_t clear_index,
                       uint64_t lsn);
/* sessions == NULL sends nil (every session); else n names. */
__attribute__((warn_unused_result)) int
a2_wire_encode_resync(a2_wire_buf *b, const char *consumer,
                      const char *const *sessions, size_t n);
__attribute__((warn_unused_result)) int
a2_wire_encode_presence(a2_wire_buf *b, const char *ns, const char *participant,
                        const char *fields_json);
__attribute__((warn_unused_result)) int a2_wire_encode_pong(a2_wire_buf *b,
                                                            uint64_t id);
__attribute__((warn_unused_result)) int
a2_wire_encode_error(a2_wire_buf *b, const char *code, const char *message);

/*
 * The streaming reader (hiredis style): create, feed bytes as they arrive,
 * take messages until none is complete, free.
 */
typedef struct a2_wire_reader a2_wire_reader;

/* A reader for frames sent by `from`; NULL when out of memory. */
a2_wire_reader *a2_wire_reader_new(a2_wire_from from);

/* NULL-safe. Invalidates every message taken from r. */
void a2_wire_reader_free(a2_wire_reader *r);

/*
 * Appends len bytes (copied). Returns 0, A2_WIRE_ENOMEM, or the reader's
 * error when it already failed. Memory held is the bytes fed and not yet
 * taken by a2_wire_reader_next: call it until it returns 0 between feeds.
 */
__attribute__((warn_unused_result)) int
a2_wire_reader_feed(a2_wire_reader *r, const void *buf, size_t len);

/*
 * Takes the next complete message into *out. Returns 1 with *out filled
 * (pointers borrowed until the next call or free), 0 when more bytes are
 * needed, or a negative A2_WIRE_E* code. An error is final: the stream has
 * lost its framing or broke the protocol, and every later call returns the
 * same code (a2_wire_reader_error says why); close the connection. Oversize
 * frames are detected from their headers, before they are buffered whole.
 */
__attribute__((warn_unused_result)) int a2_wire_reader_next(a2_wire_reader *r,
                                                            a2_wire_msg *out);

/* The reader's error as one line ("" before any error). Borrowed from r. */
const char *a2_wire_reader_error(const a2_wire_reader *r);

/* Bytes fed but not yet taken. */
size_t a2_wire_reader_buffered(const a2_wire_reader *r);

/* A short static name of a message type ("wake", ...); "?" when unknown. */
const char *a2_wire_type_name(a2_wire_type type);

/* A short static description of an A2_WIRE_E* code. */
const char *a2_wire_strerror(int code);

/* Bytes of the well-formed UTF-8 sequence at s (1 to 4, within n), or 0
 * when s does not start one (overlong, surrogate, past U+10FFFF, cut). */
size_t a2_wire_utf8_seq(const unsigned char *s, size_t n);
/* 1 when s[0..n) is well-formed UTF-8, else 0. Every protocol string must
 * be: the reader refuses a frame with one that is not (A2_WIRE_EFORMAT). */
int a2_wire_utf8_valid(const char *s, size_t n);

/*
 * Reads the token of a TCP connection from path: a regular file no one but
 * its owner can read (or, owned by root, its group too: 0640), holding one
 * line of UTF-8 text without control characters, at most 4096 bytes; a
 * final newline and trailing blanks are dropped. The token (malloc'd), or
 * NULL with the reason in err.
 */
char *a2_wire_read_token(const char *path, char *err, size_t errlen);

#endif
