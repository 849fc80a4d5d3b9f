/* The redis:// directory backend: URL parsing (the password from the URL,
 * a password_file or RESHARD_REDIS_PASSWORD; never echoed), a connection
 * with bounded connect and command timeouts (AUTH when a password is given;
 * reconnect on the next call after a failure, which is marked transient),
 * and running the operation scripts of redis_lua.c by EVALSHA, loading them
 * again when the server lost them. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "core/diag.h"
#include "dir/redis_impl.h"

#define DEFAULT_PORT 6379
#define DEFAULT_TIMEOUT_S 5.0
#define NKEYS 10
#define RS__STR2(x) #x
#define RS__STR(x) RS__STR2(x)
#define MAX_ARGS 4 /* ARGV[2..] of any script */

static rs_status_t bad_url(rs_diag_t *diag, const char *what)
{
    /* the URL itself is not echoed: it may hold a password */
    return rs__diag_set(diag, RS_ERR_INPUT, "directory URL "
                        "redis://[[user]:password@]host[:port]"
                        "[?timeout=S&password_file=F]: %s", what);
}

static int copy_part(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap)
        return 0;
    memcpy(dst, src, n);
    dst[n] = '\0';
    return 1;
}

/* "[user]:password" before the last '@'. */
static rs_status_t parse_auth(rs__redis_dir_t *r, const char *s, size_t n,
                              rs_diag_t *diag)
{
    const char *colon = memchr(s, ':', n);
    if (colon == NULL)
        return bad_url(diag, "credentials before '@' must be "
                       "[user]:password");
    size_t ulen = (size_t)(colon - s), plen = n - ulen - 1;
    if (plen == 0)
        return bad_url(diag, "empty password before '@'");
    if (!copy_part(r->user, sizeof(r->user), s, ulen) ||
        !copy_part(r->password, sizeof(r->password), colon + 1, plen))
        return bad_url(diag, "user or password too long");
    r->has_password = 1;
    return RS_OK;
}

static rs_status_t parse_port(rs__redis_dir_t *r, const char *s, size_t n,
                              rs_diag_t *diag)
{
    long port = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || port > 65535)
            return bad_url(diag, "port is not a number in 1..65535");
        port = port * 10 + (s[i] - '0');
    }
    if (n == 0 || port < 1 || port > 65535)
        return bad_url(diag, "port is not a number in 1..65535");
    r->port = (int)port;
    return RS_OK;
}

/* "host", "host:port", "[v6addr]" or "[v6addr]:port". */
static rs_status_t parse_hostport(rs__redis_dir_t *r, const char *s, size_t n,
                                  rs_diag_t *diag)
{
    const char *host = s, *port = NULL;
    size_t hlen = n;
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (close == NULL)
            return bad_url(diag, "'[' without ']' in the host");
        host = s + 1;
        hlen = (size_t)(close - host);
        if (close + 1 < s + n && close[1] != ':')
            return bad_url(diag, "unexpected text after ']'");
        port = close + 1 < s + n ? close + 2 : NULL;
    } else {
        const char *colon = memchr(s, ':', n);
        if (colon != NULL) {
            hlen = (size_t)(colon - s);
            port = colon + 1;
        }
    }
    if (hlen == 0)
        return bad_url(diag, "empty host");
    if (!copy_part(r->host, sizeof(r->host), host, hlen))
        return bad_url(diag, "host too long");
    r->port = DEFAULT_PORT;
    return port != NULL ? parse_port(r, port, (size_t)(s + n - port), diag)
                        : RS_OK;
}

/* A password kept in a file: its first line (a final newline and CR are
 * not part of it). The path is named in messages, the content never. */
static rs_status_t read_password_file(rs__redis_dir_t *r, const char *path,
                                      rs_diag_t *diag)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return rs__diag_set(diag, RS_ERR_INPUT, "directory URL: "
                            "password_file %s: %s", path, strerror(errno));
    char buf[RS_RDIR_SECRET_MAX + 2];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    n = strcspn(buf, "\r\n");
    buf[n] = '\0';
    rs_status_t st = RS_OK;
    if (n == 0)
        st = rs__diag_set(diag, RS_ERR_INPUT, "directory URL: password_file "
                          "%s: empty first line", path);
    else if (n >= RS_RDIR_SECRET_MAX)
        st = rs__diag_set(diag, RS_ERR_INPUT, "directory URL: password_file "
                          "%s: password longer than %d bytes", path,
                          RS_RDIR_SECRET_MAX - 1);
    else
        memcpy(r->password, buf, n + 1);
    memset(buf, 0, sizeof(buf));
    if (st == RS_OK)
        r->has_password = 1;
    return st;
}

/* One "name=value" of the query. */
static rs_status_t parse_param(rs__redis_dir_t *r, const char *q, size_t n,
                               rs_diag_t *diag)
{
    char val[PATH_MAX], *end;
    if (n > 8 && strncmp(q, "timeout=", 8) == 0) {
        if (!copy_part(val, sizeof(val), q + 8, n - 8))
            return bad_url(diag, "timeout value too long");
        double t = strtod(val, &end);
        if (end == val || *end != '\0' || !isfinite(t) || t <= 0 ||
            t > 3600)
            return bad_url(diag, "timeout must be a number of seconds in "
                           "(0, 3600]");
        r->timeout_s = t;
        return RS_OK;
    }
    if (n > 14 && strncmp(q, "password_file=", 14) == 0) {
        if (r->has_password)
            return bad_url(diag, "a password in the URL and a "
                           "password_file: give one");
        if (!copy_part(val, sizeof(val), q + 14, n - 14))
            return bad_url(diag, "password_file path too long");
        return read_password_file(r, val, diag);
    }
    return bad_url(diag, "query parameters are timeout=SECONDS and "
                   "password_file=PATH");
}

static rs_status_t parse_query(rs__redis_dir_t *r, const char *q, rs_diag_t *diag)
{
    rs_status_t st = RS_OK;
    while (st == RS_OK) {
        size_t n = strcspn(q, "&");
        st = parse_param(r, q, n, diag);
        if (q[n] == '\0')
            break;
        q += n + 1;
    }
    return st;
}

/* Without a password in the URL or a file: RESHARD_REDIS_PASSWORD. */
static rs_status_t password_from_env(rs__redis_dir_t *r, rs_diag_t *diag)
{
    const char *pw = getenv("RESHARD_REDIS_PASSWORD");
    if (r->has_password || pw == NULL || pw[0] == '\0')
        return RS_OK;
    if (strlen(pw) >= sizeof(r->password))
        return rs__diag_set(diag, RS_ERR_INPUT, "RESHARD_REDIS_PASSWORD is "
                            "longer than %d bytes",
                            (int)sizeof(r->password) - 1);
    snprintf(r->password, sizeof(r->password), "%s", pw);
    r->has_password = 1;
    return RS_OK;
}

static rs_status_t parse_url(rs__redis_dir_t *r, const char *target,
                             rs_diag_t *diag)
{
    /* the password may hold any character: split at the last '@' first */
    const char *at = strrchr(target, '@');
    const char *hp = at != NULL ? at + 1 : target;
    const char *q = strchr(hp, '?');
    size_t n = q != NULL ? (size_t)(q - hp) : strlen(hp);
    if (n > 0 && hp[n - 1] == '/')
        n--; /* "redis://host:port/" */
    if (memchr(hp, '/', n) != NULL)
        return bad_url(diag, "unexpected path after host:port");
    rs_status_t st = RS_OK;
    r->timeout_s = DEFAULT_TIMEOUT_S;
    if (at != NULL)
        st = parse_auth(r, target, (size_t)(at - target), diag);
    if (st == RS_OK)
        st = parse_hostport(r, hp, n, diag);
    if (st == RS_OK && q != NULL)
        st = parse_query(r, q + 1, diag);
    if (st == RS_OK)
        st = password_from_env(r, diag);
    if (st == RS_OK)
        snprintf(r->where, sizeof(r->where), "%s:%d", r->host, r->port);
    return st;
}

static struct timeval to_tv(double s)
{
    struct timeval tv;
    tv.tv_sec = (time_t)s;
    tv.tv_usec = (suseconds_t)((s - (double)tv.tv_sec) * 1e6);
    return tv;
}

/* hiredis writes with write(): on a socket the server closed that raises
 * SIGPIPE, which would kill the caller. It is blocked around the command
 * and a SIGPIPE raised by it is consumed, leaving the process's handlers
 * alone. */
static redisReply *command(redisContext *c, int argc, const char **argv,
                           const size_t *lens)
{
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    sigpending(&pending);
    int had = sigismember(&pending, SIGPIPE);
    redisReply *reply = redisCommandArgv(c, argc, argv, lens);
    int err = errno; /* lost() tells a timeout from other failures by it */
    sigpending(&pending);
    if (!had && sigismember(&pending, SIGPIPE)) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = err;
    return reply;
}

static void drop(rs__redis_dir_t *r)
{
    if (r->c != NULL)
        redisFree(r->c);
    r->c = NULL;
}

/* A failed command leaves the context unusable: drop it and say why. */
static rs_status_t lost(rs__redis_dir_t *r, rs_diag_t *diag)
{
    /* A read that timed out reports EAGAIN, which hiredis words as
     * "Resource temporarily unavailable": say what happened instead. */
    int timed_out = r->c->err == REDIS_ERR_IO &&
                    (errno == EAGAIN || errno == EWOULDBLOCK);
    r->transient = 1;
    rs_status_t st = rs__diag_set(diag, RS_ERR_TRANSPORT, "redis %s: %s "
                                  "(timeout %g s)", r->where,
                                  timed_out ? "no reply within the timeout"
                                  : r->c->errstr[0] ? r->c->errstr
                                                    : "connection lost",
                                  r->timeout_s);
    drop(r);
    return st;
}

/* Errors a server gives while it cannot serve yet: they pass. */
static int server_busy(const char *msg)
{
    return strncmp(msg, "LOADING", 7) == 0 || strncmp(msg, "BUSY", 4) == 0 ||
           strncmp(msg, "MASTERDOWN", 10) == 0 ||
           strncmp(msg, "TRYAGAIN", 8) == 0;
}

static rs_status_t simple(rs__redis_dir_t *r, int argc, const char **argv,
                          const char *what, rs_diag_t *diag)
{
    redisReply *rep = command(r->c, argc, argv, NULL);
    if (rep == NULL)
        return lost(r, diag);
    rs_status_t st = RS_OK;
    if (rep->type == REDIS_REPLY_ERROR) {
        r->transient = server_busy(rep->str);
        st = rs__diag_set(diag, RS_ERR_TRANSPORT, "redis %s: %s refused: %s",
                          r->where, what, rep->str);
    }
    freeReplyObject(rep);
    return st;
}

static rs_status_t handshake(rs__redis_dir_t *r, rs_diag_t *diag)
{
    rs_status_t st = RS_OK;
    if (r->has_password && r->user[0] != '\0') {
        const char *argv[] = {"AUTH", r->user, r->password};
        st = simple(r, 3, argv, "authentication", diag);
    } else if (r->has_password) {
        const char *argv[] = {"AUTH", r->password};
        st = simple(r, 2, argv, "authentication", diag);
    }
    if (st == RS_OK && r->c != NULL) {
        /* NOAUTH here: the server wants a password the URL lacks */
        const char *argv[] = {"PING"};
        st = simple(r, 1, argv, "PING", diag);
    }
    return st;
}

static rs_status_t ensure_connected(rs__redis_dir_t *r, rs_diag_t *diag)
{
    if (r->c != NULL && r->c->err == 0)
        return RS_OK;
    drop(r);
    r->c = redisConnectWithTimeout(r->host, r->port, to_tv(r->timeout_s));
    if (r->c == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "redis %s: out of "
                            "memory", r->where);
    if (r->c->err != 0) {
        /* refused, reset, timed out, or a name that did not resolve now:
         * every one may pass */
        r->transient = 1;
        rs_status_t st = rs__diag_set(diag, RS_ERR_TRANSPORT, "redis %s: "
                                      "cannot connect: %s", r->where,
                                      r->c->errstr);
        drop(r);
        return st;
    }
    redisSetTimeout(r->c, to_tv(r->timeout_s));
    rs_status_t st = handshake(r, diag);
    if (st != RS_OK)
        drop(r);
    return st;
}

/* Connects when needed, handing a transient failure on to the handle. */
static rs_status_t connected(rs_dir_h dir, rs__redis_dir_t *r, rs_diag_t *diag)
{
    r->transient = 0;
    rs_status_t st = ensure_connected(r, diag);
    if (st != RS_OK && r->transient)
        rs__dir_transient(dir, st);
    return st;
}

static rs_status_t redis_open(rs_dir_h dir, const char *target,
                              const rs_dir_params_t *params, rs_diag_t *diag)
{
    rs__redis_dir_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "directory: out of "
                            "memory");
    rs_status_t st = parse_url(r, target, diag);
    if (st == RS_OK)
        st = connected(dir, r, diag);
    if (st != RS_OK && r->transient && params->connect_later)
        st = RS_OK; /* the first call connects */
    if (st != RS_OK) {
        memset(r->password, 0, sizeof(r->password));
        free(r);
        return st;
    }
    dir->priv = r;
    return RS_OK;
}

static void redis_close(rs_dir_h dir)
{
    rs__redis_dir_t *r = dir->priv;
    if (r == NULL)
        return;
    drop(r);
    memset(r->password, 0, sizeof(r->password));
    free(r);
}

rs_status_t rs__redis_dir_bad_reply(rs_dir_h dir, const char *what,
                               rs_diag_t *diag)
{
    const rs__redis_dir_t *r = dir->priv;
    return rs__diag_set(diag, RS_ERR_TRANSPORT, "redis %s: unexpected reply "
                        "to %s", r->where, what);
}

static rs_status_t load_script(rs__redis_dir_t *r, rs__redis_script_t id, rs_diag_t *diag)
{
    const char *argv[] = {"SCRIPT", "LOAD", rs__redis_script_src[id]};
    redisReply *rep = command(r->c, 3, argv, NULL);
    if (rep == NULL)
        return lost(r, diag);
    rs_status_t st = RS_OK;
    if (rep->type != REDIS_REPLY_STRING || rep->len != 40)
        st = rs__diag_set(diag, RS_ERR_TRANSPORT, "redis %s: SCRIPT LOAD "
                          "refused: %s", r->where,
                          rep->type == REDIS_REPLY_ERROR ? rep->str
                                                         : "unexpected reply");
    else
        memcpy(r->sha[id], rep->str, 41);
    freeReplyObject(rep);
    return st;
}

/* Script errors carry a code word: RSINPUT or RSINCOMPLETE. */
static rs_status_t script_error(rs__redis_dir_t *r, const char *msg,
                                rs_diag_t *diag)
{
    if (strncmp(msg, "RSINPUT ", 8) == 0)
        return rs__diag_set(diag, RS_ERR_INPUT, "%s", msg + 8);
    if (strncmp(msg, "RSINCOMPLETE ", 13) == 0)
        return rs__diag_set(diag, RS_ERR_INCOMPLETE, "%s", msg + 13);
    return rs__diag_set(diag, RS_ERR_TRANSPORT, "redis %s: %s", r->where,
                        msg);
}

typedef struct keys {
    char text[NKEYS][RS_DIR_NAME_MAX + 64];
    char desc[RS_DIR_NAME_MAX + 64];
} keys_t;

/* The model in braces is the key's hash tag: all keys of a model live on
 * one cluster node, as a script touching several of them needs. */
static void make_keys(const rs__dir_request_t *req, keys_t *k)
{
    /* KEYS[5] and KEYS[7] to KEYS[10] are the model's; the others belong
     * to the version */
    static const char *const suffix[NKEYS] = {"meta", "slots", "hb",
                                              "leases", "versions",
                                              "members", "cuts", "cutgen",
                                              "geometry", "geomgen"};
    for (int i = 0; i < NKEYS; i++) {
        if (i != 4 && i < 6)
            snprintf(k->text[i], sizeof(k->text[i]), "rs:{%s}:%lld:%s",
                     req->model, (long long)req->version, suffix[i]);
        else
            snprintf(k->text[i], sizeof(k->text[i]), "rs:{%s}:%s",
                     req->model, suffix[i]);
    }
    snprintf(k->desc, sizeof(k->desc), "version %lld of '%s'",
             (long long)req->version, req->model);
}

static redisReply *evalsha(rs__redis_dir_t *r, rs__redis_script_t id, const keys_t *k,
                           const char **args, const size_t *lens, int nargs)
{
    const char *argv[3 + NKEYS + 1 + MAX_ARGS];
    size_t alen[3 + NKEYS + 1 + MAX_ARGS];
    int n = 0;
    argv[n++] = "EVALSHA";
    argv[n++] = r->sha[id];
    argv[n++] = RS__STR(NKEYS);
    for (int i = 0; i < NKEYS; i++)
        argv[n++] = k->text[i];
    argv[n++] = k->desc;
    for (int i = 0; i < n; i++)
        alen[i] = strlen(argv[i]);
    for (int i = 0; i < nargs; i++) {
        argv[n] = args[i];
        alen[n++] = lens[i];
    }
    return command(r->c, n, argv, alen);
}

rs_status_t rs__redis_dir_eval(rs_dir_h dir, rs__redis_script_t id, const rs__dir_request_t *req,
                          const char **args, const size_t *lens, int nargs,
                          rs_diag_t *diag, redisReply **reply_p)
{
    rs__redis_dir_t *r = dir->priv;
    keys_t k;
    make_keys(req, &k);
    rs_status_t st = connected(dir, r, diag);
    for (int attempt = 0; st == RS_OK && attempt < 2; attempt++) {
        if (r->sha[id][0] == '\0' && (st = load_script(r, id, diag)) != RS_OK) {
            if (r->transient) /* the connection was lost loading it */
                rs__dir_transient(dir, st);
            break;
        }
        redisReply *rep = evalsha(r, id, &k, args, lens, nargs);
        if (rep == NULL)
            return rs__dir_transient(dir, lost(r, diag));
        if (rep->type == REDIS_REPLY_ERROR &&
            strncmp(rep->str, "NOSCRIPT", 8) == 0 && attempt == 0) {
            r->sha[id][0] = '\0'; /* flushed or restarted: load again */
            freeReplyObject(rep);
            continue;
        }
        if (rep->type == REDIS_REPLY_ERROR) {
            st = script_error(r, rep->str, diag);
            if (server_busy(rep->str))
                rs__dir_transient(dir, st);
            freeReplyObject(rep);
            return st;
        }
        *reply_p = rep;
        return RS_OK;
    }
    return st != RS_OK ? st : rs__redis_dir_bad_reply(dir, "EVALSHA", diag);
}

rs_status_t rs__redis_dir_run(rs_dir_h dir, rs__redis_script_t id, rs__dir_request_t *req,
                         const char **args, const size_t *lens, int nargs,
                         rs__redis_fill_fn fill, rs_diag_t *diag)
{
    redisReply *rep = NULL;
    rs_status_t st = rs__redis_dir_eval(dir, id, req, args, lens, nargs, diag,
                                   &rep);
    if (st == RS_OK && fill != NULL)
        st = fill(dir, rep, req, diag);
    if (rep != NULL)
        freeReplyObject(rep);
    return st;
}

const rs__dir_ops_t rs__dir_redis = {
    .name = "redis",
    .open = redis_open,
    .close = redis_close,
    .create = rs__redis_dir_create,
    .publish = rs__redis_dir_publish,
    .heartbeat = rs__redis_dir_heartbeat,
    .lookup = rs__redis_dir_lookup,
    .slot_status = rs__redis_dir_slot_status,
    .read = rs__redis_dir_read,
    .list = rs__redis_dir_list,
    .lease = rs__redis_dir_lease,
    .unlease = rs__redis_dir_unlease,
    .release = rs__redis_dir_release,
    .put_cuts = rs__redis_dir_put_cuts,
    .read_cuts = rs__redis_dir_read_cuts,
    .drop_cuts = rs__redis_dir_drop_cuts,
    .list_cuts = rs__redis_dir_list_cuts,
    .group = rs__redis_dir_group,
    .leases = rs__redis_dir_leases,
    .geometry_put = rs__redis_dir_geometry_put,
    .geometry_get = rs__redis_dir_geometry_get,
};
