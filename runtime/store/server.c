/* server.c: the rendezvous store's server (see todist/store.h), one thread
 * polling every connection; frames are decoded by frame.c.
 *
 * Invariants:
 *  S1. Nothing is allocated for a frame before td__store_frame_header()
 *      accepted its header; until a client is admitted its frames are at
 *      most TD_STORE_PREAUTH_MAX bytes.
 *  S2. At most max_unauth connections are unadmitted at once (the oldest is
 *      dropped to admit a newer one) and none stays unadmitted longer than
 *      the handshake timeout, so strangers hold few sockets, briefly. A
 *      real client dropped this way dials again (client.c) until its
 *      connect timeout: hundreds of ranks starting at once exceed it.
 *  S3. The server holds at most max_conns connections: the rest of the
 *      process's descriptor limit (at least fd_reserve) stays free for the
 *      job's own use (UCX, files). While the limit is reached, or accept()
 *      fails for want of descriptors or memory, the listening socket is not
 *      polled for ACCEPT_BACKOFF s: a full table never makes the thread spin.
 *  S4. A client's queued output never exceeds OUT_MAX bytes; a client that
 *      would exceed it (it sends requests and does not read the replies) is
 *      closed. A well-behaved client has at most one reply queued.
 *  S5. A pending WAIT's deadline is finite arithmetic: its ms are capped at
 *      TD_STORE_WAIT_MS_MAX (UINT64_MAX = forever) and poll's timeout is
 *      clamped before the conversion to int.
 *
 * Thread safety: td_store_server_start/stop are not thread-safe; everything
 * else runs on the server's own thread. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "todist/store.h"
#include "runtime/store/frame.h"
#include "base/clock.h"
#include "base/log.h"

#define NBUCKETS           4096
#define HANDSHAKE_TIMEOUT  10.0   /* s (env TODIST_STORE_HANDSHAKE_TIMEOUT) */
#define MAX_UNAUTH         64     /* env TODIST_STORE_MAX_UNAUTH */
#define FD_RESERVE_MAX     256    /* descriptors kept for the job (S3) */
#define FD_RESERVE_MIN     16
#define ACCEPT_BACKOFF     0.1    /* s without accepting after EMFILE (S3) */
/* S4: two full replies (a legitimate client has one outstanding). */
#define OUT_MAX  (2u * (TD_STORE_REPLY_MAX + TD_STORE_HDR_LEN))

typedef struct entry {
    struct entry *next;
    char         *key;
    size_t        klen;
    uint8_t      *val;
    size_t        vlen;
} entry_t;

typedef struct {
    int            fd;
    bool           admitted;
    uint8_t        nonce[TD_STORE_NONCE_LEN];
    /* input: header, then payload */
    uint8_t        hdr[TD_STORE_HDR_LEN];
    size_t         hdr_got;
    uint8_t       *in;
    size_t         in_len, in_got;
    /* output queue */
    td_store_buf_t out;
    size_t         out_off;
    /* a pending wait: the decoded request (pointing into wait_req) */
    uint8_t       *wait_req;
    td_store_msg_t wait;
    double         wait_deadline;   /* < 0: forever */
    bool           closing;         /* close once the output is flushed */
    double         born;            /* for the handshake deadline */
} conn_t;

struct td_store_server {
    int         lfd;
    int         wake[2];
    uint16_t    port;
    char       *token;        /* NULL: open */
    pthread_t   thread;
    conn_t    **conns;
    size_t      nconns, capconns;
    size_t      n_unauth;
    entry_t    *buckets[NBUCKETS];
    int64_t     nkeys;
    double      handshake_timeout;
    size_t      max_unauth, max_conns;
    double      accept_paused_until;
    bool        warned_full, warned_out;
};

/* ---- the key-value table ----------------------------------------------- */

static uint64_t
hash_key(const void *k, size_t len)
{
    const uint8_t *p = k;
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */

    for (size_t i = 0; i < len; i++) {
        h = (h ^ p[i]) * 1099511628211ull;
    }
    return h;
}

static entry_t **
kv_slot(td_store_server_t *s, const void *key, size_t klen)
{
    entry_t **e = &s->buckets[hash_key(key, klen) % NBUCKETS];

    while (*e != NULL && !((*e)->klen == klen &&
                           memcmp((*e)->key, key, klen) == 0)) {
        e = &(*e)->next;
    }
    return e;
}

static entry_t *
kv_find(td_store_server_t *s, const void *key, size_t klen)
{
    return *kv_slot(s, key, klen);
}

static int
kv_set(td_store_server_t *s, const void *key, size_t klen, const void *val,
       size_t vlen)
{
    entry_t **slot = kv_slot(s, key, klen);
    uint8_t *v = malloc(vlen ? vlen : 1);

    if (v == NULL) {
        return -1;
    }
    if (vlen > 0) {
        memcpy(v, val, vlen);
    }
    if (*slot == NULL) {
        entry_t *e = calloc(1, sizeof(*e));
        char *k = malloc(klen ? klen : 1);
        if (e == NULL || k == NULL) {
            free(e);
            free(k);
            free(v);
            return -1;
        }
        if (klen > 0) {
            memcpy(k, key, klen);
        }
        e->key = k;
        e->klen = klen;
        *slot = e;
        s->nkeys++;
    } else {
        free((*slot)->val);
    }
    (*slot)->val = v;
    (*slot)->vlen = vlen;
    return 0;
}

static int
kv_delete(td_store_server_t *s, const void *key, size_t klen)
{
    entry_t **slot = kv_slot(s, key, klen);
    entry_t *e = *slot;

    if (e == NULL) {
        return 0;
    }
    *slot = e->next;
    free(e->key);
    free(e->val);
    free(e);
    s->nkeys--;
    return 1;
}

/* ---- replies ------------------------------------------------------------ */

static void
conn_free(conn_t *c)
{
    close(c->fd);
    free(c->in);
    free(c->out.p);
    free(c->wait_req);
    free(c);
}

/* Queue a reply frame {u64 IV if given, then A (as a string if A_IS_STR)}.
 * On allocation failure, or past OUT_MAX (S4), the connection is closed. */
static void
reply(td_store_server_t *s, conn_t *c, uint8_t type, const void *a,
      size_t alen, bool a_is_str, const uint64_t *iv)
{
    size_t start = c->out.len;
    size_t need = TD_STORE_HDR_LEN + (iv ? 8 : 0) + (a_is_str ? 4 : 0) + alen;
    int rc;

    if (c->closing) {
        return;
    }
    if (c->out.len - c->out_off + need > OUT_MAX) {
        if (!s->warned_out) {
            s->warned_out = true;
            td_log_warn("store: closing a client that does not read its "
                        "replies (more than %u bytes queued)", OUT_MAX);
        }
        c->closing = true;
        c->out.len = c->out_off = 0;   /* drop, do not flush */
        return;
    }
    if (c->out_off > 0) {   /* keep the buffer at most OUT_MAX long */
        memmove(c->out.p, c->out.p + c->out_off, c->out.len - c->out_off);
        c->out.len -= c->out_off;
        c->out_off = 0;
        start = c->out.len;
    }
    rc = td__store_frame_begin(&c->out, type);
    if (iv != NULL) {
        rc = rc || td__store_buf_put_u64(&c->out, *iv);
    }
    if (a != NULL || a_is_str) {
        rc = rc || (a_is_str ? td__store_buf_put_str(&c->out, a, alen)
                             : td__store_buf_put(&c->out, a, alen));
    }
    if (rc != 0) {
        c->closing = true;
        c->out.len = start;
        return;
    }
    td__store_frame_end(&c->out, start);
}

/* An error reply {u64 td_status_t, message}; FATAL closes the connection
 * after it (protocol violations), otherwise the client may go on. */
static void
reply_error_code(td_store_server_t *s, conn_t *c, td_status_t code,
                 const char *msg, bool fatal)
{
    uint64_t v = (uint64_t)(int64_t)code;

    reply(s, c, TD_STORE_REP_ERROR, msg, strlen(msg), true, &v);
    c->closing |= fatal;
}

static void
reply_error(td_store_server_t *s, conn_t *c, const char *msg)
{
    reply_error_code(s, c, strstr(msg, "token") ? TD_ERR_AUTH
                                                : TD_ERR_PROTOCOL, msg, true);
}

/* ---- requests ----------------------------------------------------------- */

/* Try to complete C's wait: 1 done (reply queued), 0 still waiting. */
static int
wait_check(td_store_server_t *s, conn_t *c, double now)
{
    td_store_rd_t r = { c->wait.keys, c->wait.keys_len, 0 };
    uint32_t n = c->wait.nkeys, i;

    for (i = 0; i < n; i++) {
        const uint8_t *k = NULL;
        size_t klen = 0;
        td__store_rd_str(&r, TD_STORE_KEY_MAX, &k, &klen);   /* F2 */
        if (kv_find(s, k, klen) == NULL) {
            break;
        }
    }
    if (i == n) {
        reply(s, c, TD_STORE_REP_OK, NULL, 0, false, NULL);
    } else if (c->wait_deadline >= 0 && now >= c->wait_deadline) {
        uint64_t idx = i;
        reply(s, c, TD_STORE_REP_TIMEOUT, NULL, 0, false, &idx);
    } else {
        return 0;
    }
    free(c->wait_req);
    c->wait_req = NULL;
    return 1;
}

static void
wake_waiters(td_store_server_t *s)
{
    double now = td_now_s();

    for (size_t i = 0; i < s->nconns; i++) {
        if (s->conns[i] != NULL && s->conns[i]->wait_req != NULL) {
            wait_check(s, s->conns[i], now);
        }
    }
}

static void
handle_auth(td_store_server_t *s, conn_t *c, uint8_t type, const uint8_t *p,
            size_t len)
{
    uint8_t want[TD_STORE_MAC_LEN], mine[TD_STORE_MAC_LEN];
    const uint8_t *cnonce = p, *mac = p + TD_STORE_NONCE_LEN;

    if (type != TD_STORE_MSG_AUTH || len != TD_STORE_PREAUTH_MAX) {
        reply_error(s, c, "store: expected an AUTH frame");
        return;
    }
    if (s->token != NULL) {
        td__store_frame_mac(s->token, TD_STORE_LABEL_CLIENT, c->nonce, cnonce,
                           want);
        if (CRYPTO_memcmp(want, mac, TD_STORE_MAC_LEN) != 0) {
            reply_error(s, c, "store: job token rejected");
            return;
        }
        td__store_frame_mac(s->token, TD_STORE_LABEL_SERVER, c->nonce, cnonce,
                           mine);
    } else {
        memset(mine, 0, sizeof(mine));
    }
    c->admitted = true;
    s->n_unauth--;
    reply(s, c, TD_STORE_MSG_AUTH_OK, mine, TD_STORE_MAC_LEN, false, NULL);
}

/* ADD: parse the current value as an integer, add, store as text. */
static void
handle_add(td_store_server_t *s, conn_t *c, const td_store_msg_t *m)
{
    entry_t *e = kv_find(s, m->key, m->klen);
    int64_t cur = 0;
    char text[32];
    uint64_t x;

    if (e != NULL) {
        char *end;
        if (e->vlen == 0 || e->vlen >= sizeof(text)) {
            goto not_int;
        }
        memcpy(text, e->val, e->vlen);
        text[e->vlen] = '\0';
        errno = 0;
        cur = strtoll(text, &end, 10);
        if (*end != '\0' || errno != 0) {
            goto not_int;
        }
    }
    cur = (int64_t)((uint64_t)cur + m->num);   /* wraps like c10d's add */
    snprintf(text, sizeof(text), "%" PRId64, cur);
    if (kv_set(s, m->key, m->klen, text, strlen(text)) != 0) {
        reply_error(s, c, "store: server out of memory");
        return;
    }
    x = (uint64_t)cur;
    reply(s, c, TD_STORE_REP_INT, NULL, 0, false, &x);
    wake_waiters(s);
    return;

not_int:
    reply_error_code(s, c, TD_ERR_INVALID, "store: add on a key whose value "
                     "is not an integer", false);
}

/* Handle one complete request frame of an admitted client; the payload
 * P is the connection's (a WAIT keeps it). */
static void
handle_request(td_store_server_t *s, conn_t *c, uint8_t type, uint8_t *p,
               size_t len)
{
    td_store_msg_t m;
    entry_t *e;
    uint64_t x;

    if (td__store_frame_request(type, p, len, &m) != TD_OK) {
        td_error_clear();
        reply_error(s, c, type >= TD_STORE_MSG_SET &&
                          type <= TD_STORE_MSG_NUMKEYS
                          ? "store: malformed request"
                          : "store: unknown request type");
        return;
    }
    switch (type) {
    case TD_STORE_MSG_SET:
        if (kv_set(s, m.key, m.klen, m.val, m.vlen) != 0) {
            reply_error(s, c, "store: server out of memory");
            return;
        }
        reply(s, c, TD_STORE_REP_OK, NULL, 0, false, NULL);
        wake_waiters(s);
        return;
    case TD_STORE_MSG_GET:
        e = kv_find(s, m.key, m.klen);
        if (e == NULL) {
            reply(s, c, TD_STORE_REP_NOTFOUND, NULL, 0, false, NULL);
        } else {
            reply(s, c, TD_STORE_REP_VALUE, e->val, e->vlen, true, NULL);
        }
        return;
    case TD_STORE_MSG_WAIT:
        /* Keep the payload: the decoded keys point into it (S5 caps ms). */
        c->wait_req = p;
        c->in = NULL;
        c->wait = m;
        c->wait_deadline = m.num == UINT64_MAX ? -1.0
            : td_now_s() + (double)(m.num < TD_STORE_WAIT_MS_MAX
                                    ? m.num : TD_STORE_WAIT_MS_MAX) / 1000.0;
        wait_check(s, c, td_now_s());
        return;
    case TD_STORE_MSG_ADD:
        handle_add(s, c, &m);
        return;
    case TD_STORE_MSG_CAS:
        e = kv_find(s, m.key, m.klen);
        if ((e == NULL && m.vlen == 0) ||
            (e != NULL && e->vlen == m.vlen &&
             memcmp(e->val, m.val, m.vlen) == 0)) {
            if (kv_set(s, m.key, m.klen, m.val2, m.v2len) != 0) {
                reply_error(s, c, "store: server out of memory");
                return;
            }
            reply(s, c, TD_STORE_REP_VALUE, m.val2, m.v2len, true, NULL);
            wake_waiters(s);
        } else if (e == NULL) {
            reply(s, c, TD_STORE_REP_NOTFOUND, NULL, 0, false, NULL);
        } else {
            reply(s, c, TD_STORE_REP_VALUE, e->val, e->vlen, true, NULL);
        }
        return;
    case TD_STORE_MSG_DEL:
        x = (uint64_t)kv_delete(s, m.key, m.klen);
        reply(s, c, TD_STORE_REP_INT, NULL, 0, false, &x);
        return;
    case TD_STORE_MSG_NUMKEYS:
        x = (uint64_t)s->nkeys;
        reply(s, c, TD_STORE_REP_INT, NULL, 0, false, &x);
        return;
    }
}

/* ---- connections -------------------------------------------------------- */

/* Read what is available on C and handle complete frames; -1 = close. */
static int
conn_read(td_store_server_t *s, conn_t *c)
{
    for (;;) {
        ssize_t n;

        if (c->closing) {
            return 0;
        }
        if (c->wait_req != NULL) {
            /* One request at a time: a client does not send while it
             * waits, so leave any bytes for later (poll asks only for a
             * hang-up then, so this does not spin). */
            return 0;
        }
        if (c->hdr_got < TD_STORE_HDR_LEN) {
            n = recv(c->fd, c->hdr + c->hdr_got,
                     TD_STORE_HDR_LEN - c->hdr_got, MSG_DONTWAIT);
        } else {
            n = recv(c->fd, c->in + c->in_got, c->in_len - c->in_got,
                     MSG_DONTWAIT);
        }
        if (n == 0) {
            return -1;
        }
        if (n < 0) {
            return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
        }
        if (c->hdr_got < TD_STORE_HDR_LEN) {
            uint32_t len;
            c->hdr_got += n;
            if (c->hdr_got < TD_STORE_HDR_LEN) {
                continue;
            }
            /* S1: check the header before allocating anything. */
            if (td__store_frame_header(c->hdr, c->admitted
                                      ? TD_STORE_FRAME_MAX
                                      : TD_STORE_PREAUTH_MAX, &len) != 0) {
                reply_error(s, c, "store: bad frame header (version or "
                            "length)");
                return 0;
            }
            c->in_len = len;
            c->in_got = 0;
            c->in = malloc(len ? len : 1);
            if (c->in == NULL) {
                return -1;
            }
        } else {
            c->in_got += n;
        }
        if (c->in_got == c->in_len) {
            if (c->admitted) {
                handle_request(s, c, c->hdr[1], c->in, c->in_len);
            } else {
                handle_auth(s, c, c->hdr[1], c->in, c->in_len);
            }
            free(c->in);   /* NULL when a WAIT took it */
            c->in = NULL;
            c->hdr_got = 0;
        }
    }
}

/* Write queued output; -1 = close. */
static int
conn_write(conn_t *c)
{
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.p + c->out_off,
                         c->out.len - c->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
        }
        c->out_off += n;
    }
    c->out.len = c->out_off = 0;
    return c->closing ? -1 : 0;
}

static void
drop_conn(td_store_server_t *s, size_t i)
{
    conn_t *c = s->conns[i];

    if (!c->admitted) {
        s->n_unauth--;
    }
    conn_free(c);
    s->conns[i] = NULL;
}

/* S2: make room for one more unadmitted connection by dropping the oldest. */
static void
drop_oldest_unauth(td_store_server_t *s)
{
    size_t oldest = SIZE_MAX;

    for (size_t i = 0; i < s->nconns; i++) {
        conn_t *c = s->conns[i];
        if (c != NULL && !c->admitted &&
            (oldest == SIZE_MAX || c->born < s->conns[oldest]->born)) {
            oldest = i;
        }
    }
    if (oldest != SIZE_MAX) {
        drop_conn(s, oldest);
    }
}

static void
compact(td_store_server_t *s)
{
    size_t j = 0;

    for (size_t i = 0; i < s->nconns; i++) {
        if (s->conns[i] != NULL) {
            s->conns[j++] = s->conns[i];
        }
    }
    s->nconns = j;
}

static void
server_accept(td_store_server_t *s)
{
    int fd;
    conn_t *c;
    size_t start;

    if (s->nconns >= s->max_conns) {   /* S3: leave the rest to the job */
        if (!s->warned_full) {
            s->warned_full = true;
            td_log_warn("store: %zu connections, the most this process's "
                        "descriptor limit allows; new ones wait",
                        s->nconns);
        }
        s->accept_paused_until = td_now_s() + ACCEPT_BACKOFF;
        return;
    }
    fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
            if (!s->warned_full) {
                s->warned_full = true;
                td_log_warn("store: accept: %s; pausing new connections",
                            strerror(errno));
            }
            s->accept_paused_until = td_now_s() + ACCEPT_BACKOFF;
        }
        return;
    }
    if (s->n_unauth >= s->max_unauth) {
        drop_oldest_unauth(s);
        compact(s);
    }
    if (s->nconns == s->capconns) {
        size_t cap = s->capconns ? 2 * s->capconns : 16;
        conn_t **p = realloc(s->conns, cap * sizeof(*p));
        if (p == NULL) {
            close(fd);
            return;
        }
        s->conns = p;
        s->capconns = cap;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        return;
    }
    c->fd = fd;
    c->born = td_now_s();
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
    if (RAND_bytes(c->nonce, TD_STORE_NONCE_LEN) != 1) {
        conn_free(c);
        return;
    }
    start = c->out.len;
    if (td__store_frame_begin(&c->out, TD_STORE_MSG_HELLO) ||
        td__store_buf_put(&c->out, (uint8_t[]){ s->token != NULL }, 1) ||
        td__store_buf_put(&c->out, c->nonce, TD_STORE_NONCE_LEN)) {
        conn_free(c);
        return;
    }
    td__store_frame_end(&c->out, start);
    s->conns[s->nconns++] = c;
    s->n_unauth++;
}

/* poll's timeout for deadline NEXT (< 0: none), clamped (S5). */
static int
poll_ms(double next, double now)
{
    double ms;

    if (next < 0) {
        return -1;
    }
    if (next <= now) {
        return 0;
    }
    ms = (next - now) * 1000.0 + 1.0;
    return ms > 60000.0 ? 60000 : (int)ms;
}

static void *
server_main(void *arg)
{
    td_store_server_t *s = arg;
    struct pollfd *pfd = NULL;
    size_t cap = 0;

    pthread_setname_np(pthread_self(), "td-store");
    for (;;) {
        size_t n = s->nconns + 2, i;
        double now = td_now_s(), next = -1;
        bool listen_on = now >= s->accept_paused_until;

        if (n > cap) {
            struct pollfd *p = realloc(pfd, n * 2 * sizeof(*p));
            if (p == NULL) {
                break;   /* cannot serve: leave, clients see EOF */
            }
            pfd = p;
            cap = n * 2;
        }
        pfd[0] = (struct pollfd){ .fd = s->wake[0], .events = POLLIN };
        pfd[1] = (struct pollfd){ .fd = listen_on ? s->lfd : -1,
                                  .events = POLLIN };
        if (!listen_on) {
            next = s->accept_paused_until;
        }
        for (i = 0; i < s->nconns; i++) {
            conn_t *c = s->conns[i];
            pfd[i + 2] = (struct pollfd){ .fd = c->fd,
                .events = (c->wait_req != NULL ? POLLRDHUP : POLLIN) |
                          (c->out.len ? POLLOUT : 0) };
            if (c->wait_req != NULL && c->wait_deadline >= 0 &&
                (next < 0 || c->wait_deadline < next)) {
                next = c->wait_deadline;
            }
            if (!c->admitted &&
                (next < 0 || c->born + s->handshake_timeout < next)) {
                next = c->born + s->handshake_timeout;
            }
        }
        if (poll(pfd, n, poll_ms(next, now)) < 0 && errno != EINTR) {
            break;
        }
        if (pfd[0].revents) {
            break;
        }
        for (i = 0; i < n - 2; i++) {
            conn_t *c = s->conns[i];
            short re = pfd[i + 2].revents;
            int drop = 0;
            if (re & (POLLRDHUP | POLLHUP | POLLERR)) {
                drop = c->wait_req != NULL || conn_read(s, c) != 0;
            } else if (re & POLLIN) {
                drop = conn_read(s, c) != 0;
            }
            if (!drop && c->wait_req != NULL) {
                wait_check(s, c, td_now_s());
            }
            if (!drop && (c->out.len || c->closing)) {
                drop = conn_write(c) != 0;
            }
            /* S2: a connection that does not authenticate in time is
             * dropped, so strangers cannot hold sockets open for free. */
            if (!drop && !c->admitted &&
                td_now_s() > c->born + s->handshake_timeout) {
                drop = 1;
            }
            if (drop) {
                drop_conn(s, i);
            }
        }
        compact(s);
        if (listen_on && (pfd[1].revents & POLLIN)) {
            server_accept(s);
        }
    }
    free(pfd);
    return NULL;
}

/* S3: how many connections the descriptor limit leaves room for. */
static size_t
conn_budget(void)
{
    struct rlimit rl;
    size_t limit, reserve;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > (rlim_t)1 << 24) {
        return (size_t)1 << 24;
    }
    limit = (size_t)rl.rlim_cur;
    reserve = limit / 4;
    reserve = reserve > FD_RESERVE_MAX ? FD_RESERVE_MAX
            : reserve < FD_RESERVE_MIN ? FD_RESERVE_MIN : reserve;
    return limit > reserve + 8 ? limit - reserve : 8;
}

static double
env_double(const char *name, double dflt)
{
    const char *v = getenv(name);
    char *end;
    double d;

    if (v == NULL || v[0] == '\0') {
        return dflt;
    }
    d = strtod(v, &end);
    if (*end != '\0' || !(d > 0) || d > 1e6) {
        td_log_warn("store: ignoring %s='%s' (want a positive number)", name,
                    v);
        return dflt;
    }
    return d;
}

td_status_t
td_store_server_start(const char *addr, uint16_t port, const char *token,
                      td_store_server_t **server_p)
{
    static int warned_open;
    td_store_server_t *s;
    struct addrinfo hints = { .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE };
    struct addrinfo *ai = NULL;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char portstr[8];
    int one = 1, rc;
    td_status_t status;

    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "store: out of memory");
    }
    s->lfd = s->wake[0] = s->wake[1] = -1;
    s->handshake_timeout = env_double("TODIST_STORE_HANDSHAKE_TIMEOUT",
                                      HANDSHAKE_TIMEOUT);
    s->max_unauth = (size_t)env_double("TODIST_STORE_MAX_UNAUTH", MAX_UNAUTH);
    s->max_conns = conn_budget();
    if (token != NULL && token[0] != '\0') {
        s->token = strdup(token);
        if (s->token == NULL) {
            status = td_error(TD_ERR_NO_MEMORY, "store: out of memory");
            goto err_free;
        }
    } else if (!__atomic_exchange_n(&warned_open, 1, __ATOMIC_RELAXED)) {
        td_log_warn("store: TODIST_JOB_TOKEN is not set; the "
                    "rendezvous store accepts any client (no authentication)");
    }

    snprintf(portstr, sizeof(portstr), "%u", port);
    rc = getaddrinfo(addr != NULL && addr[0] != '\0' ? addr : NULL, portstr,
                     &hints, &ai);
    if (rc != 0) {
        status = td_error(TD_ERR_INVALID, "store: cannot resolve '%s': %s",
                          addr, gai_strerror(rc));
        goto err_free;
    }
    s->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->lfd < 0) {
        status = td_error(TD_ERR_IO, "store: socket: %s", strerror(errno));
        goto err_ai;
    }
    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s->lfd, ai->ai_addr, ai->ai_addrlen) != 0) {
        status = td_error(TD_ERR_IO, "store: cannot listen on %s:%u: %s",
                          addr ? addr : "*", port, strerror(errno));
        goto err_sock;
    }
    if (listen(s->lfd, 4096) != 0 ||
        getsockname(s->lfd, (struct sockaddr *)&ss, &sl) != 0) {
        status = td_error(TD_ERR_IO, "store: listen: %s", strerror(errno));
        goto err_sock;
    }
    s->port = ntohs(ss.ss_family == AF_INET6
                    ? ((struct sockaddr_in6 *)&ss)->sin6_port
                    : ((struct sockaddr_in *)&ss)->sin_port);
    if (pipe2(s->wake, O_CLOEXEC) != 0) {
        status = td_error(TD_ERR_IO, "store: pipe: %s", strerror(errno));
        goto err_sock;
    }
    rc = pthread_create(&s->thread, NULL, server_main, s);
    if (rc != 0) {
        status = td_error(TD_ERR_IO, "store: cannot start the server "
                          "thread: %s", strerror(rc));
        goto err_pipe;
    }
    freeaddrinfo(ai);
    *server_p = s;
    return TD_OK;

err_pipe:
    close(s->wake[0]);
    close(s->wake[1]);
err_sock:
    close(s->lfd);
err_ai:
    freeaddrinfo(ai);
err_free:
    free(s->token);
    free(s);
    return status;
}

uint16_t
td_store_server_port(const td_store_server_t *server)
{
    return server->port;
}

void
td_store_server_stop(td_store_server_t *s)
{
    if (s == NULL) {
        return;
    }
    (void)!write(s->wake[1], "x", 1);
    pthread_join(s->thread, NULL);
    for (size_t i = 0; i < s->nconns; i++) {
        conn_free(s->conns[i]);
    }
    free(s->conns);
    for (size_t b = 0; b < NBUCKETS; b++) {
        while (s->buckets[b] != NULL) {
            entry_t *e = s->buckets[b];
            s->buckets[b] = e->next;
            free(e->key);
            free(e->val);
            free(e);
        }
    }
    close(s->lfd);
    close(s->wake[0]);
    close(s->wake[1]);
    if (s->token != NULL) {
        OPENSSL_cleanse(s->token, strlen(s->token));
    }
    free(s->token);
    free(s);
}
