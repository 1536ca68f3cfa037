/* client.c: the rendezvous store's client (see todist/store.h). Every
 * operation builds its request with frame.c and goes through one path,
 * request(): lock, send, read one reply frame, decode it, unlock.
 *
 * Invariants:
 *  C1. A reply is decoded by td__store_frame_reply() (F2) before any field is
 *      used; a header longer than TD_STORE_REPLY_MAX is rejected unread.
 *  C2. Every blocking send or receive has a deadline; only a WAIT with a
 *      negative timeout waits without one.
 *  C3. A REP_ERROR becomes the returned status with the server's message.
 *
 * Thread safety: a td_store_t may be shared between threads; request()
 * serialises calls with the client's lock. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "todist/store.h"
#include "runtime/store/frame.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/byteorder.h"

#define OP_TIMEOUT  300.0   /* s for a reply to an ordinary op */
#define WAIT_SLACK  30.0    /* s the server may answer a WAIT late */

struct td_store {
    int             fd;
    char            host[256];
    uint16_t        port;
    pthread_mutex_t lock;
    td_store_buf_t  req;
    uint8_t        *rep;    /* the last reply's payload (lock held) */
};

/* ---- the socket --------------------------------------------------------- */

static int
ms_until(double deadline)
{
    double left = deadline - td_now_s();

    if (left <= 0) {
        return 0;
    }
    return left > 60.0 ? 60000 : (int)(left * 1000) + 1;
}

/* Send all of P or fail, bounded by DEADLINE. */
static td_status_t
send_all(td_store_t *st, const uint8_t *p, size_t len, double deadline)
{
    while (len > 0) {
        ssize_t n = send(st->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            return td_error(TD_ERR_IO, "store: lost the connection to "
                            "%s:%u: %s", st->host, st->port, strerror(errno));
        }
        if (td_now_s() >= deadline) {
            return td_error(TD_ERR_TIMEOUT, "store: %s:%u does not take "
                            "requests", st->host, st->port);
        }
        struct pollfd pfd = { .fd = st->fd, .events = POLLOUT };
        poll(&pfd, 1, ms_until(deadline));
    }
    return TD_OK;
}

/* Receive exactly LEN bytes, bounded by DEADLINE (< 0: none). */
static td_status_t
recv_all(td_store_t *st, uint8_t *p, size_t len, double deadline)
{
    while (len > 0) {
        ssize_t n = recv(st->fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= n;
            continue;
        }
        if (n == 0) {
            return td_error(TD_ERR_IO, "store: %s:%u closed the connection",
                            st->host, st->port);
        }
        if (errno != EAGAIN && errno != EINTR) {
            return td_error(TD_ERR_IO, "store: lost the connection to "
                            "%s:%u: %s", st->host, st->port, strerror(errno));
        }
        if (deadline >= 0 && td_now_s() >= deadline) {
            return td_error(TD_ERR_TIMEOUT, "store: no reply from %s:%u",
                            st->host, st->port);
        }
        struct pollfd pfd = { .fd = st->fd, .events = POLLIN };
        poll(&pfd, 1, deadline < 0 ? -1 : ms_until(deadline));
    }
    return TD_OK;
}

/* Read one frame of at most MAX bytes: its type and malloc'ed payload
 * (C1, C3: a REP_ERROR becomes the returned error). */
static td_status_t
recv_frame(td_store_t *st, double deadline, size_t max, uint8_t *type_p,
           uint8_t **payload_p, size_t *len_p)
{
    uint8_t h[TD_STORE_HDR_LEN];
    uint8_t *p;
    uint32_t len;
    td_store_msg_t m;
    td_status_t status;

    status = recv_all(st, h, TD_STORE_HDR_LEN, deadline);
    if (status != TD_OK) {
        return status;
    }
    if (td__store_frame_header(h, max, &len) != 0) {
        return td_error(TD_ERR_PROTOCOL, "store: bad frame from %s:%u "
                        "(version %u, length %u)", st->host, st->port, h[0],
                        td_get_be32(h + 4));
    }
    p = malloc(len + 1);
    if (p == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "store: out of memory");
    }
    status = recv_all(st, p, len, deadline);
    if (status != TD_OK) {
        free(p);
        return status;
    }
    p[len] = '\0';
    if (h[1] == TD_STORE_REP_ERROR) {
        td_status_t code = TD_ERR_PROTOCOL;
        if (td__store_frame_reply(h[1], p, len, &m) == TD_OK) {
            if ((int64_t)m.num < 0 && (int64_t)m.num >= -1000) {
                code = (td_status_t)(int64_t)m.num;
            }
            status = td_error(code, "%.*s (server %s:%u)", (int)m.vlen,
                              (const char *)m.val, st->host, st->port);
        } else {
            status = td_error(code, "store: malformed error from %s:%u",
                              st->host, st->port);
        }
        free(p);
        return status;
    }
    *type_p = h[1];
    *payload_p = p;
    *len_p = len;
    return TD_OK;
}

static td_status_t
dial(td_store_t *st, double deadline)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM };
    char portstr[8];
    double backoff = 0.01;
    int last_err = 0;

    snprintf(portstr, sizeof(portstr), "%u", st->port);
    for (;;) {
        struct addrinfo *ai = NULL, *a;
        int rc = getaddrinfo(st->host, portstr, &hints, &ai);

        if (rc != 0 && rc != EAI_AGAIN) {
            return td_error(TD_ERR_INVALID, "store: cannot resolve '%s': %s",
                            st->host, gai_strerror(rc));
        }
        for (a = ai; a != NULL; a = a->ai_next) {
            int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK |
                            SOCK_CLOEXEC, 0);
            if (fd < 0) {
                last_err = errno;
                continue;
            }
            if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 &&
                errno == EINPROGRESS) {
                struct pollfd pfd = { .fd = fd, .events = POLLOUT };
                int err = ETIMEDOUT;
                socklen_t el = sizeof(err);
                if (td_now_s() < deadline &&
                    poll(&pfd, 1, ms_until(deadline)) > 0) {
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                }
                errno = err;
            } else if (errno != 0 && errno != EINPROGRESS) {
                /* connect failed at once; errno is set */
            } else {
                errno = 0;
            }
            if (errno == 0) {
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 },
                           sizeof(int));
                st->fd = fd;
                freeaddrinfo(ai);
                return TD_OK;
            }
            last_err = errno;
            close(fd);
        }
        if (ai != NULL) {
            freeaddrinfo(ai);
        }
        double left = deadline - td_now_s();
        if (left <= 0) {
            return td_error(TD_ERR_TIMEOUT, "store: cannot reach %s:%u: %s",
                            st->host, st->port,
                            last_err ? strerror(last_err) : "timed out");
        }
        struct timespec ts;
        double d = backoff < left ? backoff : left;
        ts.tv_sec = (time_t)d;
        ts.tv_nsec = (long)((d - ts.tv_sec) * 1e9);
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 0.5 ? 0.5 : backoff * 2;
    }
}

static td_status_t
authenticate(td_store_t *st, const char *token, double deadline)
{
    uint8_t type, *p = NULL;
    size_t len;
    uint8_t cnonce[TD_STORE_NONCE_LEN], snonce[TD_STORE_NONCE_LEN];
    uint8_t mac[TD_STORE_MAC_LEN];
    td_store_buf_t b = { 0 };
    bool have_token = token != NULL && token[0] != '\0';
    td_status_t status;

    status = recv_frame(st, deadline, 64, &type, &p, &len);
    if (status != TD_OK) {
        return status;
    }
    if (type != TD_STORE_MSG_HELLO || len != 1 + TD_STORE_NONCE_LEN ||
        p[0] > 1) {
        status = td_error(TD_ERR_PROTOCOL, "store: %s:%u is not a todist "
                          "store (bad greeting)", st->host, st->port);
        goto out;
    }
    if (p[0] == 1 && !have_token) {
        status = td_error(TD_ERR_AUTH, "store: %s:%u requires a job token "
                          "but TODIST_JOB_TOKEN is not set", st->host,
                          st->port);
        goto out;
    }
    if (p[0] == 0 && have_token) {
        /* The server does not know the token: it cannot be this job's. */
        status = td_error(TD_ERR_AUTH, "store: %s:%u does not authenticate "
                          "(started without TODIST_JOB_TOKEN); refusing it",
                          st->host, st->port);
        goto out;
    }
    if (RAND_bytes(cnonce, TD_STORE_NONCE_LEN) != 1) {
        status = td_error(TD_ERR_IO, "store: no random bytes for a nonce");
        goto out;
    }
    memcpy(snonce, p + 1, TD_STORE_NONCE_LEN);
    if (have_token) {
        td__store_frame_mac(token, TD_STORE_LABEL_CLIENT, snonce, cnonce, mac);
    } else {
        memset(mac, 0, sizeof(mac));
    }
    if (td__store_frame_begin(&b, TD_STORE_MSG_AUTH) ||
        td__store_buf_put(&b, cnonce, TD_STORE_NONCE_LEN) ||
        td__store_buf_put(&b, mac, TD_STORE_MAC_LEN)) {
        status = td_error(TD_ERR_NO_MEMORY, "store: out of memory");
        goto out;
    }
    td__store_frame_end(&b, 0);
    status = send_all(st, b.p, b.len, deadline);
    if (status != TD_OK) {
        goto out;
    }
    free(p);
    p = NULL;
    status = recv_frame(st, deadline, 64, &type, &p, &len);
    if (status != TD_OK) {
        goto out;
    }
    if (type != TD_STORE_MSG_AUTH_OK || len != TD_STORE_MAC_LEN) {
        status = td_error(TD_ERR_PROTOCOL, "store: bad AUTH_OK from %s:%u",
                          st->host, st->port);
        goto out;
    }
    if (have_token) {
        td__store_frame_mac(token, TD_STORE_LABEL_SERVER, snonce, cnonce, mac);
        if (CRYPTO_memcmp(mac, p, TD_STORE_MAC_LEN) != 0) {
            status = td_error(TD_ERR_AUTH, "store: %s:%u failed to prove it "
                              "knows the job token", st->host, st->port);
            goto out;
        }
    }
out:
    free(b.p);
    free(p);
    return status;
}

td_status_t
td_store_connect(const char *host, uint16_t port, const char *token,
                 double timeout, td_store_t **store_p)
{
    td_store_t *st;
    double deadline = td_now_s() + (timeout > 0 ? timeout : 0);
    td_status_t status;

    if (host == NULL || host[0] == '\0' || port == 0) {
        return td_error(TD_ERR_INVALID, "store: no address to connect to "
                        "(host '%s', port %u)", host ? host : "", port);
    }
    st = calloc(1, sizeof(*st));
    if (st == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "store: out of memory");
    }
    snprintf(st->host, sizeof(st->host), "%s", host);
    st->port = port;
    st->fd = -1;
    for (double backoff = 0.01;; backoff = backoff * 2 > 0.5 ? 0.5
                                                             : backoff * 2) {
        status = dial(st, deadline);
        if (status != TD_OK) {
            goto err_free;
        }
        /* The handshake gets its own bound: a server still starting up may
         * accept late, but a silent peer must not hang us. */
        status = authenticate(st, token,
                              td_now_s() + (timeout > 10 ? timeout : 10));
        if (status != TD_ERR_IO || td_now_s() + backoff >= deadline) {
            break;
        }
        /* Closed before admission: the server keeps few unadmitted
         * connections and drops the oldest for a newer one (server.c S2),
         * which hundreds of ranks starting at once can trigger. Dial
         * again; an authentication or protocol error is final. */
        td_log_debug("store: %s:%u dropped the connection before admitting "
                     "it (%s); connecting again", st->host, st->port,
                     td_last_error());
        close(st->fd);
        st->fd = -1;
        nanosleep(&(struct timespec){ .tv_nsec = (long)(backoff * 1e9) },
                  NULL);
    }
    if (status != TD_OK) {
        goto err_close;
    }
    pthread_mutex_init(&st->lock, NULL);
    *store_p = st;
    return TD_OK;

err_close:
    close(st->fd);
err_free:
    free(st);
    return status;
}

void
td_store_close(td_store_t *st)
{
    if (st == NULL) {
        return;
    }
    close(st->fd);
    pthread_mutex_destroy(&st->lock);
    free(st->req.p);
    free(st->rep);
    free(st);
}

/* ---- the one request path ----------------------------------------------- */

/* A request: its type, the fields it carries (frame.h order), and the
 * deadline for the reply (< 0: none). */
typedef struct {
    const char *op;
    uint8_t     type;
    bool        num_first;    /* WAIT: u64 ms before the keys */
    uint64_t    num;
    const char *key;          /* NULL: none */
    int         nvals;        /* 0..2 values after the key */
    const void *val[2];
    size_t      vlen[2];
    bool        num_after;    /* ADD: u64 delta after the key */
    const char *const *keys;  /* WAIT */
    size_t      nkeys;
    double      deadline;
} req_t;

static td_status_t
encode(td_store_buf_t *b, const req_t *q)
{
    int rc;

    b->len = 0;
    rc = td__store_frame_begin(b, q->type);
    if (q->num_first) {
        rc = rc || td__store_buf_put_u64(b, q->num);
    }
    if (q->key != NULL) {
        rc = rc || td__store_buf_put_str(b, q->key, strlen(q->key));
    }
    for (int i = 0; i < q->nvals; i++) {
        rc = rc || td__store_buf_put_str(b, q->val[i], q->vlen[i]);
    }
    if (q->num_after) {
        rc = rc || td__store_buf_put_u64(b, q->num);
    }
    if (q->keys != NULL) {
        rc = rc || td__store_buf_put_u32(b, (uint32_t)q->nkeys);
        for (size_t i = 0; i < q->nkeys; i++) {
            rc = rc || td__store_buf_put_str(b, q->keys[i],
                                            strlen(q->keys[i]));
        }
    }
    if (rc != 0) {
        return td_error(TD_ERR_NO_MEMORY, "store: out of memory for a %s "
                        "request", q->op);
    }
    td__store_frame_end(b, 0);
    return TD_OK;
}

/* Send Q and decode its reply into *M, whose pointers stay valid until the
 * next request; the caller holds st->lock. */
static td_status_t
request_locked(td_store_t *st, const req_t *q, td_store_msg_t *m)
{
    uint8_t type;
    size_t len;
    td_status_t status;

    status = encode(&st->req, q);
    if (status != TD_OK) {
        return status;
    }
    status = send_all(st, st->req.p, st->req.len,
                      q->deadline >= 0 ? q->deadline
                                       : td_now_s() + OP_TIMEOUT);
    if (status != TD_OK) {
        return status;
    }
    free(st->rep);
    st->rep = NULL;
    status = recv_frame(st, q->deadline, TD_STORE_REPLY_MAX, &type,
                        &st->rep, &len);
    if (status != TD_OK) {
        return status;
    }
    if (td__store_frame_reply(type, st->rep, len, m) != TD_OK) {
        return td_error(TD_ERR_PROTOCOL, "store: malformed reply 0x%02x of "
                        "%zu bytes to %s from %s:%u", type, len, q->op,
                        st->host, st->port);
    }
    return TD_OK;
}

static td_status_t
bad_reply(td_store_t *st, const char *op, uint8_t type)
{
    return td_error(TD_ERR_PROTOCOL, "store: unexpected reply 0x%02x to %s "
                    "from %s:%u", type, op, st->host, st->port);
}

/* A value reply as a malloc'ed NUL-terminated copy. */
static td_status_t
take_value(const td_store_msg_t *m, void **value_p, size_t *len_p)
{
    char *out = malloc(m->vlen + 1);

    if (out == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "store: out of memory for a value "
                        "of %zu bytes", m->vlen);
    }
    if (m->vlen > 0) {
        memcpy(out, m->val, m->vlen);
    }
    out[m->vlen] = '\0';
    *value_p = out;
    *len_p = m->vlen;
    return TD_OK;
}

/* Run Q under the lock and interpret the reply for the common shapes:
 * WANT is the reply type that means success; a VALUE reply is copied into
 * *value_p and *len_p, an INT reply into *int_p; NOTFOUND is TD_ERR_NOT_FOUND
 * (its message names the key). For a WAIT, TIMEOUT names the missing key. */
static td_status_t
request(td_store_t *st, const req_t *q, uint8_t want, void **value_p,
        size_t *len_p, int64_t *int_p)
{
    td_store_msg_t m;
    td_status_t status;

    pthread_mutex_lock(&st->lock);
    status = request_locked(st, q, &m);
    if (status != TD_OK) {
        goto out;
    }
    if (m.type == TD_STORE_REP_NOTFOUND && want == TD_STORE_REP_VALUE) {
        status = td_error(TD_ERR_NOT_FOUND, "store: %sno key '%s'",
                          q->type == TD_STORE_MSG_CAS ? "compare-set: " : "",
                          q->key);
    } else if (m.type == TD_STORE_REP_TIMEOUT &&
               q->type == TD_STORE_MSG_WAIT && m.num < q->nkeys) {
        status = td_error(TD_ERR_TIMEOUT, "store: key '%s' was not set "
                          "within %.3g s", q->keys[m.num],
                          q->num == UINT64_MAX ? -1.0 : q->num / 1000.0);
    } else if (m.type != want) {
        status = bad_reply(st, q->op, m.type);
    } else if (want == TD_STORE_REP_VALUE && value_p != NULL) {
        status = take_value(&m, value_p, len_p);
    } else if (want == TD_STORE_REP_INT && int_p != NULL) {
        *int_p = (int64_t)m.num;
    }
out:
    pthread_mutex_unlock(&st->lock);
    return status;
}

/* ---- operations ----------------------------------------------------------- */

static td_status_t
check_key(const char *key)
{
    if (key == NULL || strlen(key) > TD_STORE_KEY_MAX) {
        return td_error(TD_ERR_INVALID, "store: key '%.32s...' is longer "
                        "than %u bytes", key ? key : "(null)",
                        TD_STORE_KEY_MAX);
    }
    return TD_OK;
}

static td_status_t
check_value(const char *key, size_t len)
{
    if (len > TD_STORE_VALUE_MAX) {
        return td_error(TD_ERR_INVALID, "store: value of '%s' is %zu bytes, "
                        "more than %u", key, len, TD_STORE_VALUE_MAX);
    }
    return TD_OK;
}

td_status_t
td_store_set(td_store_t *st, const char *key, const void *value, size_t len)
{
    req_t q = { .op = "set", .type = TD_STORE_MSG_SET, .key = key,
                .nvals = 1, .val = { value }, .vlen = { len },
                .deadline = td_now_s() + OP_TIMEOUT };
    td_status_t status;

    if ((status = check_key(key)) != TD_OK ||
        (status = check_value(key, len)) != TD_OK) {
        return status;
    }
    return request(st, &q, TD_STORE_REP_OK, NULL, NULL, NULL);
}

td_status_t
td_store_wait(td_store_t *st, const char *const *keys, size_t n,
              double timeout)
{
    /* Timeouts are capped (S5 on the server): no double->int overflow. */
    double ms = timeout * 1000.0;
    req_t q = { .op = "wait", .type = TD_STORE_MSG_WAIT, .num_first = true,
                .num = timeout < 0 ? UINT64_MAX
                     : ms >= (double)TD_STORE_WAIT_MS_MAX
                       ? TD_STORE_WAIT_MS_MAX : (uint64_t)ms,
                .keys = keys, .nkeys = n };
    td_status_t status;

    if (n > TD_STORE_WAIT_MAX) {
        return td_error(TD_ERR_INVALID, "store: wait on %zu keys, more than "
                        "%u", n, TD_STORE_WAIT_MAX);
    }
    for (size_t i = 0; i < n; i++) {
        if ((status = check_key(keys[i])) != TD_OK) {
            return status;
        }
    }
    /* The server answers at its deadline; allow it some slack. */
    q.deadline = timeout < 0 ? -1.0
               : td_now_s() + q.num / 1000.0 + WAIT_SLACK;
    return request(st, &q, TD_STORE_REP_OK, NULL, NULL, NULL);
}

td_status_t
td_store_get(td_store_t *st, const char *key, double timeout,
             void **value_p, size_t *len_p)
{
    req_t q = { .op = "get", .type = TD_STORE_MSG_GET, .key = key };
    td_status_t status;

    if ((status = check_key(key)) != TD_OK) {
        return status;
    }
    if (timeout != 0) {
        status = td_store_wait(st, &key, 1, timeout);
        if (status != TD_OK) {
            return status;
        }
    }
    q.deadline = td_now_s() + OP_TIMEOUT;
    return request(st, &q, TD_STORE_REP_VALUE, value_p, len_p, NULL);
}

td_status_t
td_store_add(td_store_t *st, const char *key, int64_t delta,
             int64_t *result_p)
{
    req_t q = { .op = "add", .type = TD_STORE_MSG_ADD, .key = key,
                .num_after = true, .num = (uint64_t)delta,
                .deadline = td_now_s() + OP_TIMEOUT };
    int64_t v = 0;
    td_status_t status;

    if ((status = check_key(key)) != TD_OK) {
        return status;
    }
    status = request(st, &q, TD_STORE_REP_INT, NULL, NULL, &v);
    if (status == TD_OK && result_p != NULL) {
        *result_p = v;
    }
    return status;
}

td_status_t
td_store_compare_set(td_store_t *st, const char *key, const void *expected,
                     size_t exp_len, const void *desired, size_t des_len,
                     void **value_p, size_t *len_p)
{
    req_t q = { .op = "compare-set", .type = TD_STORE_MSG_CAS, .key = key,
                .nvals = 2, .val = { expected, desired },
                .vlen = { exp_len, des_len },
                .deadline = td_now_s() + OP_TIMEOUT };
    td_status_t status;

    if ((status = check_key(key)) != TD_OK ||
        (status = check_value(key, exp_len)) != TD_OK ||
        (status = check_value(key, des_len)) != TD_OK) {
        return status;
    }
    return request(st, &q, TD_STORE_REP_VALUE, value_p, len_p, NULL);
}

td_status_t
td_store_delete(td_store_t *st, const char *key, int *deleted_p)
{
    req_t q = { .op = "delete", .type = TD_STORE_MSG_DEL, .key = key,
                .deadline = td_now_s() + OP_TIMEOUT };
    int64_t v = 0;
    td_status_t status;

    if ((status = check_key(key)) != TD_OK) {
        return status;
    }
    status = request(st, &q, TD_STORE_REP_INT, NULL, NULL, &v);
    if (status == TD_OK && deleted_p != NULL) {
        *deleted_p = (int)v;
    }
    return status;
}

td_status_t
td_store_num_keys(td_store_t *st, int64_t *n_p)
{
    req_t q = { .op = "num_keys", .type = TD_STORE_MSG_NUMKEYS,
                .deadline = td_now_s() + OP_TIMEOUT };
    int64_t v = 0;
    td_status_t status;

    status = request(st, &q, TD_STORE_REP_INT, NULL, NULL, &v);
    if (status == TD_OK) {
        *n_p = v;
    }
    return status;
}

td_status_t
td_store_barrier(td_store_t *st, const char *name, int world_size,
                 double timeout)
{
    char kn[TD_STORE_KEY_MAX + 8], kd[TD_STORE_KEY_MAX + 8];
    const char *keys[1] = { kd };
    int64_t n, arrived;
    td_status_t status;

    if (name == NULL || strlen(name) > TD_STORE_KEY_MAX - 8 ||
        world_size < 1) {
        return td_error(TD_ERR_INVALID, "store: barrier needs a name of at "
                        "most %u bytes and world_size >= 1 (got %d)",
                        TD_STORE_KEY_MAX - 8, world_size);
    }
    snprintf(kn, sizeof(kn), "%s/n", name);
    snprintf(kd, sizeof(kd), "%s/done", name);
    status = td_store_add(st, kn, 1, &n);
    if (status != TD_OK) {
        return status;
    }
    if (n == world_size) {
        status = td_store_set(st, kd, "1", 1);
        if (status != TD_OK) {
            return status;
        }
    }
    status = td_store_wait(st, keys, 1, timeout);
    if (status == TD_ERR_TIMEOUT &&
        td_store_add(st, kn, 0, &arrived) == TD_OK) {
        status = td_error(TD_ERR_TIMEOUT, "store: barrier '%s': %" PRId64
                          " of %d arrived within %.3g s", name, arrived,
                          world_size, timeout);
    }
    return status;
}
