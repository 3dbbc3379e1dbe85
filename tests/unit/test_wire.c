/*
 * liba2wire: every message round trip, every reader error, limits, and
 * byte-at-a-time streaming.
 */
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "a2/wire.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

/* Feeds b to a new reader of direction from, takes exactly one message. */
static a2_wire_reader *read_one(a2_wire_from from, const a2_wire_buf *b,
                                a2_wire_msg *m)
{
    a2_wire_reader *r = a2_wire_reader_new(from);
    assert_non_null(r);
    assert_int_equal(a2_wire_reader_feed(r, b->data, b->len), 0);
    assert_int_equal(a2_wire_reader_next(r, m), 1);
    assert_int_equal(a2_wire_reader_buffered(r), 0);
    return r;
}

/* Takes the next message from r into *m: there is one, of type. */
static void next_of(a2_wire_reader *r, a2_wire_type type, a2_wire_msg *m)
{
    assert_int_equal(a2_wire_reader_next(r, m), 1);
    assert_int_equal(m->type, type);
}

/* Expects the reader of direction from to fail on bytes with code, its error
 * holding needle (when not NULL); a failure names the case. */
static void expect_error(const char *name, a2_wire_from from, const void *bytes,
                         size_t n, int code, const char *needle)
{
    a2_wire_reader *r = a2_wire_reader_new(from);
    a2_wire_msg m;
    int rc;
    assert_non_null(r);
    if (a2_wire_reader_feed(r, bytes, n) != 0)
        fail_msg("%s: the feed failed: %s", name, a2_wire_reader_error(r));
    rc = a2_wire_reader_next(r, &m);
    if (rc != code)
        fail_msg("%s: expected %d (%s), got %d: %s", name, code,
                 needle ? needle : "", rc, a2_wire_reader_error(r));
    if (m.type != A2_WIRE_NONE)
        fail_msg("%s: a message of type %d came with the error", name,
                 (int)m.type);
    if (needle && !strstr(a2_wire_reader_error(r), needle))
        fail_msg("%s: the error \"%s\" does not say \"%s\"", name,
                 a2_wire_reader_error(r), needle);
    /* Errors are final. */
    if (a2_wire_reader_next(r, &m) != code)
        fail_msg("%s: a second next is not %d", name, code);
    if (a2_wire_reader_feed(r, "\x80", 1) != code)
        fail_msg("%s: a feed after the error is not %d", name, code);
    a2_wire_reader_free(r);
}

/* Packs a map from alternating key/value specs: values "s:..." string,
 * "u:N" unsigned, "i:N" signed, "n" nil, "b" true, "a2" array of 2 ints. */
static void pack_map(msgpack_sbuffer *sb, int n, const char *const *kv)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, (size_t)n);
    for (int i = 0; i < 2 * n; i++) {
        const char *v = kv[i];
        if (i % 2 == 0 || strncmp(v, "s:", 2) == 0) {
            const char *s = i % 2 == 0 ? v : v + 2;
            msgpack_pack_str(&pk, strlen(s));
            msgpack_pack_str_body(&pk, s, strlen(s));
        } else if (strncmp(v, "u:", 2) == 0) {
            msgpack_pack_uint64(&pk, strtoull(v + 2, NULL, 10));
        } else if (strncmp(v, "i:", 2) == 0) {
            msgpack_pack_int64(&pk, strtoll(v + 2, NULL, 10));
        } else if (strcmp(v, "n") == 0) {
            msgpack_pack_nil(&pk);
        } else if (strcmp(v, "b") == 0) {
            msgpack_pack_true(&pk);
        } else if (strcmp(v, "a2") == 0) {
            msgpack_pack_array(&pk, 2);
            msgpack_pack_int(&pk, 1);
            msgpack_pack_int(&pk, 2);
        }
    }
}

/* A frame built by pack_map from kv (key/value specs, NULL-terminated) that
 * the reader of direction from refuses with code and an error with needle. */
typedef struct {
    const char *name;
    a2_wire_from from;
    const char *kv[13];
    int code;
    const char *needle;
} map_case;

#define W_ A2_WIRE_FROM_WORKER
#define C_ A2_WIRE_FROM_CONSUMER

static const map_case semantic_cases[] = {
        /* missing t, t not a string, unknown t, message of the other side */
        {"missing t", W_, {"name", "s:x"}, A2_WIRE_EMISSING, "no key t"},
        {"t not a string", W_, {"t", "u:1"}, A2_WIRE_ETYPE, "key t"},
        {"unknown t", W_, {"t", "s:bogus"}, A2_WIRE_EUNKNOWN, "bogus"},
        {"pong from a worker",
         W_,
         {"t", "s:pong", "id", "u:1"},
         A2_WIRE_EUNKNOWN,
         "pong"},
        {"ping from the consumer",
         C_,
         {"t", "s:ping", "id", "u:1"},
         A2_WIRE_EUNKNOWN,
         "ping"},
        /* hello: wrong version, missing v, v wrong type, name missing, token
         * int */
        {"hello v 2",
         W_,
         {"t", "s:hello", "v", "u:2", "name", "s:w"},
         A2_WIRE_EVERSION,
         "version 2"},
        {"hello without v",
         W_,
         {"t", "s:hello", "name", "s:w"},
         A2_WIRE_EMISSING,
         "missing key v"},
        {"hello v a string",
         W_,
         {"t", "s:hello", "v", "s:1", "name", "s:w"},
         A2_WIRE_ETYPE,
         "key v"},
        {"hello v negative",
         W_,
         {"t", "s:hello", "v", "i:-1", "name", "s:w"},
         A2_WIRE_ETYPE,
         "key v"},
        {"hello without name",
         W_,
         {"t", "s:hello", "v", "u:1"},
         A2_WIRE_EMISSING,
         "name"},
        {"hello token an integer",
         W_,
         {"t", "s:hello", "v", "u:1", "name", "s:w", "token", "u:5"},
         A2_WIRE_ETYPE,
         "token"},
        /* subscribe: log_types of the wrong type or with a non-string */
        {"subscribe log_types true",
         W_,
         {"t", "s:subscribe", "consumer", "s:c", "log_types", "b"},
         A2_WIRE_ETYPE,
         "log_types"},
        {"subscribe log_types of integers",
         W_,
         {"t", "s:subscribe", "consumer", "s:c", "log_types", "a2"},
         A2_WIRE_ETYPE,
         "non-string"},
        {"subscribe without consumer",
         W_,
         {"t", "s:subscribe"},
         A2_WIRE_EMISSING,
         "consumer"},
        {"presence without ns",
         W_,
         {"t", "s:presence"},
         A2_WIRE_EMISSING,
         "ns"},
        {"ping id nil", W_, {"t", "s:ping", "id", "n"}, A2_WIRE_ETYPE, "id"},
        /* consumer side */
        {"welcome v 7",
         C_,
         {"t", "s:welcome", "v", "u:7", "lsn", "u:1"},
         A2_WIRE_EVERSION,
         "version"},
        {"welcome without lsn",
         C_,
         {"t", "s:welcome", "v", "u:1"},
         A2_WIRE_EMISSING,
         "lsn"},
        {"wake head past int64",
         C_,
         {"t", "s:wake", "consumer", "s:c", "session", "s:s", "cursor", "s:k",
          "head", "u:18446744073709551615", "lsn", "u:1"},
         A2_WIRE_ETYPE,
         "head"},
        {"wake lsn negative",
         C_,
         {"t", "s:wake", "consumer", "s:c", "session", "s:s", "cursor", "s:k",
          "head", "i:1", "lsn", "i:-1"},
         A2_WIRE_ETYPE,
         "lsn"},
        {"log without type",
         C_,
         {"t", "s:log", "consumer", "s:c", "session", "s:s", "idx", "i:1",
          "lsn", "u:1"},
         A2_WIRE_EMISSING,
         "type"},
        {"cleared without clear_index",
         C_,
         {"t", "s:cleared", "session", "s:s", "lsn", "u:1"},
         A2_WIRE_EMISSING,
         "clear_index"},
        {"resync without sessions",
         C_,
         {"t", "s:resync", "consumer", "s:c"},
         A2_WIRE_EMISSING,
         "sessions"},
        {"resync sessions a string",
         C_,
         {"t", "s:resync", "consumer", "s:c", "sessions", "s:x"},
         A2_WIRE_ETYPE,
         "sessions"},
        {"presence fields an array",
         C_,
         {"t", "s:presence", "ns", "s:n", "participant", "s:p", "fields", "a2"},
         A2_WIRE_ETYPE,
         "fields"},
        {"presence without fields",
         C_,
         {"t", "s:presence", "ns", "s:n", "participant", "s:p"},
         A2_WIRE_EMISSING,
         "fields"},
        {"error without message",
         C_,
         {"t", "s:error", "code", "s:x"},
         A2_WIRE_EMISSING,
         "message"},
        {"pong without id", C_, {"t", "s:pong"}, A2_WIRE_EMISSING, "id"},
        /* duplicate key */
        {"duplicate id",
         W_,
         {"t", "s:ping", "id", "u:1", "id", "u:2"},
         A2_WIRE_EFORMAT,
         "duplicate"},
};

static void test_errors_semantic(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof semantic_cases / sizeof semantic_cases[0];
         i++) {
        const map_case *c = &semantic_cases[i];
        int n = 0;
        while (c->kv[2 * n])
            n++;
        msgpack_sbuffer sb;
        pack_map(&sb, n, c->kv);
        expect_error(c->name, c->from, sb.data, sb.size, c->code, c->needle);
        msgpack_sbuffer_destroy(&sb);
    }
}

/* Bytes the reader of direction from refuses with code and needle. */
typedef struct {
    const char *name;
    a2_wire_from from;
    const char *bytes;
    size_t n;
    int code;
    const char *needle;
} bytes_case;

/* A string literal's bytes and length (it may hold a NUL). */
#define LIT(s) s, sizeof(s) - 1
/* The start of a presence frame from the consumer, up to its fields. */
#define PRESENCE_TO_FIELDS                                                     \
    "\x84\xa1t\xa8presence\xa2ns\xa1n\xabparticipant\xa1p\xa6\x66ields"

static const bytes_case framing_cases[] = {
        /* not a map: array, string, integer */
        {"an array", W_, LIT("\x91\x01"), A2_WIRE_EFORMAT, "not a map"},
        {"a string", W_, LIT("\xa1x"), A2_WIRE_EFORMAT, "not a map"},
        {"an integer", W_, LIT("\x05"), A2_WIRE_EFORMAT, "not a map"},
        /* reserved byte 0xc1, binary, ext */
        {"byte 0xc1", W_, LIT("\x81\xc1"), A2_WIRE_EFORMAT, "0xc1"},
        {"binary", W_, LIT("\x81\xa1t\xc4\x01x"), A2_WIRE_EFORMAT, "binary"},
        {"ext", W_, LIT("\x81\xa1t\xd4\x01x"), A2_WIRE_EFORMAT, "extension"},
        {"non-string key", W_, LIT("\x81\x01\x02"), A2_WIRE_EFORMAT,
         "non-string key"},
        /* NUL inside a string */
        {"NUL in the id", W_, LIT("\x82\xa1t\xa4ping\xa2id\xa2\x61\x00"),
         A2_WIRE_ETYPE, "id"},
        {"NUL in ns", W_, LIT("\x82\xa1t\xa8presence\xa2ns\xa2\x61\x00"),
         A2_WIRE_EFORMAT, "NUL"},
        /* strings that are not UTF-8: a lone 0xff, an overlong "/", a UTF-16
         * surrogate, a sequence cut short; as a hello name, a subscribe's
         * consumer, a log type and a presence namespace */
        {"name 0xff", W_, LIT("\x83\xa1t\xa5hello\xa1v\x01\xa4name\xa2w\xff"),
         A2_WIRE_EFORMAT, "name is not UTF-8"},
        {"consumer overlong", W_,
         LIT("\x82\xa1t\xa9subscribe\xa8"
             "consumer\xa3\xc0\xaf!"),
         A2_WIRE_EFORMAT, "consumer is not UTF-8"},
        {"log type a surrogate", W_,
         LIT("\x83\xa1t\xa9subscribe\xa8"
             "consumer\xa1"
             "c\xa9log_types"
             "\x91\xa3\xed\xa0\x80"),
         A2_WIRE_EFORMAT, "log_types is not UTF-8"},
        {"ns cut short", W_, LIT("\x82\xa1t\xa8presence\xa2ns\xa2\xe2\x82"),
         A2_WIRE_EFORMAT, "ns is not UTF-8"},
        /* map32 claiming 4 billion entries: rejected from its header */
        {"map32 of 4 billion", W_, LIT("\xdf\xff\xff\xff\xff"), A2_WIRE_ETOOBIG,
         "map"},
        /* array32 inside claiming too many */
        {"array32 too long", W_, LIT("\x81\xa1t\xdd\x00\x01\x00\x00"),
         A2_WIRE_ETOOBIG, "array"},
        /* str32 longer than the string limit */
        {"str32 too long", W_, LIT("\x81\xa1t\xdb\x00\x00\x20\x00"),
         A2_WIRE_ETOOBIG, "string"},
        /* empty keys, twice: a duplicate */
        {"empty key twice", W_, LIT("\x83\xa0\xa0\xa0\xa0\xa1t\xa4ping"),
         A2_WIRE_EFORMAT, "duplicate"},
        /* presence fields that JSON cannot carry */
        {"field NaN", C_,
         LIT(PRESENCE_TO_FIELDS
             "\x81\xa1x\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00"),
         A2_WIRE_ETYPE, "finite"},
        {"field not UTF-8", C_, LIT(PRESENCE_TO_FIELDS "\x81\xa1x\xa1\xff"),
         A2_WIRE_ETYPE, "UTF-8"},
        {"field key an integer", C_, LIT(PRESENCE_TO_FIELDS "\x81\x01\x02"),
         A2_WIRE_ETYPE, "key"},
        {"field past int64", C_,
         LIT(PRESENCE_TO_FIELDS
             "\x81\xa1x\xcf\xff\xff\xff\xff\xff\xff\xff\xff"),
         A2_WIRE_ETYPE, "range"},
};

/* A ping padded with n - 2 junk keys of one length ("k0000", ...), the last
 * one dup_of's twin when dup_of >= 0. */
static void pack_padded_ping(msgpack_sbuffer *sb, int n, int dup_of)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, (size_t)n);
    msgpack_pack_str_with_body(&pk, "t", 1);
    msgpack_pack_str_with_body(&pk, "ping", 4);
    msgpack_pack_str_with_body(&pk, "id", 2);
    msgpack_pack_uint64(&pk, 7);
    char key[16];
    for (int i = 0; i < n - 2; i++) {
        snprintf(key, sizeof key, "k%04d",
                 (i == n - 3 && dup_of >= 0 ? dup_of : i) % 10000);
        msgpack_pack_str_with_body(&pk, key, 5);
        msgpack_pack_nil(&pk);
    }
}

/* The most keys a frame may have: unknown ones are ignored, a duplicate
 * anywhere among them is refused (the check sorts them, it does not pair
 * each with every other). */
static void test_many_keys(void **state)
{
    (void)state;
    msgpack_sbuffer sb;
    pack_padded_ping(&sb, A2_WIRE_MAX_FIELDS, -1);
    a2_wire_reader *r = a2_wire_reader_new(A2_WIRE_FROM_WORKER);
    assert_non_null(r);
    assert_int_equal(a2_wire_reader_feed(r, sb.data, sb.size), 0);
    a2_wire_msg m;
    assert_int_equal(a2_wire_reader_next(r, &m), 1);
    assert_int_equal(m.type, A2_WIRE_PING);
    assert_true(m.id == 7);
    a2_wire_reader_free(r);
    msgpack_sbuffer_destroy(&sb);
    int dups[] = {0, A2_WIRE_MAX_FIELDS / 2, A2_WIRE_MAX_FIELDS - 4};
    for (size_t i = 0; i < sizeof dups / sizeof dups[0]; i++) {
        pack_padded_ping(&sb, A2_WIRE_MAX_FIELDS, dups[i]);
        expect_error("many keys, one twice", A2_WIRE_FROM_WORKER, sb.data,
                     sb.size, A2_WIRE_EFORMAT, "duplicate");
        msgpack_sbuffer_destroy(&sb);
    }
    pack_padded_ping(&sb, A2_WIRE_MAX_FIELDS + 1, -1);
    expect_error("one key too many", A2_WIRE_FROM_WORKER, sb.data, sb.size,
                 A2_WIRE_ETOOBIG, NULL);
    msgpack_sbuffer_destroy(&sb);
}

static void test_errors_framing(void **state)
{
    (void)state;
    const a2_wire_from W = A2_WIRE_FROM_WORKER, C = A2_WIRE_FROM_CONSUMER;
    static unsigned char big[A2_WIRE_MAX_WORKER_FRAME + 8192];

    for (size_t i = 0; i < sizeof framing_cases / sizeof framing_cases[0];
         i++) {
        const bytes_case *c = &framing_cases[i];
        expect_error(c->name, c->from, c->bytes, c->n, c->code, c->needle);
    }
    /* nesting past the depth limit */
    {
        unsigned char deep[64];
        size_t n = 0;
        deep[n++] = 0x81;
        deep[n++] = 0xa1;
        deep[n++] = 'x';
        for (int i = 0; i < A2_WIRE_MAX_DEPTH; i++)
            deep[n++] = 0x91;
        deep[n++] = 0x01;
        expect_error("nested too deep", C, deep, n, A2_WIRE_EDEPTH, "depth");
    }
    /* a worker frame over 64 KiB made of many small strings; the same bytes
     * are fine for the consumer's limit (then fail as an unknown frame). */
    {
        size_t n = 0, entries = 900;
        big[n++] = 0xde;
        big[n++] = (unsigned char)(entries >> 8);
        big[n++] = (unsigned char)entries;
        for (size_t i = 0; i < entries; i++) {
            big[n++] = 0xda; /* str16 key of 70 bytes, unique */
            big[n++] = 0;
            big[n++] = 70;
            memset(big + n, 'k', 70);
            big[n] = (unsigned char)('0' + i % 10);
            big[n + 1] = (unsigned char)('0' + i / 10 % 10);
            big[n + 2] = (unsigned char)('0' + i / 100 % 10);
            n += 70;
            big[n++] = 0xc0;
        }
        assert_true(n > A2_WIRE_MAX_WORKER_FRAME);
        expect_error("big worker frame", W, big, n, A2_WIRE_ETOOBIG, "frame");
        expect_error("big frame from the consumer", C, big, n, A2_WIRE_EMISSING,
                     "no key t");
    }
    /* truncated input is not an error: it waits */
    {
        a2_wire_reader *r = a2_wire_reader_new(W);
        a2_wire_msg m;
        assert_int_equal(a2_wire_reader_feed(r, "\x82\xa1t\xa4pi", 6), 0);
        assert_int_equal(a2_wire_reader_next(r, &m), 0);
        assert_int_equal(a2_wire_reader_buffered(r), 6);
        assert_int_equal(a2_wire_reader_feed(r, "ng\xa2id\x07", 6), 0);
        assert_int_equal(a2_wire_reader_next(r, &m), 1);
        assert_int_equal(m.id, 7);
        a2_wire_reader_free(r);
    }
}

static void test_encode_errors(void **state)
{
    (void)state;
    a2_wire_buf b = {0};
    char *longs = malloc(A2_WIRE_MAX_STRING + 2);
    const char **many = calloc(A2_WIRE_MAX_ARRAY + 1, sizeof *many);
    a2_wire_msg m = {.type = A2_WIRE_NONE};

    memset(longs, 'x', A2_WIRE_MAX_STRING + 1);
    longs[A2_WIRE_MAX_STRING + 1] = '\0';
    for (size_t i = 0; i <= A2_WIRE_MAX_ARRAY; i++)
        many[i] = "s";

    assert_int_equal(a2_wire_encode(&b, &m), A2_WIRE_EINVAL);
    assert_int_equal(a2_wire_encode(NULL, &m), A2_WIRE_EINVAL);
    assert_int_equal(a2_wire_encode_hello(&b, NULL, NULL), A2_WIRE_EINVAL);
    assert_int_equal(a2_wire_encode_wake(&b, "c", NULL, "k", 1, 1),
                     A2_WIRE_EINVAL);
    assert_int_equal(a2_wire_encode_hello(&b, longs, NULL), A2_WIRE_ETOOBIG);
    assert_int_equal(
            a2_wire_encode_resync(&b, "c", many, A2_WIRE_MAX_ARRAY + 1),
            A2_WIRE_ETOOBIG);
    assert_int_equal(a2_wire_encode_presence(&b, "n", "p", "[1]"),
                     A2_WIRE_ETYPE);
    assert_int_equal(a2_wire_encode_presence(&b, "n", "p", "{bad"),
                     A2_WIRE_ETYPE);
    m.type = A2_WIRE_WELCOME;
    m.v = 2;
    assert_int_equal(a2_wire_encode(&b, &m), A2_WIRE_EINVAL);
    assert_int_equal(b.len, 0);
    /* a worker frame over 64 KiB: 20 types of 4000 bytes */
    {
        const char *types[20];
        longs[4000] = '\0';
        for (int i = 0; i < 20; i++)
            types[i] = longs;
        assert_int_equal(
                a2_wire_encode_subscribe(&b, "c", A2_WIRE_LOG_TYPES, types, 20),
                A2_WIRE_ETOOBIG);
        assert_int_equal(b.len, 0);
        assert_int_equal(
                a2_wire_encode_subscribe(&b, "c", A2_WIRE_LOG_TYPES, types, 10),
                0);
        assert_true(b.len > 40000);
    }
    /* a failed encode leaves earlier frames alone */
    {
        size_t before = b.len;
        assert_int_equal(a2_wire_encode_ping(&b, 1), 0);
        before = b.len;
        assert_int_equal(a2_wire_encode_hello(&b, "w", longs + 0), 0);
        b.len = before;
        longs[4000] = 'x';
        assert_int_equal(a2_wire_encode_error(&b, "x", longs), A2_WIRE_ETOOBIG);
        assert_int_equal(b.len, before);
    }
    assert_string_equal(a2_wire_type_name(A2_WIRE_WAKE), "wake");
    assert_string_equal(a2_wire_strerror(A2_WIRE_ETOOBIG), "over a size limit");
    free(longs);
    free(many);
    a2_wire_buf_free(&b);
    a2_wire_buf_free(NULL);
    a2_wire_reader_free(NULL);
}

/* The consumer's frame limit (1 MiB), for the encoder and the reader; JSON
 * nesting past the depth limit. */
static void test_consumer_limits(void **state)
{
    (void)state;
    a2_wire_buf b = {0};
    const char **sessions = calloc(A2_WIRE_MAX_ARRAY, sizeof *sessions);
    char *s = malloc(301);
    size_t n = 0;

    memset(s, 'x', 300);
    s[300] = '\0';
    for (size_t i = 0; i < A2_WIRE_MAX_ARRAY; i++)
        sessions[i] = s;
    /* 4096 x 300 bytes > 1 MiB */
    assert_int_equal(
            a2_wire_encode_resync(&b, "c", sessions, A2_WIRE_MAX_ARRAY),
            A2_WIRE_ETOOBIG);
    assert_int_equal(b.len, 0);
    /* 3000 x 300 bytes fit, and decode */
    assert_int_equal(a2_wire_encode_resync(&b, "c", sessions, 3000), 0);
    assert_true(b.len > 900000);
    {
        a2_wire_msg m;
        a2_wire_reader *r = read_one(A2_WIRE_FROM_CONSUMER, &b, &m);
        assert_int_equal(m.n_sessions, 3000);
        assert_string_equal(m.sessions[2999], s);
        a2_wire_reader_free(r);
    }
    /* the same bytes grown past 1 MiB by hand: the reader refuses them */
    {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 3);
        msgpack_pack_str(&pk, 1);
        msgpack_pack_str_body(&pk, "t", 1);
        msgpack_pack_str(&pk, 6);
        msgpack_pack_str_body(&pk, "resync", 6);
        msgpack_pack_str(&pk, 8);
        msgpack_pack_str_body(&pk, "consumer", 8);
        msgpack_pack_str(&pk, 1);
        msgpack_pack_str_body(&pk, "c", 1);
        msgpack_pack_str(&pk, 8);
        msgpack_pack_str_body(&pk, "sessions", 8);
        msgpack_pack_array(&pk, A2_WIRE_MAX_ARRAY);
        for (size_t i = 0; i < A2_WIRE_MAX_ARRAY; i++) {
            msgpack_pack_str(&pk, 300);
            msgpack_pack_str_body(&pk, s, 300);
        }
        assert_true(sb.size > A2_WIRE_MAX_CONSUMER_FRAME);
        expect_error("resync past 1 MiB", A2_WIRE_FROM_CONSUMER, sb.data,
                     sb.size, A2_WIRE_ETOOBIG, "frame exceeds");
        msgpack_sbuffer_destroy(&sb);
    }
    /* presence fields: the frame's map is depth 1, fields 2, so 14 nested
     * arrays reach the limit of 16 and 15 pass it */
    for (int depth = 14; depth <= 15; depth++) {
        char json[96];
        n = 0;
        n += (size_t)snprintf(json, sizeof json, "{\"a\":");
        for (int i = 0; i < depth; i++)
            json[n++] = '[';
        json[n++] = '1';
        for (int i = 0; i < depth; i++)
            json[n++] = ']';
        json[n++] = '}';
        json[n] = '\0';
        b.len = 0;
        if (depth == 15) {
            assert_int_equal(a2_wire_encode_presence(&b, "n", "p", json),
                             A2_WIRE_ETYPE);
            assert_int_equal(b.len, 0);
            continue;
        }
        assert_int_equal(a2_wire_encode_presence(&b, "n", "p", json), 0);
        a2_wire_msg m;
        a2_wire_reader *r = read_one(A2_WIRE_FROM_CONSUMER, &b, &m);
        assert_string_equal(m.fields_json, json);
        a2_wire_reader_free(r);
    }
    free(sessions);
    free(s);
    a2_wire_buf_free(&b);
}

static void test_hello(void **state)
{
    (void)state;
    a2_wire_buf b = {0};
    a2_wire_msg m;
    a2_wire_reader *r;

    assert_int_equal(a2_wire_encode_hello(&b, "w1", "s3cret"), 0);
    r = read_one(A2_WIRE_FROM_WORKER, &b, &m);
    assert_int_equal(m.type, A2_WIRE_HELLO);
    assert_int_equal(m.v, 1);
    assert_string_equal(m.name, "w1");
    assert_string_equal(m.token, "s3cret");
    a2_wire_reader_free(r);

    b.len = 0;
    assert_int_equal(a2_wire_encode_hello(&b, "w2", NULL), 0);
    r = read_one(A2_WIRE_FROM_WORKER, &b, &m);
    assert_string_equal(m.name, "w2");
    assert_null(m.token);
    a2_wire_reader_free(r);

    /* empty strings (msgpack-c gives them a NULL pointer) */
    b.len = 0;
    assert_int_equal(a2_wire_encode_hello(&b, "", ""), 0);
    r = read_one(A2_WIRE_FROM_WORKER, &b, &m);
    assert_string_equal(m.name, "");
    assert_string_equal(m.token, "");
    a2_wire_reader_free(r);
    a2_wire_buf_free(&b);
}

static void test_subscribe(void **state)
{
    (void)state;
    a2_wire_buf b = {0};
    a2_wire_msg m;
    a2_wire_reader *r;
    const char *types[] = {"chat.msg", "chat.edit"};

    assert_int_equal(
            a2_wire_encode_subscribe(&b, "mailer", A2_WIRE_LOG_NONE, NULL, 0),
            0);
    r = read_one(A2_WIRE_FROM_WORKER, &b, &m);
    assert_int_equal(m.type, A2_WIRE_SUBSCRIBE);
    assert_string_equal(m.consumer, "mailer");
    assert_int_equal(m.log_filter, A2_WIRE_LOG_NONE);
    a2_wire_reader_free(r);

    b.len = 0;
    assert_int_equal(
            a2_wire_encode_subscribe(&b, "idx", A2_WIRE_LOG_ALL, NULL, 0), 0);
    r = read_one(A2_WIRE_FROM_WORKER, &b, &m);
    assert_int_equal(m.log_filter, A2_WIRE_LOG_ALL);
    assert_int_equal(m.n_log_types, 0);
    a2_wire_reader_free(r);

    b.len = 0;
    assert_int_equal(
            a2_wire_encode_subscribe(&b, "idx", A2_WIRE_LOG_TYPES, types, 2),
            0);
    r = read_one(A2_WIRE_FROM_WORKER, &b, &m);
    assert_int_equal(m.log_filter, A2_WIRE_LOG_TYPES);
    assert_int_equal(m.n_log_types, 2);
    assert_string_equal(m.log_types[0], "chat.msg");
    assert_string_equal(m.log_types[1], "chat.edit");
    a2_wire_reader_free(r);
    a2_wire_buf_free(&b);
}

static void test_presence_sub_ping(void **state)
{
    (void)state;
    a2_wire_buf b = {0};
    a2_wire_msg m;
    a2_wire_reader *r = a2_wire_reader_new(A2_WIRE_FROM_WORKER);

    assert_int_equal(a2_wire_encode_presence_sub(&b, "room:1"), 0);
    assert_int_equal(a2_wire_encode_ping(&b, UINT64_MAX), 0);
    assert_int_equal(a2_wire_reader_feed(r, b.data, b.len), 0);
    next_of(r, A2_WIRE_PRESENCE_SUB, &m);
    assert_string_equal(m.ns, "room:1");
    next_of(r, A2_WIRE_PING, &m);
    assert_true(m.id == UINT64_MAX);
    assert_int_equal(a2_wire_reader_next(r, &m), 0);
    a2_wire_reader_free(r);
    a2_wire_buf_free(&b);
}

static void test_consumer_messages(void **state)
{
    (void)state;
    a2_wire_buf b = {0};
    a2_wire_msg m;
    a2_wire_reader *r = a2_wire_reader_new(A2_WIRE_FROM_CONSUMER);
    const char *sessions[] = {"s1", "s2", "s3"};

    assert_int_equal(a2_wire_encode_welcome(&b, 0x16B3748ULL), 0);
    assert_int_equal(
            a2_wire_encode_wake(&b, "mailer", "s1", "main", 42, UINT64_MAX), 0);
    assert_int_equal(
            a2_wire_encode_log(&b, "idx", "s2", INT64_MAX, "chat.msg", 7), 0);
    assert_int_equal(a2_wire_encode_cleared(&b, "s3", -1, 8), 0);
    assert_int_equal(a2_wire_encode_resync(&b, "mailer", sessions, 3), 0);
    assert_int_equal(a2_wire_encode_resync(&b, "mailer", NULL, 0), 0);
    assert_int_equal(a2_wire_encode_resync(&b, "mailer", sessions, 0), 0);
    assert_int_equal(
            a2_wire_encode_presence(&b, "room", "alice",
                                    "{\"typing\":true,\"gone\":null,\"n\":-3,"
                                    "\"x\":1.5,\"o\":{\"a\":[1,\"b\"]}}"),
            0);
    assert_int_equal(a2_wire_encode_pong(&b, 99), 0);
    assert_int_equal(a2_wire_encode_error(&b, A2_WIRE_CODE_AUTH, "bad token"),
                     0);
    assert_int_equal(a2_wire_reader_feed(r, b.data, b.len), 0);

    next_of(r, A2_WIRE_WELCOME, &m);
    assert_int_equal(m.v, 1);
    assert_true(m.lsn == 0x16B3748ULL);

    next_of(r, A2_WIRE_WAKE, &m);
    assert_string_equal(m.consumer, "mailer");
    assert_string_equal(m.session, "s1");
    assert_string_equal(m.cursor, "main");
    assert_int_equal(m.head, 42);
    assert_true(m.lsn == UINT64_MAX);
    assert_int_equal(m.xid, 0); /* absent: a timer's */

    next_of(r, A2_WIRE_LOG, &m);
    assert_string_equal(m.consumer, "idx");
    assert_string_equal(m.session, "s2");
    assert_true(m.idx == INT64_MAX);
    assert_string_equal(m.event_type, "chat.msg");
    assert_int_equal(m.lsn, 7);
    assert_int_equal(m.xid, 0);

    next_of(r, A2_WIRE_CLEARED, &m);
    assert_string_equal(m.session, "s3");
    assert_int_equal(m.clear_index, -1);
    assert_int_equal(m.lsn, 8);

    next_of(r, A2_WIRE_RESYNC, &m);
    assert_false(m.all_sessions);
    assert_int_equal(m.n_sessions, 3);
    assert_string_equal(m.sessions[2], "s3");

    next_of(r, A2_WIRE_RESYNC, &m);
    assert_true(m.all_sessions);
    assert_int_equal(m.n_sessions, 0);

    next_of(r, A2_WIRE_RESYNC, &m);
    assert_false(m.all_sessions);
    assert_int_equal(m.n_sessions, 0);

    next_of(r, A2_WIRE_PRESENCE, &m);
    assert_string_equal(m.ns, "room");
    assert_string_equal(m.participant, "alice");
    assert_non_null(strstr(m.fields_json, "\"typing\":true"));
    assert_non_null(strstr(m.fields_json, "\"gone\":null"));
    assert_non_null(strstr(m.fields_json, "\"n\":-3"));
    assert_non_null(strstr(m.fields_json, "\"x\":1.5"));
    assert_non_null(strstr(m.fields_json, "\"o\":{\"a\":[1,\"b\"]}"));

    next_of(r, A2_WIRE_PONG, &m);
    assert_int_equal(m.id, 99);

    next_of(r, A2_WIRE_ERROR, &m);
    assert_string_equal(m.code, "auth");
    assert_string_equal(m.message, "bad token");

    assert_int_equal(a2_wire_reader_next(r, &m), 0);
    a2_wire_reader_free(r);
    a2_wire_buf_free(&b);
}

/* Every frame split at every byte boundary still decodes. */
static void test_byte_at_a_time(void **state)
{
    (void)state;
    a2_wire_buf b = {0};
    a2_wire_msg m;
    a2_wire_reader *r = a2_wire_reader_new(A2_WIRE_FROM_CONSUMER);
    int got = 0;

    for (int i = 0; i < 20; i++)
        assert_int_equal(a2_wire_encode_wake(&b, "c", "sess", "k", i, 1), 0);
    for (size_t i = 0; i < b.len; i++) {
        int rc;
        assert_int_equal(a2_wire_reader_feed(r, b.data + i, 1), 0);
        while ((rc = a2_wire_reader_next(r, &m)) == 1) {
            assert_int_equal(m.type, A2_WIRE_WAKE);
            assert_int_equal(m.head, got);
            got++;
        }
        assert_int_equal(rc, 0);
    }
    assert_int_equal(got, 20);
    a2_wire_reader_free(r);
    a2_wire_buf_free(&b);
}

static void test_utf8(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int ok;
    } cases[] = {
            {"", 1},
            {"plain ascii", 1},
            {"\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 1}, /* é € 😀 */
            {"\xef\xbf\xbf\xf4\x8f\xbf\xbf", 1}, /* U+FFFF, U+10FFFF */
            {"\xc2\x9b", 1},                     /* C1 CSI: valid UTF-8 */
            {"\xff", 0},
            {"\x80", 0},             /* a lone continuation */
            {"\xc0\xaf", 0},         /* overlong "/" */
            {"\xe0\x80\xaf", 0},     /* overlong, three bytes */
            {"\xed\xa0\x80", 0},     /* surrogate U+D800 */
            {"\xf4\x90\x80\x80", 0}, /* past U+10FFFF */
            {"\xf5\x80\x80\x80", 0},
            {"ok\xe2\x82", 0}, /* cut short */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (a2_wire_utf8_valid(cases[i].s, strlen(cases[i].s)) != cases[i].ok)
            fail_msg("case %zu: wanted %d", i, cases[i].ok);
    /* the length of one sequence, bounded by n */
    const unsigned char *euro = (const unsigned char *)"\xe2\x82\xac";
    assert_int_equal(a2_wire_utf8_seq(euro, 3), 3);
    assert_int_equal(a2_wire_utf8_seq(euro, 2), 0);
    assert_int_equal(a2_wire_utf8_seq(euro, 0), 0);
}

/* A wake frame with head, lsn and then what extra packs into its map
 * (extra_keys more keys). */
static void pack_wake(msgpack_sbuffer *sb, int extra_keys,
                      void (*extra)(msgpack_packer *pk))
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 6 + (uint32_t)extra_keys);
    const char *kv[][2] = {{"t", "wake"},
                           {"consumer", "c"},
                           {"session", "s"},
                           {"cursor", "#1"}};
    for (size_t i = 0; i < 4; i++) {
        msgpack_pack_str_with_body(&pk, kv[i][0], strlen(kv[i][0]));
        msgpack_pack_str_with_body(&pk, kv[i][1], strlen(kv[i][1]));
    }
    msgpack_pack_str_with_body(&pk, "head", 4);
    msgpack_pack_int64(&pk, 1);
    msgpack_pack_str_with_body(&pk, "lsn", 3);
    msgpack_pack_uint64(&pk, 1);
    extra(&pk);
}

/* A wake frame with extra (one more key) that the consumer's reader
 * refuses, its error naming key; name says which case failed. */
static void expect_wake_refused(const char *name,
                                void (*extra)(msgpack_packer *pk),
                                const char *key)
{
    msgpack_sbuffer sb;
    a2_wire_msg m;
    msgpack_sbuffer_init(&sb);
    pack_wake(&sb, 1, extra);
    a2_wire_reader *r = a2_wire_reader_new(A2_WIRE_FROM_CONSUMER);
    assert_int_equal(a2_wire_reader_feed(r, sb.data, sb.size), 0);
    if (a2_wire_reader_next(r, &m) >= 0)
        fail_msg("%s: the wake was read", name);
    if (!strstr(a2_wire_reader_error(r), key))
        fail_msg("%s: the error \"%s\" does not name %s", name,
                 a2_wire_reader_error(r), key);
    a2_wire_reader_free(r);
    msgpack_sbuffer_destroy(&sb);
}

static void xid_string(msgpack_packer *pk)
{
    msgpack_pack_str_with_body(pk, "xid", 3);
    msgpack_pack_str_with_body(pk, "12", 2);
}

static void trace_string(msgpack_packer *pk)
{
    msgpack_pack_str_with_body(pk, "trace", 5);
    msgpack_pack_str_with_body(pk, "1,2,3,4", 7);
}

static void trace_short(msgpack_packer *pk)
{
    msgpack_pack_str_with_body(pk, "trace", 5);
    msgpack_pack_array(pk, 3);
    for (int i = 0; i < 3; i++)
        msgpack_pack_int64(pk, i);
}

static void trace_bad_element(msgpack_packer *pk)
{
    msgpack_pack_str_with_body(pk, "trace", 5);
    msgpack_pack_array(pk, 4);
    msgpack_pack_int64(pk, 1);
    msgpack_pack_str_with_body(pk, "2", 1);
    msgpack_pack_int64(pk, 3);
    msgpack_pack_int64(pk, 4);
}

static void trace_too_big(msgpack_packer *pk)
{
    msgpack_pack_str_with_body(pk, "trace", 5);
    msgpack_pack_array(pk, 4);
    msgpack_pack_int64(pk, 1);
    msgpack_pack_int64(pk, 2);
    msgpack_pack_int64(pk, 3);
    msgpack_pack_uint64(pk, UINT64_MAX);
}

/* A wake-up and a log message carry their commit's xid (a claim waits for
 * it), and a reader takes one without it as 0; an xid that is not an
 * unsigned integer is refused. */
static void test_wake_xid(void **state)
{
    (void)state;
    a2_wire_buf b = {0};
    a2_wire_msg w = {.type = A2_WIRE_WAKE,
                     .consumer = "c",
                     .session = "s",
                     .cursor = "#1",
                     .head = 1,
                     .lsn = 5,
                     .xid = 4294967295u};
    a2_wire_msg l = {.type = A2_WIRE_LOG,
                     .consumer = "c",
                     .session = "s",
                     .idx = 2,
                     .event_type = "t",
                     .lsn = 6,
                     .xid = 731};
    assert_int_equal(a2_wire_encode(&b, &w), 0);
    assert_int_equal(a2_wire_encode(&b, &l), 0);
    a2_wire_reader *r = a2_wire_reader_new(A2_WIRE_FROM_CONSUMER);
    assert_int_equal(a2_wire_reader_feed(r, b.data, b.len), 0);
    a2_wire_msg m;
    next_of(r, A2_WIRE_WAKE, &m);
    assert_true(m.xid == 4294967295u);
    assert_int_equal(m.lsn, 5);
    next_of(r, A2_WIRE_LOG, &m);
    assert_int_equal(m.xid, 731);
    a2_wire_reader_free(r);
    a2_wire_buf_free(&b);

    /* xid as a string: refused, with the key named */
    expect_wake_refused("xid a string", xid_string, "xid");
}

/* A wake's trace: sent only when set, read back, and refused with the key
 * named when it is not an array of four 64-bit integers. */
static void test_wake_trace(void **state)
{
    (void)state;
    a2_wire_buf b = {0};
    a2_wire_msg w = {.type = A2_WIRE_WAKE,
                     .consumer = "c",
                     .session = "s",
                     .cursor = "#1",
                     .head = 1,
                     .lsn = 5,
                     .trace_us = {1764700000000001, 1764700000000002,
                                  1764700000000003, -4}};
    a2_wire_msg plain = w;
    memset(plain.trace_us, 0, sizeof plain.trace_us);
    assert_int_equal(a2_wire_encode(&b, &w), 0);
    size_t traced_len = b.len;
    assert_int_equal(a2_wire_encode(&b, &plain), 0);
    /* the key, the array and its integers (three of 9 bytes, -4 of one)
     * are absent from the untraced frame */
    assert_int_equal(traced_len, (b.len - traced_len) + 6 + 1 + 3 * 9 + 1);
    a2_wire_reader *r = a2_wire_reader_new(A2_WIRE_FROM_CONSUMER);
    assert_int_equal(a2_wire_reader_feed(r, b.data, b.len), 0);
    a2_wire_msg m;
    next_of(r, A2_WIRE_WAKE, &m);
    for (int i = 0; i < A2_WIRE_TRACE_N; i++)
        assert_true(m.trace_us[i] == w.trace_us[i]);
    next_of(r, A2_WIRE_WAKE, &m);
    for (int i = 0; i < A2_WIRE_TRACE_N; i++)
        assert_int_equal(m.trace_us[i], 0);
    a2_wire_reader_free(r);
    a2_wire_buf_free(&b);

    static const struct {
        const char *name;
        void (*extra)(msgpack_packer *pk);
    } bad[] = {{"trace a string", trace_string},
               {"trace of three", trace_short},
               {"trace with a string", trace_bad_element},
               {"trace past int64", trace_too_big}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_wake_refused(bad[i].name, bad[i].extra, "trace");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_hello),
            cmocka_unit_test(test_subscribe),
            cmocka_unit_test(test_presence_sub_ping),
            cmocka_unit_test(test_consumer_messages),
            cmocka_unit_test(test_byte_at_a_time),
            cmocka_unit_test(test_errors_semantic),
            cmocka_unit_test(test_errors_framing),
            cmocka_unit_test(test_many_keys),
            cmocka_unit_test(test_encode_errors),
            cmocka_unit_test(test_consumer_limits),
            cmocka_unit_test(test_utf8),
            cmocka_unit_test(test_wake_xid),
            cmocka_unit_test(test_wake_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
