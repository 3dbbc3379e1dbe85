/*
 * `a2 console`: an operator console in a browser.
 *
 * libmicrohttpd serves, one thread per connection, the page embedded from
 * cli/console/ (static HTML, CSS and JavaScript) and the JSON API under
 * /api/ that the page calls (console_api.c), including the live tail of the
 * audit trail as text/event-stream (console_audit.c).
 *
 * Every request is checked here before it is answered:
 *   - Host: on a loopback listen without a token, only loopback names
 *     (localhost, 127.x.x.x, [::1]), so a page of another site that a DNS
 *     rebinding points at this port is refused;
 *   - the token (--token-file): "Authorization: Bearer TOKEN", or the
 *     cookie that GET /?token=TOKEN sets (a random login secret of this
 *     process, HttpOnly, SameSite=Strict), compared in constant time;
 *   - POST: refused in --read-only, without the X-A2-CSRF header holding the
 *     process's CSRF token (GET /api/session-info gives it to the page),
 *     with an Origin that is not the console's own or a Sec-Fetch-Site that
 *     is not same-origin, without a JSON content type, or with a body over
 *     64 KiB.
 * Every answer carries a Content-Security-Policy that allows only the
 * console's own script, style and fetches, and X-Content-Type-Options:
 * nosniff.
 *
 * SIGINT and SIGTERM stop it: the live tails end, the daemon joins its
 * threads, the store connections close.
 */
#include "console.h"
#include "cli.h"

#include "../common/addr.h"
#include "../common/num.h"
#include "../common/random.h"
#include "a2/version.h"
#include "a2/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define DEFAULT_LISTEN     "tcp:127.0.0.1:8188"
#define MAX_BODY           (64 * 1024)
#define CONNECTION_LIMIT   64
#define PER_IP_LIMIT       32
#define CONNECTION_TIMEOUT 30 /* s of inactivity */
#define CONNECTION_MEMORY  (128 * 1024)
#define MAX_TAILS          16
#define LOGIN_COOKIE       "a2_console"
#define CSRF_HEADER        "X-A2-CSRF"

static const char csp[] =
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "img-src 'self'; connect-src 'self'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'";

static const char help_text[] =
        "usage: a2 [--db CONNINFO] console [--listen tcp:HOST:PORT] "
        "[--token-file F] [--read-only]\n"
        "                  [--audit FILE] [--consumer-metrics URL]\n"
        "  an operator console in a browser: each consumer's backlog, dead "
        "letters\n"
        "  across sessions (retry, skip, in bulk), a session's events and "
        "cursors,\n"
        "  an event's audited history, the live tail of the audit trail\n"
        "  --listen tcp:HOST:PORT   where to listen (default " DEFAULT_LISTEN
        "; PORT 0:\n"
        "                           a free port); an address that is not "
        "loopback\n"
        "                           needs --token-file\n"
        "  --token-file F           every request must carry this token "
        "(open\n"
        "                           /?token=TOKEN once, or send "
        "Authorization: Bearer)\n"
        "  --read-only              no actions: every POST is refused\n"
        "  --audit FILE             a2-consumer's audit trail: completions "
        "per minute,\n"
        "                           event histories, the live tail\n"
        "  --consumer-metrics URL   a2-consumer's /metrics "
        "(http://HOST:PORT): its lag\n"
        "                           and connected workers\n"
        "It prints the console's address and serves until SIGINT or "
        "SIGTERM.\n";

/* What one request has gathered between libmicrohttpd's calls. */
typedef struct {
    char *body;
    size_t len;
    bool too_large;
} req_state;

/* ── answers ─────────────────────────────────────────────────────────── */

static void add_common_headers(struct MHD_Response *r)
{
    MHD_add_response_header(r, "Content-Security-Policy", csp);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Cross-Origin-Resource-Policy", "same-origin");
    MHD_add_response_header(r, "Cross-Origin-Opener-Policy", "same-origin");
}

static enum MHD_Result queue(struct MHD_Connection *c, unsigned status,
                             struct MHD_Response *r)
{
    if (!r)
        return MHD_NO;
    add_common_headers(r);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* r (NULL-safe) with its Content-Type and Cache-Control. */
static struct MHD_Response *typed(struct MHD_Response *r, const char *type,
                                  const char *cache)
{
    if (r) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, cache);
    }
    return r;
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status,
                                  const char *text)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
            strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    return queue(c, status, typed(r, "text/plain; charset=utf-8", "no-store"));
}

/* Sends reply (taking its document). */
static enum MHD_Result reply_json(struct MHD_Connection *c, a2__con_reply reply)
{
    char *text = reply.doc ? json_dumps(reply.doc, JSON_COMPACT) : NULL;
    json_decref(reply.doc);
    if (!text)
        return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
                          "{\"error\":\"out of memory\"}");
    struct MHD_Response *r = MHD_create_response_from_buffer(
            strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    return queue(c, reply.status,
                 typed(r, "application/json; charset=utf-8", "no-store"));
}

static enum MHD_Result refuse(struct MHD_Connection *c, bool api,
                              unsigned status, const char *msg)
{
    if (api)
        return reply_json(c, a2__con_error(status, "%s", msg));
    return reply_text(c, status, msg);
}

static const char *content_type_of(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot)
        return "application/octet-stream";
    if (strcmp(dot, ".html") == 0)
        return "text/html; charset=utf-8";
    if (strcmp(dot, ".js") == 0)
        return "text/javascript; charset=utf-8";
    if (strcmp(dot, ".css") == 0)
        return "text/css; charset=utf-8";
    if (strcmp(dot, ".svg") == 0)
        return "image/svg+xml";
    if (strcmp(dot, ".png") == 0)
        return "image/png";
    return "application/octet-stream";
}

/* The embedded file at url ("/" is index.html), or NULL. */
static const struct a2_embedded_file *asset_at(const char *url)
{
    if (url[0] != '/')
        return NULL;
    const char *name = url[1] ? url + 1 : "index.html";
    for (const struct a2_embedded_file *f = a2__console_assets; f->name; f++)
        if (strcmp(f->name, name) == 0)
            return f;
    return NULL;
}

static enum MHD_Result serve_asset(struct MHD_Connection *c,
                                   const struct a2_embedded_file *f)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
            f->size, (void *)f->data, MHD_RESPMEM_PERSISTENT);
    return queue(c, MHD_HTTP_OK,
                 typed(r, content_type_of(f->name), "no-cache"));
}

/* ── checks ──────────────────────────────────────────────────────────── */

/* a equals secret, in a time that depends on a's length only. */
static bool ct_equal(const char *a, const char *secret)
{
    size_t la = strlen(a), ls = strlen(secret);
    volatile unsigned char d = (unsigned char)(la != ls);
    for (size_t i = 0; i < la; i++)
        d |= (unsigned char)(a[i] ^ secret[ls ? i % ls : 0]);
    return d == 0;
}

static const char *header(struct MHD_Connection *c, const char *name)
{
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

static const char *query_arg(void *ctx, const char *key)
{
    const char *v = MHD_lookup_connection_value((struct MHD_Connection *)ctx,
                                                MHD_GET_ARGUMENT_KIND, key);
    return v && *v ? v : NULL;
}

/* A loopback name: localhost, 127.x.x.x or ::1 (host without its port, an
 * IPv6 address without its brackets). */
static bool loopback_name(const char *host)
{
    if (strcasecmp(host, "localhost") == 0)
        return true;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return false;
}

/* The Host header names a loopback host (any port). */
static bool host_is_loopback(const char *h)
{
    char name[256];
    size_t n;
    if (h[0] == '[') {
        const char *end = strchr(h, ']');
        if (!end || (end[1] && end[1] != ':'))
            return false;
        n = (size_t)(end - h - 1);
        h++;
    } else {
        const char *colon = strchr(h, ':');
        n = colon ? (size_t)(colon - h) : strlen(h);
    }
    if (n == 0 || n >= sizeof name)
        return false;
    memcpy(name, h, n);
    name[n] = '\0';
    return loopback_name(name);
}

static bool authorized(const a2__console *con, struct MHD_Connection *c)
{
    if (!con->token)
        return true;
    bool ok = false;
    const char *auth = header(c, MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0) {
        const char *t = auth + 7;
        while (*t == ' ')
            t++;
        ok |= ct_equal(t, con->token);
    }
    const char *cookie =
            MHD_lookup_connection_value(c, MHD_COOKIE_KIND, LOGIN_COOKIE);
    if (cookie)
        ok |= ct_equal(cookie, con->login);
    return ok;
}

/* NULL when a POST may go on, else why it is refused. */
static const char *post_refusal(const a2__console *con,
                                struct MHD_Connection *c)
{
    if (con->read_only)
        return "this console is read-only (--read-only): no action is "
               "allowed";
    const char *host = header(c, MHD_HTTP_HEADER_HOST);
    const char *origin = header(c, "Origin");
    if (origin) {
        char own[600];
        if (!host ||
            snprintf(own, sizeof own, "http://%s", host) >= (int)sizeof own ||
            strcasecmp(origin, own) != 0)
            return "cross-origin request refused (Origin is not this "
                   "console)";
    }
    const char *site = header(c, "Sec-Fetch-Site");
    if (site && strcmp(site, "same-origin") != 0)
        return "cross-site request refused (Sec-Fetch-Site)";
    const char *token = header(c, CSRF_HEADER);
    if (!token || !ct_equal(token, con->csrf))
        return "missing or wrong CSRF token (header " CSRF_HEADER
               ", from GET /api/session-info)";
    return NULL;
}

/* ── requests ────────────────────────────────────────────────────────── */

/* GET /?token=TOKEN: sets the login cookie and sends the browser to /, so
 * that the token leaves the address bar. */
static enum MHD_Result login(a2__console *con, struct MHD_Connection *c,
                             const char *token)
{
    if (!con->token)
        return reply_text(c, MHD_HTTP_BAD_REQUEST,
                          "this console needs no token");
    if (!ct_equal(token, con->token))
        return reply_text(c, MHD_HTTP_UNAUTHORIZED,
                          "a2 console: wrong token\n");
    struct MHD_Response *r = MHD_create_response_from_buffer(
            0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    char cookie[160];
    snprintf(cookie, sizeof cookie,
             LOGIN_COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict", con->login);
    MHD_add_response_header(r, MHD_HTTP_HEADER_SET_COOKIE, cookie);
    MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, "/");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    return queue(c, MHD_HTTP_SEE_OTHER, r);
}

static enum MHD_Result serve_tail(a2__console *con, struct MHD_Connection *c)
{
    if (!con->audit_path)
        return reply_json(c, a2__con_error(MHD_HTTP_NOT_FOUND,
                                           "no audit trail: start the "
                                           "console with --audit FILE"));
    int last = 50;
    const char *l = query_arg(c, "last");
    if (l) {
        int64_t v;
        if (a2__num_parse_i64(l, 0, 1000, &v) != 0)
            return reply_json(c, a2__con_error(MHD_HTTP_BAD_REQUEST,
                                               "last must be 0 to 1000"));
        last = (int)v;
    }
    if (atomic_fetch_add(&con->tails, 1) >= MAX_TAILS) {
        atomic_fetch_sub(&con->tails, 1);
        return reply_json(c, a2__con_error(MHD_HTTP_SERVICE_UNAVAILABLE,
                                           "too many live tails open (%d)",
                                           MAX_TAILS));
    }
    const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    a2__con_tail_opts o = {
            .consumer = query_arg(c, "consumer"),
            .session = query_arg(c, "session"),
            .transition = query_arg(c, "transition"),
            .last = last,
            .last_id = header(c, "Last-Event-ID"),
            .client_fd = ci ? (int)ci->connect_fd : -1,
    };
    a2__con_tail *t = a2__con_tail_new(con, con->audit_path, &o);
    if (!t) {
        atomic_fetch_sub(&con->tails, 1);
        return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    struct MHD_Response *r = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, 16 * 1024, a2__con_tail_read, t,
            a2__con_tail_free);
    if (!r) {
        a2__con_tail_free(t);
        return MHD_NO;
    }
    typed(r, "text/event-stream; charset=utf-8", "no-store");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return queue(c, MHD_HTTP_OK, r);
}

static enum MHD_Result dispatch(a2__console *con, struct MHD_Connection *c,
                                const char *url, const char *method,
                                req_state *rs)
{
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    bool post = strcmp(method, "POST") == 0;
    bool api = strncmp(url, "/api/", 5) == 0;
    if (!get && !post) {
        struct MHD_Response *r = MHD_create_response_from_buffer(
                18, (void *)"method not allowed", MHD_RESPMEM_PERSISTENT);
        if (!r)
            return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD, POST");
        return queue(c, MHD_HTTP_METHOD_NOT_ALLOWED, r);
    }
    if (con->check_host) {
        const char *host = header(c, MHD_HTTP_HEADER_HOST);
        if (host && !host_is_loopback(host))
            return refuse(c, api, MHD_HTTP_FORBIDDEN,
                          "Host refused: this console listens on loopback "
                          "and answers only localhost, 127.0.0.1 or [::1]");
    }
    if (get && strcmp(url, "/") == 0) {
        const char *token = query_arg(c, "token");
        if (token)
            return login(con, c, token);
    }
    if (!authorized(con, c))
        return refuse(c, api, MHD_HTTP_UNAUTHORIZED,
                      "a2 console: this console needs its token: open "
                      "/?token=TOKEN once (TOKEN is the content of its "
                      "--token-file), or send Authorization: Bearer TOKEN");
    if (post) {
        if (rs->too_large)
            return refuse(c, api, MHD_HTTP_CONTENT_TOO_LARGE,
                          "request body over 64 KiB");
        const char *why = post_refusal(con, c);
        if (why)
            return refuse(c, api, MHD_HTTP_FORBIDDEN, why);
        if (!api)
            return refuse(c, api, MHD_HTTP_NOT_FOUND, "not found");
        const char *ct = header(c, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!ct || strncasecmp(ct, "application/json", 16) != 0 ||
            (ct[16] && ct[16] != ';' && ct[16] != ' '))
            return reply_json(c, a2__con_error(MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                               "the body must be "
                                               "application/json"));
        json_error_t jerr;
        json_t *body = json_loadb(rs->body ? rs->body : "", rs->len,
                                  JSON_REJECT_DUPLICATES, &jerr);
        if (!json_is_object(body)) {
            json_decref(body);
            return reply_json(c, a2__con_error(MHD_HTTP_BAD_REQUEST,
                                               "the body is not a JSON "
                                               "object"));
        }
        a2__con_request req = {.arg = query_arg, .arg_ctx = c, .body = body};
        a2__con_reply reply = a2__con_api_post(con, url, &req);
        json_decref(body);
        return reply_json(c, reply);
    }
    if (api) {
        if (strcmp(url, "/api/tail") == 0)
            return serve_tail(con, c);
        a2__con_request req = {.arg = query_arg, .arg_ctx = c};
        return reply_json(c, a2__con_api_get(con, url, &req));
    }
    const struct a2_embedded_file *f = asset_at(url);
    if (!f)
        return reply_text(c, MHD_HTTP_NOT_FOUND, "not found");
    return serve_asset(c, f);
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)version;
    a2__console *con = cls;
    req_state *rs = *con_cls;
    if (!rs) {
        rs = calloc(1, sizeof *rs);
        if (!rs)
            return MHD_NO;
        *con_cls = rs;
        const char *cl = header(c, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > MAX_BODY)
            rs->too_large = true;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!rs->too_large) {
            if (*upload_size > MAX_BODY - rs->len) {
                rs->too_large = true;
                free(rs->body);
                rs->body = NULL;
                rs->len = 0;
            } else {
                char *nb = realloc(rs->body, rs->len + *upload_size + 1);
                if (!nb)
                    return MHD_NO;
                memcpy(nb + rs->len, upload, *upload_size);
                rs->body = nb;
                rs->len += *upload_size;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return dispatch(con, c, url, method, rs);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    req_state *rs = *con_cls;
    if (rs) {
        free(rs->body);
        free(rs);
        *con_cls = NULL;
    }
}

/* ── start and stop ──────────────────────────────────────────────────── */

static bool sockaddr_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >>
                24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a =
                &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

/* The addresses host:port resolves to (free them with freeaddrinfo), or
 * NULL with err. */
static struct addrinfo *resolve(const char *host, const char *port, char *err,
                                size_t errlen)
{
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0) {
        snprintf(err, errlen, "could not resolve --listen host %s: %s", host,
                 gai_strerror(rc));
        return NULL;
    }
    return ai;
}

/* Every address is a loopback one. */
static bool all_loopback(const struct addrinfo *ai)
{
    for (const struct addrinfo *p = ai; p; p = p->ai_next)
        if (!sockaddr_loopback(p->ai_addr))
            return false;
    return true;
}

/* Binds and listens on the first address: the descriptor, or -1 with err.
 * *bound is the port. */
static int listen_on(const struct addrinfo *ai, const char *spec, int *bound,
                     char *err, size_t errlen)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "could not create a socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
        snprintf(err, errlen, "could not listen on %s: %s", spec,
                 strerror(errno));
        close(fd);
        return -1;
    }
    *bound = a2__addr_bound_port(fd);
    return fd;
}

int a2__cli_cmd_console(a2__cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
            A2__CLI_ARG("listen", 'l'),
            A2__CLI_ARG("token-file", 't'),
            A2__CLI_FLAG("read-only", 'r'),
            A2__CLI_ARG("audit", 'a'),
            A2__CLI_ARG("consumer-metrics", 'm'),
            A2__CLI_OPTS_END,
    };
    const char *listen_spec = DEFAULT_LISTEN, *token_file = NULL;
    a2__console con = {.db = cli->db};
    int rc = A2__CLI_OK, c;
    optind = 0;
    while ((c = a2__cli_next_opt(cli, argc, argv, opts, help_text, &rc)) !=
           -1) {
        if (c == -2)
            return rc;
        switch (c) {
        case 'l':
            listen_spec = optarg;
            break;
        case 't':
            token_file = optarg;
            break;
        case 'r':
            con.read_only = true;
            break;
        case 'a':
            con.audit_path = optarg;
            break;
        case 'm':
            con.metrics_url = optarg;
            break;
        default:
            return a2__cli_usage(cli, "unknown option for console");
        }
    }
    if (optind < argc)
        return a2__cli_usage(cli, "console takes no argument (got '%s')",
                             argv[optind]);

    a2__addr addr;
    int prc = a2__addr_parse(listen_spec, &addr);
    if (prc != A2__ADDR_OK || addr.kind != A2__ADDR_TCP) {
        a2__addr_clear(&addr);
        if (prc == A2__ADDR_ENOMEM)
            return a2__cli_fail(cli, "out of memory");
        return a2__cli_usage(cli,
                             "bad --listen '%s' (expected tcp:HOST:PORT, e.g. "
                             "tcp:127.0.0.1:8188)",
                             listen_spec);
    }
    int64_t port_n;
    if (a2__num_parse_i64(addr.port, 0, 65535, &port_n) != 0) {
        a2__addr_clear(&addr);
        return a2__cli_usage(cli, "bad --listen '%s': PORT must be 0 to 65535",
                             listen_spec);
    }
    char err[600];
    if (con.metrics_url &&
        a2__con_metrics_check(con.metrics_url, err, sizeof err) != 0) {
        a2__addr_clear(&addr);
        return a2__cli_usage(cli, "%s", err);
    }
    struct addrinfo *ai = resolve(addr.host, addr.port, err, sizeof err);
    if (!ai) {
        a2__addr_clear(&addr);
        return a2__cli_fail(cli, "%s", err);
    }
    bool loopback = all_loopback(ai);
    if (!loopback && !token_file) {
        freeaddrinfo(ai);
        a2__addr_clear(&addr);
        return a2__cli_usage(cli,
                             "--listen %s is not a loopback address: it needs "
                             "--token-file (every request then carries the "
                             "token)",
                             listen_spec);
    }
    if (con.audit_path) {
        FILE *f = fopen(con.audit_path, "r");
        if (!f) {
            freeaddrinfo(ai);
            a2__addr_clear(&addr);
            return a2__cli_fail(cli, "could not open audit file %s: %s",
                                con.audit_path, strerror(errno));
        }
        fclose(f);
    }
    if (token_file) {
        con.token = a2_wire_read_token(token_file, err, sizeof err);
        if (!con.token) {
            freeaddrinfo(ai);
            a2__addr_clear(&addr);
            return a2__cli_fail(cli, "%s", err);
        }
    }
    if (a2__random_hex(con.csrf, 32) != 0 ||
        a2__random_hex(con.login, 32) != 0) {
        freeaddrinfo(ai);
        a2__addr_clear(&addr);
        free(con.token);
        return a2__cli_fail(cli, "could not read random bytes: %s",
                            strerror(errno));
    }
    pthread_mutex_init(&con.mu, NULL);
    pthread_cond_init(&con.cv, NULL);
    struct MHD_Daemon *mhd = NULL;
    sigset_t stop_set, old_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set, SIGTERM);
    bool masked = false;

    /* The database, once, so that a wrong --db fails the start. */
    if ((rc = a2__cli_store_open(cli, &con.stores[0])) != A2__CLI_OK)
        goto done;
    if (!getenv("A2_STORE_TIMEOUT_MS") &&
        a2_store_set_timeout(con.stores[0], 15000) != 0) {
        rc = a2__cli_fail(cli, "could not set the store's timeout");
        goto done;
    }

    int bound = 0;
    int fd = listen_on(ai, listen_spec, &bound, err, sizeof err);
    if (fd < 0) {
        rc = a2__cli_fail(cli, "%s", err);
        goto done;
    }
    con.check_host = loopback && !con.token;

    /* Every thread started from here on blocks SIGINT and SIGTERM: this
     * one takes them with sigwait. */
    pthread_sigmask(SIG_BLOCK, &stop_set, &old_set);
    masked = true;
    signal(SIGPIPE, SIG_IGN);
    mhd = MHD_start_daemon(
            MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                    MHD_USE_POLL,
            0, NULL, NULL, answer, &con, MHD_OPTION_LISTEN_SOCKET,
            (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned int)CONNECTION_LIMIT, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
            (unsigned int)PER_IP_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT,
            (unsigned int)CONNECTION_TIMEOUT,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY,
            MHD_OPTION_NOTIFY_COMPLETED, completed, &con, MHD_OPTION_END);
    if (!mhd) {
        close(fd);
        rc = a2__cli_fail(cli, "could not start the HTTP server on %s",
                          listen_spec);
        goto done;
    }
    bool v6 = strchr(addr.host, ':') != NULL;
    fprintf(cli->out, "a2 console: http://%s%s%s:%d/%s%s\n", v6 ? "[" : "",
            addr.host, v6 ? "]" : "", bound,
            con.token ? " (token required)" : "",
            con.read_only ? " (read-only)" : "");
    fflush(cli->out);

    for (;;) {
        int sig = 0;
        if (sigwait(&stop_set, &sig) == 0 && (sig == SIGINT || sig == SIGTERM))
            break;
    }
done:
    freeaddrinfo(ai);
    atomic_store(&con.stopping, 1);
    if (mhd)
        MHD_stop_daemon(mhd); /* closes the listening socket too */
    if (masked)
        pthread_sigmask(SIG_SETMASK, &old_set, NULL);
    a2__con_pool_close(&con);
    pthread_mutex_destroy(&con.mu);
    pthread_cond_destroy(&con.cv);
    free(con.token);
    a2__addr_clear(&addr);
    return rc;
}
