/* store.c: the rendezvous store (see todist/store.h).
 *
 * Wire format (all integers big-endian). A frame is an 8-byte header
 *   u8 version (TD_STORE_VERSION) | u8 type | u16 zero | u32 payload length
 * followed by the payload. Strings in payloads are u32 length + bytes.
 * Handshake: the server sends HELLO {u8 auth, 32-byte nonce}; the client
 * answers AUTH {32-byte client nonce, 32-byte MAC}; the server checks the MAC
 * and answers AUTH_OK {32-byte MAC over the same nonces, other direction},
 * which the client checks. MAC = HMAC-SHA256(token, label | snonce | cnonce).
 * Until a client is admitted the server accepts only frames of a few bytes,
 * so a stranger cannot make it allocate. */
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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "todist/store.h"
#include "base/clock.h"
#include "base/byteorder.h"
#include "base/log.h"

#define TD_STORE_VERSION     1
#define HDR_LEN              8
#define NONCE_LEN            32
#define MAC_LEN              32
#define PREAUTH_FRAME_MAX    (NONCE_LEN + MAC_LEN)
/* The largest legal payload: a compare-set (key + two values) or a wait on
 * TD_STORE_WAIT_MAX keys, whichever is larger, plus field lengths. */
#define FRAME_MAX            (2u * TD_STORE_VALUE_MAX + TD_STORE_KEY_MAX + 64u)
#define NBUCKETS             4096
#define OP_TIMEOUT           300.0   /* s for a reply to an ordinary op */
#define HANDSHAKE_TIMEOUT    10.0    /* s a stranger may stay unadmitted
                                      * (env TODIST_STORE_HANDSHAKE_TIMEOUT) */

enum {
    MSG_HELLO = 0x01, MSG_AUTH = 0x02, MSG_AUTH_OK = 0x03,
    MSG_SET = 0x10, MSG_GET = 0x11, MSG_WAIT = 0x12, MSG_ADD = 0x13,
    MSG_CAS = 0x14, MSG_DEL = 0x15, MSG_NUMKEYS = 0x16,
    REP_OK = 0x80, REP_VALUE = 0x81, REP_INT = 0x82, REP_NOTFOUND = 0x83,
    REP_TIMEOUT = 0x84, REP_ERROR = 0x85
};

static const char MAC_LABEL_CLIENT[] = "todist-store-v1 client";
static const char MAC_LABEL_SERVER[] = "todist-store-v1 server";

/* ---- helpers shared by client and server ------------------------------ */

static void
compute_mac(const char *token, const char *label, const uint8_t *snonce,
            const uint8_t *cnonce, uint8_t *mac)
{
    uint8_t msg[64 + 2 * NONCE_LEN];
    size_t llen = strlen(label);
    unsigned int mlen = MAC_LEN;

    memcpy(msg, label, llen);
    memcpy(msg + llen, snonce, NONCE_LEN);
    memcpy(msg + llen + NONCE_LEN, cnonce, NONCE_LEN);
    HMAC(EVP_sha256(), token, (int)strlen(token), msg,
         llen + 2 * NONCE_LEN, mac, &mlen);
}

/* A growable byte buffer for building payloads. */
typedef struct {
    uint8_t *p;
    size_t   len, cap;
} buf_t;

static int
buf_reserve(buf_t *b, size_t more)
{
    if (b->len + more <= b->cap) {
        return 0;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) {
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (p == NULL) {
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int
buf_put(buf_t *b, const void *data, size_t len)
{
    if (buf_reserve(b, len) != 0) {
        return -1;
    }
    if (len > 0) {
        memcpy(b->p + b->len, data, len);
    }
    b->len += len;
    return 0;
}

static int
buf_put_u32(buf_t *b, uint32_t v)
{
    uint8_t x[4];

    td_put_be32(x, v);
    return buf_put(b, x, 4);
}

static int
buf_put_u64(buf_t *b, uint64_t v)
{
    uint8_t x[8];

    td_put_be64(x, v);
    return buf_put(b, x, 8);
}

static int
buf_put_str(buf_t *b, const void *s, size_t len)
{
    return buf_put_u32(b, (uint32_t)len) || buf_put(b, s, len);
}

/* Start a frame of TYPE in B (the length is filled by frame_finish). */
static int
frame_begin(buf_t *b, uint8_t type)
{
    uint8_t h[HDR_LEN] = { TD_STORE_VERSION, type, 0, 0, 0, 0, 0, 0 };

    return buf_put(b, h, HDR_LEN);
}

static void
frame_finish(buf_t *b, size_t start)
{
    td_put_be32(b->p + start + 4, (uint32_t)(b->len - start - HDR_LEN));
}

/* A reader over a received payload; every read is bounds-checked. */
typedef struct {
    const uint8_t *p;
    size_t         len, off;
} rd_t;

static int
rd_u32(rd_t *r, uint32_t *v)
{
    if (r->len - r->off < 4) {
        return -1;
    }
    *v = td_get_be32(r->p + r->off);
    r->off += 4;
    return 0;
}

static int
rd_u64(rd_t *r, uint64_t *v)
{
    if (r->len - r->off < 8) {
        return -1;
    }
    *v = td_get_be64(r->p + r->off);
    r->off += 8;
    return 0;
}

static int
rd_str(rd_t *r, size_t max, const uint8_t **s, size_t *len)
{
    uint32_t n;

    if (rd_u32(r, &n) != 0 || n > max || r->len - r->off < n) {
        return -1;
    }
    *s = r->p + r->off;
    *len = n;
    r->off += n;
    return 0;
}

static void
set_nodelay(int fd)
{
    int one = 1;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- the server -------------------------------------------------------- */

typedef struct entry {
    struct entry *next;
    char         *key;
    size_t        klen;
    uint8_t      *val;
    size_t        vlen;
} entry_t;

typedef struct {
    int      fd;
    bool     admitted;
    uint8_t  nonce[NONCE_LEN];
    /* input: header, then payload */
    uint8_t  hdr[HDR_LEN];
    size_t   hdr_got;
    uint8_t *in;
    size_t   in_len, in_got;
    /* output queue */
    buf_t    out;
    size_t   out_off;
    /* a pending wait: the raw request payload and its deadline */
    uint8_t *wait_req;
    size_t   wait_len;
    double   wait_deadline;   /* < 0: forever */
    bool     closing;         /* close once the output is flushed */
    double   born;            /* for the handshake deadline */
} conn_t;

struct td_store_server {
    int         lfd;
    int         wake[2];
    uint16_t    port;
    char       *token;        /* NULL: open */
    pthread_t   thread;
    conn_t    **conns;
    size_t      nconns, capconns;
    entry_t    *buckets[NBUCKETS];
    int64_t     nkeys;
    double      handshake_timeout;
};

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
    memcpy(v, val, vlen);
    if (*slot == NULL) {
        entry_t *e = calloc(1, sizeof(*e));
        char *k = malloc(klen ? klen : 1);
        if (e == NULL || k == NULL) {
            free(e);
            free(k);
            free(v);
            return -1;
        }
        memcpy(k, key, klen);
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

static void
conn_free(conn_t *c)
{
    close(c->fd);
    free(c->in);
    free(c->out.p);
    free(c->wait_req);
    free(c);
}

/* Queue a reply frame; on allocation failure the connection is dropped. */
static void
reply(conn_t *c, uint8_t type, const void *a, size_t alen, bool a_is_str,
      const uint64_t *iv)
{
    size_t start = c->out.len;
    int rc = frame_begin(&c->out, type);

    if (iv != NULL) {
        rc = rc || buf_put_u64(&c->out, *iv);
    }
    if (a != NULL || a_is_str) {
        rc = rc || (a_is_str ? buf_put_str(&c->out, a, alen)
                             : buf_put(&c->out, a, alen));
    }
    if (rc != 0) {
        c->closing = true;
        c->out.len = start;
        return;
    }
    frame_finish(&c->out, start);
}

/* An error reply {u64 td_status_t, message}; FATAL closes the connection
 * after it (protocol violations), otherwise the client may go on. */
static void
reply_error_code(conn_t *c, td_status_t code, const char *msg, bool fatal)
{
    uint64_t v = (uint64_t)(int64_t)code;

    reply(c, REP_ERROR, msg, strlen(msg), true, &v);
    c->closing |= fatal;
}

static void
reply_error(conn_t *c, const char *msg)
{
    reply_error_code(c, strstr(msg, "token") ? TD_ERR_AUTH : TD_ERR_PROTOCOL,
                     msg, true);
}

/* Try to complete C's wait: 1 done (reply queued), 0 still waiting. */
static int
wait_check(td_store_server_t *s, conn_t *c, double now)
{
    rd_t r = { c->wait_req, c->wait_len, 8 };
    uint32_t n = 0, i;

    rd_u32(&r, &n);   /* validated when the wait was accepted */
    for (i = 0; i < n; i++) {
        const uint8_t *k = NULL;
        size_t klen = 0;
        rd_str(&r, TD_STORE_KEY_MAX, &k, &klen);
        if (kv_find(s, k, klen) == NULL) {
            break;
        }
    }
    if (i == n) {
        reply(c, REP_OK, NULL, 0, false, NULL);
    } else if (c->wait_deadline >= 0 && now >= c->wait_deadline) {
        uint64_t idx = i;
        reply(c, REP_TIMEOUT, NULL, 0, false, &idx);
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
handle_auth(td_store_server_t *s, conn_t *c, uint8_t type, rd_t *r)
{
    uint8_t want[MAC_LEN], mine[MAC_LEN];
    const uint8_t *cnonce = r->p, *mac = r->p + NONCE_LEN;

    if (type != MSG_AUTH || r->len != NONCE_LEN + MAC_LEN) {
        reply_error(c, "store: expected an AUTH frame");
        return;
    }
    if (s->token != NULL) {
        compute_mac(s->token, MAC_LABEL_CLIENT, c->nonce, cnonce, want);
        if (CRYPTO_memcmp(want, mac, MAC_LEN) != 0) {
            reply_error(c, "store: job token rejected");
            return;
        }
        compute_mac(s->token, MAC_LABEL_SERVER, c->nonce, cnonce, mine);
    } else {
        memset(mine, 0, sizeof(mine));
    }
    c->admitted = true;
    reply(c, MSG_AUTH_OK, mine, MAC_LEN, false, NULL);
}

/* Handle one complete request frame of an admitted client. */
static void
handle_request(td_store_server_t *s, conn_t *c, uint8_t type, rd_t *r)
{
    const uint8_t *k, *v, *v2;
    size_t klen, vlen, v2len;
    uint64_t x;
    entry_t *e;

    switch (type) {
    case MSG_SET:
        if (rd_str(r, TD_STORE_KEY_MAX, &k, &klen) ||
            rd_str(r, TD_STORE_VALUE_MAX, &v, &vlen) || r->off != r->len) {
            break;
        }
        if (kv_set(s, k, klen, v, vlen) != 0) {
            reply_error(c, "store: server out of memory");
            return;
        }
        reply(c, REP_OK, NULL, 0, false, NULL);
        wake_waiters(s);
        return;
    case MSG_GET:
        if (rd_str(r, TD_STORE_KEY_MAX, &k, &klen) || r->off != r->len) {
            break;
        }
        e = kv_find(s, k, klen);
        if (e == NULL) {
            reply(c, REP_NOTFOUND, NULL, 0, false, NULL);
        } else {
            reply(c, REP_VALUE, e->val, e->vlen, true, NULL);
        }
        return;
    case MSG_WAIT: {
        uint32_t n;
        if (rd_u64(r, &x) || rd_u32(r, &n) || n > TD_STORE_WAIT_MAX) {
            break;
        }
        for (uint32_t i = 0; i < n; i++) {
            if (rd_str(r, TD_STORE_KEY_MAX, &k, &klen)) {
                goto bad;
            }
        }
        if (r->off != r->len) {
            break;
        }
        c->wait_req = malloc(r->len);
        if (c->wait_req == NULL) {
            reply_error(c, "store: server out of memory");
            return;
        }
        memcpy(c->wait_req, r->p, r->len);
        c->wait_len = r->len;
        c->wait_deadline = x == UINT64_MAX ? -1.0 : td_now_s() + x / 1000.0;
        wait_check(s, c, td_now_s());
        return;
    }
    case MSG_ADD: {
        int64_t cur = 0;
        char text[32];
        if (rd_str(r, TD_STORE_KEY_MAX, &k, &klen) || rd_u64(r, &x) ||
            r->off != r->len) {
            break;
        }
        e = kv_find(s, k, klen);
        if (e != NULL) {
            char tmp[32];
            char *end;
            if (e->vlen == 0 || e->vlen >= sizeof(tmp)) {
                reply_error_code(c, TD_ERR_INVALID, "store: add on a key "
                                 "whose value is not an integer", false);
                return;
            }
            memcpy(tmp, e->val, e->vlen);
            tmp[e->vlen] = '\0';
            errno = 0;
            cur = strtoll(tmp, &end, 10);
            if (*end != '\0' || errno != 0) {
                reply_error_code(c, TD_ERR_INVALID, "store: add on a key "
                                 "whose value is not an integer", false);
                return;
            }
        }
        cur = (int64_t)((uint64_t)cur + x);   /* wraps like c10d's add */
        snprintf(text, sizeof(text), "%" PRId64, cur);
        if (kv_set(s, k, klen, text, strlen(text)) != 0) {
            reply_error(c, "store: server out of memory");
            return;
        }
        x = (uint64_t)cur;
        reply(c, REP_INT, NULL, 0, false, &x);
        wake_waiters(s);
        return;
    }
    case MSG_CAS:
        if (rd_str(r, TD_STORE_KEY_MAX, &k, &klen) ||
            rd_str(r, TD_STORE_VALUE_MAX, &v, &vlen) ||
            rd_str(r, TD_STORE_VALUE_MAX, &v2, &v2len) || r->off != r->len) {
            break;
        }
        e = kv_find(s, k, klen);
        if ((e == NULL && vlen == 0) ||
            (e != NULL && e->vlen == vlen && memcmp(e->val, v, vlen) == 0)) {
            if (kv_set(s, k, klen, v2, v2len) != 0) {
                reply_error(c, "store: server out of memory");
                return;
            }
            reply(c, REP_VALUE, v2, v2len, true, NULL);
            wake_waiters(s);
        } else if (e == NULL) {
            reply(c, REP_NOTFOUND, NULL, 0, false, NULL);
        } else {
            reply(c, REP_VALUE, e->val, e->vlen, true, NULL);
        }
        return;
    case MSG_DEL:
        if (rd_str(r, TD_STORE_KEY_MAX, &k, &klen) || r->off != r->len) {
            break;
        }
        x = (uint64_t)kv_delete(s, k, klen);
        reply(c, REP_INT, NULL, 0, false, &x);
        return;
    case MSG_NUMKEYS:
        if (r->len != 0) {
            break;
        }
        x = (uint64_t)s->nkeys;
        reply(c, REP_INT, NULL, 0, false, &x);
        return;
    default:
        reply_error(c, "store: unknown request type");
        return;
    }
bad:
    reply_error(c, "store: malformed request");
}

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
        if (c->hdr_got < HDR_LEN) {
            n = recv(c->fd, c->hdr + c->hdr_got, HDR_LEN - c->hdr_got,
                     MSG_DONTWAIT);
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
        if (c->hdr_got < HDR_LEN) {
            c->hdr_got += n;
            if (c->hdr_got < HDR_LEN) {
                continue;
            }
            /* Check the header before allocating anything. */
            uint32_t len = td_get_be32(c->hdr + 4);
            if (c->hdr[0] != TD_STORE_VERSION || c->hdr[2] != 0 ||
                c->hdr[3] != 0 ||
                len > (c->admitted ? FRAME_MAX : PREAUTH_FRAME_MAX)) {
                reply_error(c, "store: bad frame header (version or length)");
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
            rd_t r = { c->in, c->in_len, 0 };
            if (c->admitted) {
                handle_request(s, c, c->hdr[1], &r);
            } else {
                handle_auth(s, c, c->hdr[1], &r);
            }
            free(c->in);
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
        ssize_t n = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
        }
        c->out_off += n;
    }
    c->out.len = c->out_off = 0;
    return c->closing ? -1 : 0;
}

static void
server_accept(td_store_server_t *s)
{
    int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    conn_t *c;
    size_t start;

    if (fd < 0) {
        return;
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
    set_nodelay(fd);
    if (RAND_bytes(c->nonce, NONCE_LEN) != 1) {
        conn_free(c);
        return;
    }
    start = c->out.len;
    if (frame_begin(&c->out, MSG_HELLO) ||
        buf_put(&c->out, (uint8_t[]){ s->token != NULL }, 1) ||
        buf_put(&c->out, c->nonce, NONCE_LEN)) {
        conn_free(c);
        return;
    }
    frame_finish(&c->out, start);
    s->conns[s->nconns++] = c;
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
        int timeout_ms = -1;

        if (n > cap) {
            struct pollfd *p = realloc(pfd, n * 2 * sizeof(*p));
            if (p == NULL) {
                break;   /* cannot serve: leave, clients see EOF */
            }
            pfd = p;
            cap = n * 2;
        }
        pfd[0] = (struct pollfd){ .fd = s->wake[0], .events = POLLIN };
        pfd[1] = (struct pollfd){ .fd = s->lfd, .events = POLLIN };
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
        if (next >= 0) {
            timeout_ms = next <= now ? 0 : (int)((next - now) * 1000) + 1;
        }
        if (poll(pfd, n, timeout_ms) < 0 && errno != EINTR) {
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
            /* A connection that does not authenticate in time is dropped,
             * so strangers cannot hold sockets open for free. */
            if (!drop && !c->admitted &&
                td_now_s() > c->born + s->handshake_timeout) {
                drop = 1;
            }
            if (drop) {
                conn_free(c);
                s->conns[i] = NULL;
            }
        }
        /* compact the connection array */
        size_t j = 0;
        for (i = 0; i < s->nconns; i++) {
            if (s->conns[i] != NULL) {
                s->conns[j++] = s->conns[i];
            }
        }
        s->nconns = j;
        if (pfd[1].revents & POLLIN) {
            server_accept(s);
        }
    }
    free(pfd);
    return NULL;
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
    s->handshake_timeout = HANDSHAKE_TIMEOUT;
    const char *ht = getenv("TODIST_STORE_HANDSHAKE_TIMEOUT");
    if (ht != NULL && atof(ht) > 0) {
        s->handshake_timeout = atof(ht);
    }
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

/* ---- the client -------------------------------------------------------- */

struct td_store {
    int             fd;
    char            host[256];
    uint16_t        port;
    pthread_mutex_t lock;
    buf_t           req;
};

/* Send all of BUF or fail, bounded by DEADLINE. */
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
        double left = deadline - td_now_s();
        if (left <= 0) {
            return td_error(TD_ERR_TIMEOUT, "store: %s:%u does not take "
                            "requests", st->host, st->port);
        }
        struct pollfd pfd = { .fd = st->fd, .events = POLLOUT };
        poll(&pfd, 1, (int)(left * 1000) + 1);
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
        int ms = -1;
        if (deadline >= 0) {
            double left = deadline - td_now_s();
            if (left <= 0) {
                return td_error(TD_ERR_TIMEOUT, "store: no reply from %s:%u",
                                st->host, st->port);
            }
            ms = (int)(left * 1000) + 1;
        }
        struct pollfd pfd = { .fd = st->fd, .events = POLLIN };
        poll(&pfd, 1, ms);
    }
    return TD_OK;
}

/* Read one reply frame: its type and malloc'ed payload. A REP_ERROR becomes
 * the returned error carrying the server's message. */
static td_status_t
recv_frame(td_store_t *st, double deadline, size_t max, uint8_t *type_p,
           uint8_t **payload_p, size_t *len_p)
{
    uint8_t h[HDR_LEN];
    uint8_t *p;
    uint32_t len;
    td_status_t status;

    status = recv_all(st, h, HDR_LEN, deadline);
    if (status != TD_OK) {
        return status;
    }
    len = td_get_be32(h + 4);
    if (h[0] != TD_STORE_VERSION || h[2] != 0 || h[3] != 0 || len > max) {
        return td_error(TD_ERR_PROTOCOL, "store: bad frame from %s:%u "
                        "(version %u, length %u)", st->host, st->port, h[0],
                        len);
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
    if (h[1] == REP_ERROR) {
        rd_t r = { p, len, 0 };
        const uint8_t *m;
        size_t mlen;
        uint64_t c64;
        td_status_t code = TD_ERR_PROTOCOL;
        if (rd_u64(&r, &c64) == 0 && rd_str(&r, 1024, &m, &mlen) == 0) {
            if ((int64_t)c64 < 0 && (int64_t)c64 >= -1000) {
                code = (td_status_t)(int64_t)c64;
            }
            status = td_error(code, "%.*s (server %s:%u)", (int)mlen,
                              (const char *)m, st->host, st->port);
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
                double left = deadline - td_now_s();
                int err = ETIMEDOUT;
                socklen_t el = sizeof(err);
                if (left > 0 && poll(&pfd, 1, (int)(left * 1000) + 1) > 0) {
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                }
                errno = err;
            } else if (errno != 0 && errno != EINPROGRESS) {
                /* connect failed at once; errno is set */
            } else {
                errno = 0;
            }
            if (errno == 0) {
                set_nodelay(fd);
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
    uint8_t cnonce[NONCE_LEN], mac[MAC_LEN];
    buf_t b = { 0 };
    bool have_token = token != NULL && token[0] != '\0';
    td_status_t status;

    status = recv_frame(st, deadline, 64, &type, &p, &len);
    if (status != TD_OK) {
        return status;
    }
    if (type != MSG_HELLO || len != 1 + NONCE_LEN || p[0] > 1) {
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
    if (RAND_bytes(cnonce, NONCE_LEN) != 1) {
        status = td_error(TD_ERR_IO, "store: no random bytes for a nonce");
        goto out;
    }
    if (have_token) {
        compute_mac(token, MAC_LABEL_CLIENT, p + 1, cnonce, mac);
    } else {
        memset(mac, 0, sizeof(mac));
    }
    if (frame_begin(&b, MSG_AUTH) || buf_put(&b, cnonce, NONCE_LEN) ||
        buf_put(&b, mac, MAC_LEN)) {
        status = td_error(TD_ERR_NO_MEMORY, "store: out of memory");
        goto out;
    }
    frame_finish(&b, 0);
    status = send_all(st, b.p, b.len, deadline);
    if (status != TD_OK) {
        goto out;
    }
    uint8_t snonce[NONCE_LEN];
    memcpy(snonce, p + 1, NONCE_LEN);
    free(p);
    p = NULL;
    status = recv_frame(st, deadline, 64, &type, &p, &len);
    if (status != TD_OK) {
        goto out;
    }
    if (type != MSG_AUTH_OK || len != MAC_LEN) {
        status = td_error(TD_ERR_PROTOCOL, "store: bad AUTH_OK from %s:%u",
                          st->host, st->port);
        goto out;
    }
    if (have_token) {
        compute_mac(token, MAC_LABEL_SERVER, snonce, cnonce, mac);
        if (CRYPTO_memcmp(mac, p, MAC_LEN) != 0) {
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
    status = dial(st, deadline);
    if (status != TD_OK) {
        goto err_free;
    }
    /* The handshake gets its own bound: a server still starting up may
     * accept late, but a silent peer must not hang us. */
    status = authenticate(st, token, td_now_s() + (timeout > 10 ? timeout : 10));
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
    free(st);
}

/* Send the request built in st->req and read the reply (lock held). */
static td_status_t
roundtrip(td_store_t *st, double deadline, uint8_t *type_p,
          uint8_t **payload_p, size_t *len_p)
{
    td_status_t status;

    frame_finish(&st->req, 0);
    status = send_all(st, st->req.p, st->req.len,
                      deadline >= 0 ? deadline : td_now_s() + OP_TIMEOUT);
    if (status != TD_OK) {
        return status;
    }
    return recv_frame(st, deadline, TD_STORE_VALUE_MAX + 16, type_p,
                      payload_p, len_p);
}

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

static td_status_t
bad_reply(td_store_t *st, const char *op, uint8_t type)
{
    return td_error(TD_ERR_PROTOCOL, "store: unexpected reply 0x%02x to %s "
                    "from %s:%u", type, op, st->host, st->port);
}

/* Decode a REP_VALUE payload into a malloc'ed NUL-terminated copy. */
static td_status_t
take_value(td_store_t *st, uint8_t *p, size_t len, void **value_p,
           size_t *len_p)
{
    rd_t r = { p, len, 0 };
    const uint8_t *v;
    size_t vlen;
    char *out;

    if (rd_str(&r, TD_STORE_VALUE_MAX, &v, &vlen) || r.off != len) {
        return td_error(TD_ERR_PROTOCOL, "store: malformed value from %s:%u",
                        st->host, st->port);
    }
    out = malloc(vlen + 1);
    if (out == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "store: out of memory");
    }
    memcpy(out, v, vlen);
    out[vlen] = '\0';
    *value_p = out;
    *len_p = vlen;
    return TD_OK;
}

static td_status_t
take_int(td_store_t *st, const char *op, uint8_t type, uint8_t *p,
         size_t len, int64_t *v)
{
    if (type != REP_INT || len != 8) {
        return bad_reply(st, op, type);
    }
    *v = (int64_t)td_get_be64(p);
    return TD_OK;
}

td_status_t
td_store_set(td_store_t *st, const char *key, const void *value, size_t len)
{
    uint8_t type, *p = NULL;
    size_t plen;
    td_status_t status;

    if ((status = check_key(key)) != TD_OK ||
        (status = check_value(key, len)) != TD_OK) {
        return status;
    }
    pthread_mutex_lock(&st->lock);
    st->req.len = 0;
    if (frame_begin(&st->req, MSG_SET) ||
        buf_put_str(&st->req, key, strlen(key)) ||
        buf_put_str(&st->req, value, len)) {
        status = td_error(TD_ERR_NO_MEMORY, "store: out of memory");
    } else {
        status = roundtrip(st, td_now_s() + OP_TIMEOUT, &type, &p, &plen);
        if (status == TD_OK && type != REP_OK) {
            status = bad_reply(st, "set", type);
        }
    }
    pthread_mutex_unlock(&st->lock);
    free(p);
    return status;
}

/* Wait for keys, lock held. */
static td_status_t
wait_locked(td_store_t *st, const char *const *keys, size_t n,
            double timeout)
{
    uint8_t type, *p = NULL;
    size_t plen;
    uint64_t ms = timeout < 0 ? UINT64_MAX : (uint64_t)(timeout * 1000);
    td_status_t status;

    st->req.len = 0;
    if (frame_begin(&st->req, MSG_WAIT) || buf_put_u64(&st->req, ms) ||
        buf_put_u32(&st->req, (uint32_t)n)) {
        return td_error(TD_ERR_NO_MEMORY, "store: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (buf_put_str(&st->req, keys[i], strlen(keys[i]))) {
            return td_error(TD_ERR_NO_MEMORY, "store: out of memory");
        }
    }
    /* The server answers at its deadline; allow it some slack. */
    status = roundtrip(st, timeout < 0 ? -1.0 : td_now_s() + timeout + 30.0,
                       &type, &p, &plen);
    if (status != TD_OK) {
        return status;
    }
    if (type == REP_OK && plen == 0) {
        status = TD_OK;
    } else if (type == REP_TIMEOUT && plen == 8 && td_get_be64(p) < n) {
        status = td_error(TD_ERR_TIMEOUT, "store: key '%s' was not set "
                          "within %.3g s", keys[td_get_be64(p)], timeout);
    } else {
        status = bad_reply(st, "wait", type);
    }
    free(p);
    return status;
}

td_status_t
td_store_wait(td_store_t *st, const char *const *keys, size_t n,
              double timeout)
{
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
    pthread_mutex_lock(&st->lock);
    status = wait_locked(st, keys, n, timeout);
    pthread_mutex_unlock(&st->lock);
    return status;
}

td_status_t
td_store_get(td_store_t *st, const char *key, double timeout,
             void **value_p, size_t *len_p)
{
    uint8_t type, *p = NULL;
    size_t plen;
    td_status_t status;

    if ((status = check_key(key)) != TD_OK) {
        return status;
    }
    pthread_mutex_lock(&st->lock);
    if (timeout != 0) {
        status = wait_locked(st, &key, 1, timeout);
        if (status != TD_OK) {
            goto out;
        }
    }
    st->req.len = 0;
    if (frame_begin(&st->req, MSG_GET) ||
        buf_put_str(&st->req, key, strlen(key))) {
        status = td_error(TD_ERR_NO_MEMORY, "store: out of memory");
        goto out;
    }
    status = roundtrip(st, td_now_s() + OP_TIMEOUT, &type, &p, &plen);
    if (status != TD_OK) {
        goto out;
    }
    if (type == REP_NOTFOUND) {
        status = td_error(TD_ERR_NOT_FOUND, "store: no key '%s'", key);
    } else if (type == REP_VALUE) {
        status = take_value(st, p, plen, value_p, len_p);
    } else {
        status = bad_reply(st, "get", type);
    }
out:
    pthread_mutex_unlock(&st->lock);
    free(p);
    return status;
}

td_status_t
td_store_add(td_store_t *st, const char *key, int64_t delta,
             int64_t *result_p)
{
    uint8_t type, *p = NULL;
    size_t plen;
    int64_t v = 0;
    td_status_t status;

    if ((status = check_key(key)) != TD_OK) {
        return status;
    }
    pthread_mutex_lock(&st->lock);
    st->req.len = 0;
    if (frame_begin(&st->req, MSG_ADD) ||
        buf_put_str(&st->req, key, strlen(key)) ||
        buf_put_u64(&st->req, (uint64_t)delta)) {
        status = td_error(TD_ERR_NO_MEMORY, "store: out of memory");
    } else {
        status = roundtrip(st, td_now_s() + OP_TIMEOUT, &type, &p, &plen);
        if (status == TD_OK) {
            status = take_int(st, "add", type, p, plen, &v);
        }
    }
    pthread_mutex_unlock(&st->lock);
    free(p);
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
    uint8_t type, *p = NULL;
    size_t plen;
    td_status_t status;

    if ((status = check_key(key)) != TD_OK ||
        (status = check_value(key, exp_len)) != TD_OK ||
        (status = check_value(key, des_len)) != TD_OK) {
        return status;
    }
    pthread_mutex_lock(&st->lock);
    st->req.len = 0;
    if (frame_begin(&st->req, MSG_CAS) ||
        buf_put_str(&st->req, key, strlen(key)) ||
        buf_put_str(&st->req, expected, exp_len) ||
        buf_put_str(&st->req, desired, des_len)) {
        status = td_error(TD_ERR_NO_MEMORY, "store: out of memory");
    } else {
        status = roundtrip(st, td_now_s() + OP_TIMEOUT, &type, &p, &plen);
        if (status == TD_OK) {
            if (type == REP_VALUE) {
                status = take_value(st, p, plen, value_p, len_p);
            } else if (type == REP_NOTFOUND) {
                status = td_error(TD_ERR_NOT_FOUND, "store: compare-set: no "
                                  "key '%s'", key);
            } else {
                status = bad_reply(st, "compare-set", type);
            }
        }
    }
    pthread_mutex_unlock(&st->lock);
    free(p);
    return status;
}

td_status_t
td_store_delete(td_store_t *st, const char *key, int *deleted_p)
{
    uint8_t type, *p = NULL;
    size_t plen;
    int64_t v = 0;
    td_status_t status;

    if ((status = check_key(key)) != TD_OK) {
        return status;
    }
    pthread_mutex_lock(&st->lock);
    st->req.len = 0;
    if (frame_begin(&st->req, MSG_DEL) ||
        buf_put_str(&st->req, key, strlen(key))) {
        status = td_error(TD_ERR_NO_MEMORY, "store: out of memory");
    } else {
        status = roundtrip(st, td_now_s() + OP_TIMEOUT, &type, &p, &plen);
        if (status == TD_OK) {
            status = take_int(st, "delete", type, p, plen, &v);
        }
    }
    pthread_mutex_unlock(&st->lock);
    free(p);
    if (status == TD_OK && deleted_p != NULL) {
        *deleted_p = (int)v;
    }
    return status;
}

td_status_t
td_store_num_keys(td_store_t *st, int64_t *n_p)
{
    uint8_t type, *p = NULL;
    size_t plen;
    int64_t v = 0;
    td_status_t status;

    pthread_mutex_lock(&st->lock);
    st->req.len = 0;
    if (frame_begin(&st->req, MSG_NUMKEYS)) {
        status = td_error(TD_ERR_NO_MEMORY, "store: out of memory");
    } else {
        status = roundtrip(st, td_now_s() + OP_TIMEOUT, &type, &p, &plen);
        if (status == TD_OK) {
            status = take_int(st, "num_keys", type, p, plen, &v);
        }
    }
    pthread_mutex_unlock(&st->lock);
    free(p);
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
