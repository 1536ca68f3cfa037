/* cma.c: bodies read in place (cma.h: C9, C10). The receiver checks the
 * sender's token (ucx_transport/cma.h, M1) before trusting a pid, to be
 * sure the pid is the sender (not another process of another pid
 * namespace); the read itself is td__cma_read's. */
#include "config.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/coll/cma.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/tx.h"
#include "runtime/coll/wire.h"
#include "runtime/runtime.h"
#include "ucx_transport/cma.h"
#include "base/clock.h"
#include "base/log.h"

static int      cma_enabled;
static int      cma_stall;         /* TODIST_TEST_CMA_STALL is set */
static uint8_t *cma_off;           /* per world rank: it cannot read ours */
static int32_t *cma_verified;      /* per world rank: pid checked, or 0 */
static uint8_t *cma_host;          /* per world rank: 0 not asked, 1 this
                                    * host, 2 another (C11) */

/* C11: world rank R runs on this host (asked once per rank). */
static int
same_host(int r)
{
    uint8_t h = __atomic_load_n(&cma_host[r], __ATOMIC_RELAXED);

    if (h == 0) {
        h = td__runtime_same_host(r) ? 1 : 2;
        __atomic_store_n(&cma_host[r], h, __ATOMIC_RELAXED);
    }
    return h == 1;
}

td_status_t
coll_cma_setup(int size)
{
    const char *s = getenv("TODIST_COLL_CMA");

    cma_enabled = !(s != NULL && strcmp(s, "0") == 0);
    cma_stall = getenv("TODIST_TEST_CMA_STALL") != NULL;
    free(cma_off);
    free(cma_verified);
    free(cma_host);
    cma_off = calloc((size_t)size, 1);
    cma_verified = calloc((size_t)size, sizeof(int32_t));
    cma_host = calloc((size_t)size, 1);
    if (cma_off == NULL || cma_verified == NULL || cma_host == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    return TD_OK;
}

td_status_t
coll_post_send_offer(coll_req_t *r, int wdst)
{
    uint8_t h[sizeof(r->hdr) + COLL_OFFER_BYTES];
    td__cma_src_t me;
    size_t len;
    td_status_t st;

    r->cma_send = 0;
    /* relaxed: published with R by the send (coll_post_send) */
    atomic_store_explicit(&r->cma_ready_a, 0, memory_order_relaxed);
    if (!cma_enabled || r->nbytes < COLL_CMA_MIN ||
        wdst == coll_world_rank() ||
        __atomic_load_n(&cma_off[wdst], __ATOMIC_RELAXED) ||
        !same_host(wdst)) {
        return coll_post_send(r, wdst, r->hdr, r->hdr_len);
    }
    /* C9: offer the buffer; the reader's MSG_CMA completes the send. */
    memcpy(h, r->hdr, r->hdr_len);
    td__cma_self(&me);
    len = coll_wire_offer(h, r->hdr_len, me.pid, (uint64_t)(uintptr_t)r->buf,
                          me.token_addr, me.token);
    atomic_store(&r->done, 0);
    r->status = TD_OK;
    r->err[0] = '\0';
    r->peer = wdst;
    r->cma_send = 1;
    if (r->type == REQ_SEND_COLL) {
        return coll_tx_offer(r, wdst, h, len);     /* wait.h C19 too */
    }
    atomic_store(&r->pending, 1);
    coll_post(r);
    st = coll_tx_send_hdr(wdst, h, len);
    if (st != TD_OK) {
        if (coll_unpost(r)) {
            coll_req_complete(r, st, td_last_error());
        }
        return st;
    }
    return TD_OK;
}

void
coll_cma_answer_ids(int dst, uint32_t gid, uint32_t digest, uint32_t seq,
                    uint32_t tag, uint32_t status)
{
    uint8_t h[COLL_WIRE_BYTES + 4];
    size_t len = coll_wire_cma(h, gid, digest, seq, tag, status);

    if (coll_tx_send_hdr(dst, h, len) != TD_OK) {
        td_log_debug("coll: answer to rank %d not sent: %s", dst,
                     td_last_error());
    }
}

void
coll_cma_answer(int dst, const coll_req_t *r, uint32_t status)
{
    coll_cma_answer_ids(dst, r->group_id, r->g->digest, r->seq, r->tag,
                        status);
}

/* TODIST_TEST_CMA_STALL=R:PREFIX (tests only): world rank R, at its first
 * read in place, makes PREFIX.reading, then waits until the request's
 * group failed and PREFIX.go exists, for at most 5 s after the failure
 * (60 s in all), before it reads: a reader still copying when a third
 * member's death fails the group (C15). */
static void
test_stall(coll_req_t *r)
{
    static int done;
    const char *s = getenv("TODIST_TEST_CMA_STALL");
    char path[512];
    const char *colon;
    double t0 = td_now_s(), broke = 0;
    int fd;

    if (s == NULL || done || (colon = strchr(s, ':')) == NULL ||
        atoi(s) != coll_world_rank()) {
        return;
    }
    done = 1;
    snprintf(path, sizeof(path), "%s.reading", colon + 1);
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
        close(fd);
    }
    snprintf(path, sizeof(path), "%s.go", colon + 1);
    td_log_info("coll: TODIST_TEST_CMA_STALL: reading %zu bytes from rank %d "
                "once group %u failed and %s exists", r->nbytes, r->from,
                r->group_id, path);
    for (;;) {
        double now = td_now_s();

        if (broke == 0 &&
            __atomic_load_n(&r->g->broken, __ATOMIC_ACQUIRE) != TD_OK) {
            broke = now;
        }
        if ((broke > 0 && (access(path, F_OK) == 0 || now - broke > 5)) ||
            now - t0 > 60) {
            td_log_info("coll: TODIST_TEST_CMA_STALL: reading now (%s; the "
                        "group failed %.3f s ago)", access(path, F_OK) == 0 ?
                        "go" : "no go", broke > 0 ? now - broke : -1.0);
            break;
        }
        nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
    }
}

void
coll_cma_read(coll_req_t *r)
{
    int src = r->from;
    int ok = same_host(src);                    /* C11 */

    if (ok &&
        __atomic_load_n(&cma_verified[src], __ATOMIC_RELAXED) != r->cma_pid) {
        td__cma_src_t who = { (uint32_t)r->cma_pid, r->cma_token_addr,
                              r->cma_token };

        ok = td__cma_check(&who);
        if (ok) {
            __atomic_store_n(&cma_verified[src], r->cma_pid,
                             __ATOMIC_RELAXED);
        }
    }
    char *dst = r->cma_dst != NULL ? r->cma_dst : r->buf;

    if (cma_stall) {
        test_stall(r);
    }

    ok = ok && td__cma_read((uint32_t)r->cma_pid, r->cma_addr, dst,
                            r->nbytes) == TD_OK;
    if (ok) {
        if (r->type == REQ_RECV_P2P) {
            td_log_debug("coll: p2p body of %zu bytes from rank %d read in "
                         "place", r->nbytes, src);
        }
        r->cma_landed = r->cma_dst != NULL;
        coll_cma_answer(src, r, 0);
        coll_req_complete(r, TD_OK, NULL);
        return;
    }
    /* Not readable (another node, no permission): the body comes through
     * UCX into this receive, posted again. */
    td_log_debug("coll: cannot read %zu bytes in place from rank %d (pid "
                 "%d): asking for the body", r->nbytes, src, (int)r->cma_pid);
    if (r->type == REQ_RECV_P2P) {
        r->peer = src;                        /* C10 */
        r->exact_seq = 1;
    }
    coll_lock();
    if (r->g->broken == TD_OK) {
        coll_posted_append_locked(r);
        coll_unlock();
        coll_cma_answer(src, r, 1);
        return;
    }
    coll_unlock();
    coll_cma_answer(src, r, 1);
    coll_req_complete(r, r->g->broken, r->g->broken_msg);
}

void
coll_cma_decline(coll_req_t *r)
{
    r->peer = r->from;
    r->exact_seq = 1;
    coll_post(r);
    coll_cma_answer(r->from, r, 2);
}

static atomic_ulong holder_reads;       /* coll_cma_holder_reads */

unsigned long
coll_cma_holder_reads(void)
{
    return atomic_load_explicit(&holder_reads, memory_order_relaxed);
}

/* C17: may the token holder read R's offer now? Only what costs no wait:
 * a body of at most COLL_CMA_HOLDER_MAX from a sender already known to be
 * of this host and whose pid was checked (no store look-up, L11). */
static int
holder_may_read(const coll_req_t *r)
{
    int src = r->from;

    return r->nbytes <= COLL_CMA_HOLDER_MAX && !cma_stall &&
           __atomic_load_n(&cma_host[src], __ATOMIC_RELAXED) == 1 &&
           __atomic_load_n(&cma_verified[src], __ATOMIC_RELAXED) ==
               r->cma_pid;
}

void
coll_cma_offered(coll_req_t *r)
{
    atomic_store(&r->cma_ready_a, 1);                  /* C12 */
    if (atomic_load(&r->cma_waiters) > 0) {
        coll_wake();
        return;
    }
    if (atomic_exchange(&r->cma_ready_a, 0)) {
        if (holder_may_read(r)) {
            /* C17: read here; declined, the body would move only when
             * the sender (computing, say) next drives its transport */
            atomic_fetch_add_explicit(&holder_reads, 1,
                                      memory_order_relaxed);
            coll_cma_read(r);
            return;
        }
        coll_cma_decline(r);
    }
}

void
coll_cma_answered(coll_req_t *r, int src, uint32_t answer)
{
    td_status_t st;
    char why[COLL_ERR_MAX];

    /* C15: its group failed while the reader could still read: now it
     * cannot, and the send ends with that failure (kept in R) */
    if (answer == 0 || r->status != TD_OK) {
        coll_req_complete(r, TD_OK, NULL);
        return;
    }
    if (answer == COLL_CMA_DROPPED) {
        snprintf(why, sizeof(why), "coll: rank %d dropped our offer of call "
                 "#%u in group %u unread: the group failed or is gone "
                 "there", src, r->seq, r->group_id);
        coll_req_complete(r, TD_ERR_CANCELED, why);
        return;
    }
    /* C9: it cannot read us (1: and stop offering) or does not want to
     * now (2); resend through UCX. */
    if (answer == 1) {
        __atomic_store_n(&cma_off[src], 1, __ATOMIC_RELAXED);
    }
    r->cma_send = 0;
    if (r->type == REQ_SEND_P2P) {
        /* C10: matched by the receive that answered; completes with the
         * transport's completion and the ack (C3). */
        r->hdr[COLL_FLAGS_AT] = COLL_F_RESEND;
        atomic_store(&r->pending, 2);
        coll_post(r);
    }
    st = coll_tx_send_body(r, src);
    if (st != TD_OK) {
        int took = 1;

        if (r->type == REQ_SEND_P2P) {
            took = coll_unpost(r);
            atomic_store(&r->pending, 1);
        }
        if (took) {
            coll_req_complete(r, st, td_last_error());
        }
    }
}
