/* ucx_transport/staging.c: the staging engine (see staging.h for the
 * protocol and invariants S1-S7). */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/byteorder.h"
#include "base/clock.h"
#include "base/log.h"
#include "ucx_transport/staging.h"

enum { MSG_DATA = 1, MSG_ACK = 2, MSG_NACK = 3 };
enum { J_SEND, J_RECV, J_FINISH, J_RFAIL, J_NACK };

typedef struct sxfer {
    struct sxfer      *next;
    int                refs;        /* list + jobs in flight */
    int                dst;
    uint64_t           id;
    const char        *src;
    size_t             total;
    uint64_t           n_chunks, queued, acked;
    int                unacked;     /* S1 */
    td_status_t        status;
    int                done;
    td_staging_sent_fn cb;
    void              *arg;
    double             t0;          /* td__staging_send (stats) */
} sxfer_t;

typedef struct rxfer {
    struct rxfer *next;
    int           refs;
    int           src;
    uint64_t      id;
    size_t        total;
    size_t        seen;             /* bytes received or dropped */
    size_t        placed;           /* bytes copied into DST */
    char         *dst;
    int           asked;            /* dest() called */
    td_status_t   status;
    int           done;
    double        t0;               /* first chunk arrived (stats) */
} rxfer_t;

typedef struct job {
    struct job  *next;
    int          kind;
    struct td_staging *eng;
    sxfer_t     *sx;
    rxfer_t     *rx;
    uint64_t     offset, len;
    void        *buf;
    int          pooled;           /* buf is from the pinned pool */
    td_status_t  status;
    int          peer;             /* J_NACK */
    uint64_t     id;
    double       t0;               /* J_SEND: DATA posted (stats) */
    uint8_t      hdr[TD_STAGING_MSG_BYTES];
} job_t;

struct td_staging {
    td_transport_t     *tp;
    td_staging_params_t p;
    pthread_t           thread;
    int                 started;
    pthread_mutex_t     lock;
    pthread_cond_t      cond;       /* jobs queued, pool refilled, stop */
    int                 stop;
    job_t              *head, *tail;
    sxfer_t            *sends;
    rxfer_t            *recvs;
    int                 n_sends, n_recvs;
    void               *pool[TD_STAGING_BUFFERS_MAX]; /* free buffers */
    int                 n_pool, n_buffers;            /* free, made */
    int                 recv_reserve;   /* pool buffers the receiver may use */
    int                 inflight;       /* DATA sends posted, not completed */
    td_staging_stats_t  stats;
};

/* Nanoseconds since T0 (td_now_s), for the stage counters. */
static uint64_t
ns_since(double t0)
{
    double d = td_now_s() - t0;

    return d > 0 ? (uint64_t)(d * 1e9) : 0;
}

/* ---- wire ---------------------------------------------------------------- */

void
td__staging_encode(const td_staging_msg_t *m, uint8_t out[TD_STAGING_MSG_BYTES])
{
    memset(out, 0, TD_STAGING_MSG_BYTES);
    out[0] = TD_STAGING_VERSION;
    out[1] = m->type;
    td_put_le32(out + 4, (uint32_t)m->status);
    td_put_le64(out + 8, m->id);
    td_put_le64(out + 16, m->offset);
    td_put_le64(out + 24, m->len);
    td_put_le64(out + 32, m->total);
}

td_status_t
td__staging_decode(const void *header, size_t len, size_t n_bodies,
                  const size_t *body_len, int src, td_staging_msg_t *msg_p)
{
    const uint8_t *h = header;
    td_staging_msg_t m;

    if (len != TD_STAGING_MSG_BYTES) {
        return td_error(TD_ERR_PROTOCOL, "staging: header of %zu bytes from "
                        "rank %d (want %d)", len, src, TD_STAGING_MSG_BYTES);
    }
    if (h[0] != TD_STAGING_VERSION) {
        return td_error(TD_ERR_PROTOCOL, "staging: version %u from rank %d "
                        "(speak %d)", h[0], src, TD_STAGING_VERSION);
    }
    m.type = h[1];
    m.status = (int32_t)td_get_le32(h + 4);
    m.id = td_get_le64(h + 8);
    m.offset = td_get_le64(h + 16);
    m.len = td_get_le64(h + 24);
    m.total = td_get_le64(h + 32);
    if (m.type < MSG_DATA || m.type > MSG_NACK || h[2] != 0 || h[3] != 0) {
        return td_error(TD_ERR_PROTOCOL, "staging: message type %u from rank "
                        "%d", m.type, src);
    }
    if (m.total > TD_STAGING_TOTAL_MAX || m.len > TD_STAGING_CHUNK_MAX ||
        m.offset > m.total || m.len > m.total - m.offset) {
        return td_error(TD_ERR_PROTOCOL, "staging: chunk offset=%llu len=%llu"
                        " of total=%llu from rank %d is out of bounds",
                        (unsigned long long)m.offset,
                        (unsigned long long)m.len,
                        (unsigned long long)m.total, src);
    }
    if (m.type == MSG_DATA
            ? n_bodies != (m.len > 0) || (m.len > 0 && body_len[0] != m.len)
            : n_bodies != 0) {
        return td_error(TD_ERR_PROTOCOL, "staging: %zu bodies (%zu bytes) "
                        "from rank %d do not match the header's len=%llu",
                        n_bodies, n_bodies ? body_len[0] : 0, src,
                        (unsigned long long)m.len);
    }
    if (m.type == MSG_NACK && m.status >= 0) {
        return td_error(TD_ERR_PROTOCOL, "staging: NACK from rank %d without "
                        "an error status", src);
    }
    *msg_p = m;
    return TD_OK;
}

td_route_t
td__staging_route(unsigned transport_mem_types, td_mem_type_t mem)
{
    return (transport_mem_types & (1u << mem)) ? TD_ROUTE_DIRECT
                                               : TD_ROUTE_STAGED;
}

/* ---- queue, pool, references (lock held) ------------------------------ */

static void
push_locked(td_staging_t *e, job_t *j)
{
    j->next = NULL;
    if (e->tail != NULL) {
        e->tail->next = j;
    } else {
        e->head = j;
    }
    e->tail = j;
    pthread_cond_broadcast(&e->cond);
}

static job_t *
job_new(td_staging_t *e, int kind)
{
    job_t *j = calloc(1, sizeof(*j));

    if (j != NULL) {
        j->eng = e;
        j->kind = kind;
    }
    return j;
}

/* Drop N references (a job's, and the list's when just unlinked). */
static void
sx_release_locked(sxfer_t *x, int n)
{
    x->refs -= n;
    if (x->refs == 0) {
        free(x);
    }
}
#define sx_unref_locked(e, x) sx_release_locked((x), 1)

static void
rx_release_locked(rxfer_t *x, int n)
{
    x->refs -= n;
    if (x->refs == 0) {
        free(x);
    }
}
#define rx_unref_locked(e, x) rx_release_locked((x), 1)

/* Take X off its list; 1 when it was there (the list's reference is
 * then the caller's to drop). */
static int
sx_unlink_locked(td_staging_t *e, sxfer_t *x)
{
    for (sxfer_t **pp = &e->sends; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == x) {
            *pp = x->next;
            e->n_sends--;
            return 1;
        }
    }
    return 0;
}

static int
rx_unlink_locked(td_staging_t *e, rxfer_t *x)
{
    for (rxfer_t **pp = &e->recvs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == x) {
            *pp = x->next;
            e->n_recvs--;
            return 1;
        }
    }
    return 0;
}

static void
pool_put_locked(td_staging_t *e, void *buf)
{
    e->pool[e->n_pool++] = buf;
    pthread_cond_broadcast(&e->cond);
}

/* ---- sender ------------------------------------------------------------ */

/* Queue the next chunk of X if it has a credit and a chunk left. */
static void
queue_chunk_locked(td_staging_t *e, sxfer_t *x)
{
    job_t *j;

    if (x->queued == x->n_chunks || x->unacked >= e->p.slots ||
        x->status != TD_OK || (j = job_new(e, J_SEND)) == NULL) {
        return;
    }
    j->sx = x;
    x->refs++;
    j->offset = x->queued * e->p.chunk;
    j->len = x->total - j->offset < e->p.chunk ? x->total - j->offset
                                                : e->p.chunk;
    x->queued++;
    x->unacked++;
    if ((uint64_t)x->unacked > e->stats.max_unacked) {
        e->stats.max_unacked = (uint64_t)x->unacked;
    }
    push_locked(e, j);
}

static void
finish_locked(td_staging_t *e, sxfer_t *x, td_status_t status)
{
    job_t *j;

    if (x->status == TD_OK) {
        x->status = status;
    }
    if (x->done || (j = job_new(e, J_FINISH)) == NULL) {
        return;
    }
    x->done = 1;
    j->sx = x;
    x->refs++;
    push_locked(e, j);
}

static void
send_done(void *arg, td_status_t status)
{
    job_t *j = arg;
    td_staging_t *e = j->eng;

    pthread_mutex_lock(&e->lock);
    if (j->buf != NULL) {
        pool_put_locked(e, j->buf);
    }
    if (j->pooled) {               /* J_SEND: marks a posted send */
        e->stats.wire_ns += ns_since(j->t0);
        e->inflight--;
        pthread_cond_broadcast(&e->cond);
    }
    if (status != TD_OK) {
        finish_locked(e, j->sx, status);
    }
    sx_unref_locked(e, j->sx);
    pthread_mutex_unlock(&e->lock);
    free(j);
}

/* A free pinned buffer, made when the pool has none and the bound allows,
 * else waited for (buffers come back as sends complete: S5). */
static td_status_t
buffer_get(td_staging_t *e, void **buf_p)
{
    td_status_t status = TD_OK;
    void *buf;

    pthread_mutex_lock(&e->lock);
    while (e->n_pool <= e->recv_reserve &&
           e->n_buffers == TD_STAGING_BUFFERS_MAX && !e->stop) {
        pthread_cond_wait(&e->cond, &e->lock);
    }
    if (e->stop) {
        pthread_mutex_unlock(&e->lock);
        return td_error(TD_ERR_CANCELED, "staging: engine stopping");
    }
    if (e->n_pool > e->recv_reserve) {
        *buf_p = e->pool[--e->n_pool];
        pthread_mutex_unlock(&e->lock);
        return TD_OK;
    }
    e->n_buffers++;
    pthread_mutex_unlock(&e->lock);
    status = e->p.ops.host_alloc(e->p.ops.ctx, e->p.chunk, &buf);
    if (status != TD_OK) {
        pthread_mutex_lock(&e->lock);
        e->n_buffers--;
        pthread_mutex_unlock(&e->lock);
        return status;
    }
    *buf_p = buf;
    return TD_OK;
}

static void
do_send(td_staging_t *e, job_t *j)
{
    sxfer_t *x = j->sx;
    td_status_t status = TD_OK;
    td_iov_t iov;
    td_staging_msg_t m = {MSG_DATA, 0, x->id, j->offset, j->len, x->total};
    uint64_t len = j->len;
    double t0;

    pthread_mutex_lock(&e->lock);
    status = x->status;
    if (x->unacked > 1) {
        e->stats.overlapped++;     /* an earlier chunk is still moving */
    }
    pthread_mutex_unlock(&e->lock);
    if (status == TD_OK && j->len > 0) {
        status = buffer_get(e, &j->buf);
        t0 = td_now_s();
        if (status == TD_OK) {     /* S2: copied before it is sent */
            status = e->p.ops.copy(e->p.ops.ctx, j->buf, x->src + j->offset,
                                   j->len, TD_STAGE_D2H);
        }
        if (status == TD_OK) {
            status = e->p.ops.wait(e->p.ops.ctx);
        }
        pthread_mutex_lock(&e->lock);
        e->stats.d2h_ns += ns_since(t0);
        pthread_mutex_unlock(&e->lock);
    }
    if (status == TD_OK) {
        td__staging_encode(&m, j->hdr);
        iov = (td_iov_t){j->buf, j->len, TD_MEM_HOST};
        pthread_mutex_lock(&e->lock);
        e->inflight++;
        j->pooled = 1;
        j->t0 = td_now_s();
        pthread_mutex_unlock(&e->lock);
        status = td__transport_send(e->tp, x->dst, e->p.handler_id, j->hdr,
                                   sizeof(j->hdr), &iov, j->len > 0, send_done,
                                   j);
        if (status == TD_OK) {
            pthread_mutex_lock(&e->lock);
            e->stats.chunks_sent++;
            e->stats.bytes_sent += len;   /* J may be gone already */
            pthread_mutex_unlock(&e->lock);
            return;                /* send_done frees J */
        }
        pthread_mutex_lock(&e->lock);
        e->inflight--;
        j->pooled = 0;
        pthread_mutex_unlock(&e->lock);
    }
    send_done(j, status);
}

td_status_t
td__staging_send(td_staging_t *e, int dst, uint64_t id, const void *src,
                size_t total, td_staging_sent_fn cb, void *arg)
{
    sxfer_t *x;

    if (total > TD_STAGING_TOTAL_MAX || (total > 0 && src == NULL)) {
        return td_error(TD_ERR_INVALID, "staging: transfer %llu to rank %d: "
                        "%zu bytes from %p", (unsigned long long)id, dst,
                        total, src);
    }
    x = calloc(1, sizeof(*x));
    if (x == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "staging: out of memory");
    }
    x->dst = dst;
    x->id = id;
    x->src = src;
    x->total = total;
    x->n_chunks = total == 0 ? 1 : (total + e->p.chunk - 1) / e->p.chunk;
    x->cb = cb;
    x->arg = arg;
    x->refs = 1;
    x->t0 = td_now_s();
    pthread_mutex_lock(&e->lock);
    for (sxfer_t *o = e->sends; o != NULL; o = o->next) {
        if (o->dst == dst && o->id == id) {
            pthread_mutex_unlock(&e->lock);
            free(x);
            return td_error(TD_ERR_EXISTS, "staging: transfer %llu to rank "
                            "%d is already in progress",
                            (unsigned long long)id, dst);
        }
    }
    if (e->n_sends == TD_STAGING_XFERS_MAX || e->stop) {
        pthread_mutex_unlock(&e->lock);
        free(x);
        return td_error(TD_ERR_RANGE, "staging: %d transfers in progress "
                        "(at most %d)", e->n_sends, TD_STAGING_XFERS_MAX);
    }
    x->next = e->sends;
    e->sends = x;
    e->n_sends++;
    for (int i = 0; i < e->p.slots; i++) {
        queue_chunk_locked(e, x);
    }
    pthread_mutex_unlock(&e->lock);
    return TD_OK;
}

static void
on_ack(td_staging_t *e, int src, const td_staging_msg_t *m)
{
    sxfer_t *x;

    pthread_mutex_lock(&e->lock);
    for (x = e->sends; x != NULL; x = x->next) {
        if (x->dst == src && x->id == m->id) {
            break;
        }
    }
    if (x == NULL || x->done) {
        e->stats.rejected++;       /* late or unknown: the transfer ended */
    } else if (m->type == MSG_NACK) {
        finish_locked(e, x, (td_status_t)m->status);
    } else {
        e->stats.acks_received++;
        x->unacked--;
        if (++x->acked == x->n_chunks) {
            finish_locked(e, x, TD_OK);
        } else {
            queue_chunk_locked(e, x);
        }
    }
    pthread_mutex_unlock(&e->lock);
}

/* ---- receiver ------------------------------------------------------------ */

static void
small_sent(void *arg, td_status_t status)
{
    free(arg);
}

static void
send_small(td_staging_t *e, int dst, const td_staging_msg_t *m)
{
    job_t *j = job_new(e, J_NACK);   /* carries the header until sent */

    if (j == NULL) {
        return;
    }
    td__staging_encode(m, j->hdr);
    if (td__transport_send(e->tp, dst, e->p.handler_id, j->hdr, sizeof(j->hdr),
                          NULL, 0, small_sent, j) != TD_OK) {
        free(j);
    } else if (m->type == MSG_ACK) {
        pthread_mutex_lock(&e->lock);
        e->stats.acks_sent++;
        pthread_mutex_unlock(&e->lock);
    }
}

/* Call the receiver's callback once (S4); lock held on entry and exit. */
static void
rx_complete_locked(td_staging_t *e, rxfer_t *x, td_status_t status)
{
    if (x->done) {
        return;
    }
    x->done = 1;
    if (x->status == TD_OK) {
        x->status = status;
    }
    e->stats.recv_ns += ns_since(x->t0);
    pthread_mutex_unlock(&e->lock);
    e->p.received(e->p.arg, x->status, x->src, x->id, x->dst, x->total);
    pthread_mutex_lock(&e->lock);
}

static void
do_recv(td_staging_t *e, job_t *j)
{
    rxfer_t *x = j->rx;
    td_status_t status;
    void *dst = NULL;
    td_staging_msg_t m = {MSG_ACK, 0, x->id, j->offset, j->len, x->total};
    double t0;

    pthread_mutex_lock(&e->lock);
    if (!x->asked && x->status == TD_OK) {
        x->asked = 1;
        pthread_mutex_unlock(&e->lock);
        t0 = td_now_s();
        status = e->p.dest(e->p.arg, x->src, x->id, x->total, &dst);
        pthread_mutex_lock(&e->lock);
        e->stats.dest_ns += ns_since(t0);
        if (status == TD_OK) {
            x->dst = dst;
        } else if (x->status == TD_OK) {
            x->status = status;
            m.type = MSG_NACK;
            m.status = status;
        }
    }
    status = x->status != TD_OK ? x->status : j->status;
    pthread_mutex_unlock(&e->lock);

    if (status == TD_OK && j->len > 0) {      /* S2: placed, then ACKed */
        t0 = td_now_s();
        status = e->p.ops.copy(e->p.ops.ctx, x->dst + j->offset, j->buf,
                               j->len, TD_STAGE_H2D);
        if (status == TD_OK) {
            status = e->p.ops.wait(e->p.ops.ctx);
        }
        pthread_mutex_lock(&e->lock);
        e->stats.h2d_ns += ns_since(t0);
    } else {
        pthread_mutex_lock(&e->lock);
    }
    if (j->buf != NULL) {
        if (j->pooled) {
            pool_put_locked(e, j->buf);
        } else {
            free(j->buf);
        }
    }
    x->seen += j->len;
    if (status == TD_OK) {
        x->placed += j->len;
        e->stats.chunks_received++;
        e->stats.bytes_received += j->len;
    } else if (x->status == TD_OK) {
        x->status = status;
    }
    if (status == TD_OK || m.type == MSG_NACK) {
        pthread_mutex_unlock(&e->lock);
        send_small(e, x->src, &m);
        pthread_mutex_lock(&e->lock);
    }
    if (x->placed == x->total && x->status == TD_OK) {
        rx_complete_locked(e, x, TD_OK);
    } else if (x->status != TD_OK) {
        rx_complete_locked(e, x, x->status);
    }
    rx_release_locked(x, 1 + (x->seen == x->total && rx_unlink_locked(e, x)));
    pthread_mutex_unlock(&e->lock);
    free(j);
}

static void
chunk_arrived(void *arg, td_status_t status, int src, td_iov_t *bodies,
              size_t n)
{
    job_t *j = arg;
    td_staging_t *e = j->eng;

    if (n > 0) {
        j->buf = bodies[0].buf;    /* ours, or the transport's malloc */
    }
    j->status = status;
    pthread_mutex_lock(&e->lock);
    push_locked(e, j);
    pthread_mutex_unlock(&e->lock);
}

static void
on_data(td_staging_t *e, td_transport_rx_t *rx, const td_staging_msg_t *m)
{
    rxfer_t *x;
    job_t *j = job_new(e, J_RECV);
    td_staging_msg_t nack = {MSG_NACK, TD_ERR_RANGE, m->id, 0, 0, m->total};

    if (j == NULL) {
        return;                    /* the bodies are dropped */
    }
    pthread_mutex_lock(&e->lock);
    for (x = e->recvs; x != NULL; x = x->next) {
        if (x->src == rx->src && x->id == m->id) {
            break;
        }
    }
    if (x == NULL && e->n_recvs == TD_STAGING_XFERS_MAX) {
        /* failed transfers whose last chunks never came (NACKed) go first */
        for (rxfer_t *o = e->recvs, *n; o != NULL; o = n) {
            n = o->next;
            if (o->done && o->status != TD_OK) {
                rx_release_locked(o, rx_unlink_locked(e, o));
            }
        }
    }
    if (x == NULL && e->n_recvs < TD_STAGING_XFERS_MAX && !e->stop &&
        (x = calloc(1, sizeof(*x))) != NULL) {
        x->src = rx->src;
        x->id = m->id;
        x->total = m->total;
        x->refs = 1;
        x->t0 = td_now_s();
        x->next = e->recvs;
        e->recvs = x;
        e->n_recvs++;
    } else if (x == NULL) {
        e->stats.rejected++;
        pthread_mutex_unlock(&e->lock);
        free(j);
        td_error(TD_ERR_RANGE, "staging: %d transfers in progress (at most "
                 "%d): transfer %llu from rank %d refused", e->n_recvs,
                 TD_STAGING_XFERS_MAX, (unsigned long long)m->id, rx->src);
        send_small(e, rx->src, &nack);
        return;
    }
    if (x->total != m->total) {
        e->stats.rejected++;
        pthread_mutex_unlock(&e->lock);
        free(j);
        return;
    }
    x->refs++;
    j->rx = x;
    j->offset = m->offset;
    j->len = m->len;
    if (m->len > 0 && e->n_pool > 0) {
        j->buf = e->pool[--e->n_pool];
        j->pooled = 1;
        rx->dest[0] = (td_iov_t){j->buf, m->len, TD_MEM_HOST};
        j->buf = NULL;             /* set again when it has arrived */
    } else if (m->len > 0) {
        e->stats.pool_misses++;    /* S5: the transport allocates */
    }
    pthread_mutex_unlock(&e->lock);
    rx->done = chunk_arrived;
    rx->done_arg = j;
}

static void
on_message(void *arg, td_transport_rx_t *rx)
{
    td_staging_t *e = arg;
    td_staging_msg_t m;

    if (td__staging_decode(rx->header, rx->header_len, rx->n_bodies,
                          rx->body_len, rx->src, &m) != TD_OK) {
        td_log_warn("%s", td_last_error());
        pthread_mutex_lock(&e->lock);
        e->stats.rejected++;
        pthread_mutex_unlock(&e->lock);
        return;                    /* done == NULL: bodies dropped */
    }
    if (m.type == MSG_DATA) {
        on_data(e, rx, &m);
    } else {
        on_ack(e, rx->src, &m);
    }
}

/* ---- the engine thread ---------------------------------------------------- */

static void
do_finish(td_staging_t *e, job_t *j)
{
    sxfer_t *x = j->sx;
    uint64_t ns = ns_since(x->t0);

    x->cb(x->arg, x->status);
    pthread_mutex_lock(&e->lock);
    e->stats.send_ns += ns;
    sx_release_locked(x, 1 + sx_unlink_locked(e, x));
    pthread_mutex_unlock(&e->lock);
    free(j);
}

static void
do_rfail(td_staging_t *e, job_t *j)
{
    rxfer_t *x = j->rx;

    pthread_mutex_lock(&e->lock);
    rx_complete_locked(e, x, j->status);
    rx_release_locked(x, 1 + rx_unlink_locked(e, x));
    pthread_mutex_unlock(&e->lock);
    free(j);
}

static void *
engine_main(void *arg)
{
    td_staging_t *e = arg;
    job_t *j;

    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (e->head == NULL && !e->stop) {
            pthread_cond_wait(&e->cond, &e->lock);
        }
        if (e->head == NULL) {
            break;                 /* stopping and drained */
        }
        j = e->head;
        e->head = j->next;
        if (e->head == NULL) {
            e->tail = NULL;
        }
        pthread_mutex_unlock(&e->lock);
        switch (j->kind) {
        case J_SEND: do_send(e, j); break;
        case J_RECV: do_recv(e, j); break;
        case J_FINISH: do_finish(e, j); break;
        default: do_rfail(e, j); break;
        }
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

static void
fail_peer_locked(td_staging_t *e, int rank, td_status_t why)
{
    for (sxfer_t *x = e->sends; x != NULL; x = x->next) {
        if (rank < 0 || x->dst == rank) {
            finish_locked(e, x, why);
        }
    }
    for (rxfer_t *x = e->recvs; x != NULL; x = x->next) {
        job_t *j;
        if ((rank < 0 || x->src == rank) && !x->done &&
            (j = job_new(e, J_RFAIL)) != NULL) {
            if (x->status == TD_OK) {
                x->status = why;
            }
            j->rx = x;
            j->status = why;
            x->refs++;
            push_locked(e, j);
        }
    }
}

void
td__staging_peer_failed(td_staging_t *e, int rank)
{
    if (e == NULL) {
        return;                    /* an engine already destroyed */
    }
    pthread_mutex_lock(&e->lock);
    fail_peer_locked(e, rank, TD_ERR_PEER);
    pthread_mutex_unlock(&e->lock);
}

static size_t
env_chunk(void)
{
    const char *s = getenv("TODIST_STAGING_CHUNK");
    char *end;
    unsigned long long v;

    if (s == NULL || *s == '\0') {
        return TD_STAGING_CHUNK_DEFAULT;
    }
    v = strtoull(s, &end, 10);
    if (*end == 'k' || *end == 'K') { v <<= 10; end++; }
    else if (*end == 'm' || *end == 'M') { v <<= 20; end++; }
    if (*end != '\0' || v < 4096 || v > TD_STAGING_CHUNK_MAX) {
        td_log_warn("TODIST_STAGING_CHUNK=%s is not a size from 4096 to "
                    "64M; using %u", s, TD_STAGING_CHUNK_DEFAULT);
        return TD_STAGING_CHUNK_DEFAULT;
    }
    return (size_t)v;
}

/* S8: chunks in place within a host unless TODIST_STAGING_CMA=0. */
static int
env_cma(void)
{
    const char *s = getenv("TODIST_STAGING_CMA");

    if (s == NULL || *s == '\0' || strcmp(s, "1") == 0) {
        return 1;
    }
    if (strcmp(s, "0") != 0) {
        td_log_warn("TODIST_STAGING_CMA=%s is not 0 or 1; using 1", s);
    }
    return strcmp(s, "0") != 0;
}

td_status_t
td__staging_create(td_transport_t *tp, const td_staging_params_t *params,
                  td_staging_t **eng_p)
{
    td_staging_t *e;
    td_status_t status;

    if (params == NULL || params->ops.host_alloc == NULL ||
        params->ops.host_free == NULL || params->ops.copy == NULL ||
        params->ops.wait == NULL || params->dest == NULL ||
        params->received == NULL) {
        return td_error(TD_ERR_INVALID, "staging: copy ops, dest and "
                        "received are required");
    }
    if (params->slots < 0 || params->slots > TD_STAGING_SLOTS_MAX ||
        params->chunk > TD_STAGING_CHUNK_MAX ||
        (params->chunk != 0 && params->chunk < 64)) {
        return td_error(TD_ERR_INVALID, "staging: slots=%d (at most %d), "
                        "chunk=%zu (64 B to 64 MiB)", params->slots,
                        TD_STAGING_SLOTS_MAX, params->chunk);
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "staging: out of memory");
    }
    e->tp = tp;
    e->p = *params;
    e->p.chunk = params->chunk ? params->chunk : env_chunk();
    e->p.slots = params->slots ? params->slots : 2;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    /* Pinned buffers the receiver takes from the pool on the progress
     * thread (it never allocates there): two transfers' worth. */
    e->recv_reserve = 2 * e->p.slots;
    for (int i = 0; i < e->recv_reserve; i++) {
        status = e->p.ops.host_alloc(e->p.ops.ctx, e->p.chunk, &e->pool[i]);
        if (status != TD_OK) {
            goto err;
        }
        e->n_pool++;
        e->n_buffers++;
    }
    status = td__transport_set_handler(tp, e->p.handler_id, on_message, e);
    if (status == TD_OK) {         /* S8 */
        status = td__transport_set_inplace(tp, e->p.handler_id,
                                          env_cma() ? TD_STAGING_INPLACE_MIN
                                                    : 0);
    }
    if (status != TD_OK) {
        goto err;
    }
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        status = td_error(TD_ERR_NO_MEMORY, "staging: cannot start the "
                          "engine thread");
        goto err;
    }
    e->started = 1;
    *eng_p = e;
    return TD_OK;
err:
    while (e->n_pool > 0) {
        e->p.ops.host_free(e->p.ops.ctx, e->pool[--e->n_pool]);
    }
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    free(e);
    return status;
}

void
td__staging_destroy(td_staging_t *e)
{
    if (e == NULL) {
        return;
    }
    pthread_mutex_lock(&e->lock);
    fail_peer_locked(e, -1, TD_ERR_CANCELED);
    e->stop = 1;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    if (e->started) {
        pthread_join(e->thread, NULL);
    }
    /* Sends still posted hold buffers and point at E: wait for their
     * completions (a failed peer completes them within its keepalive). */
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < 100 && e->inflight > 0; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&e->cond, &e->lock, &ts);
    }
    if (e->inflight > 0) {
        pthread_mutex_unlock(&e->lock);
        td_log_warn("staging: %d sends still posted after 10 s; the engine "
                    "is left allocated", e->inflight);
        return;
    }
    pthread_mutex_unlock(&e->lock);
    while (e->n_pool > 0) {
        e->p.ops.host_free(e->p.ops.ctx, e->pool[--e->n_pool]);
    }
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

void
td__staging_stats(td_staging_t *e, td_staging_stats_t *stats_p)
{
    pthread_mutex_lock(&e->lock);
    *stats_p = e->stats;
    pthread_mutex_unlock(&e->lock);
}

size_t
td__staging_outstanding(td_staging_t *e)
{
    size_t n;

    pthread_mutex_lock(&e->lock);
    n = (size_t)e->n_sends + (size_t)e->n_recvs + (size_t)e->inflight +
        (e->head != NULL);
    pthread_mutex_unlock(&e->lock);
    return n;
}
