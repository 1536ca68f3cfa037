/* coll.c: the core of collectives and point-to-point (todist/coll.h): the
 * runtime module, the receive path that matches arriving messages with
 * posted receives, the wait that drives the transport, group failure and
 * the mismatch check.
 *
 * Every message is one transport message to handler COLL_TRANSPORT_ID: a
 * 32-byte header (coll_internal.h) and at most one body. A receive that is
 * posted when its message arrives names its own buffer as the body's
 * destination, so the body lands there (UCX rendezvous for large ones);
 * one that arrives first waits in the unexpected list in a buffer the
 * transport allocates, and is copied out when its receive is posted.
 *
 * Invariants (comments cite them as C1..C8):
 *  C1 Receive callbacks and send completions run on the transport's token
 *     holder; they take coll_lock only briefly and never call
 *     td_transport_send while holding it (a direct send may complete, and
 *     call back, on the sending thread).
 *  C2 A posted request is in exactly one place: the posted list, or
 *     matched (its body in flight, or an unexpected entry claiming it), or
 *     done. Whoever takes it off the posted list completes it.
 *  C3 A request completes exactly once: `pending` counts the completions
 *     due (a p2p send: the transport's and the receiver's ack) and `done`
 *     is stored last; the waiter may free it only after `done`.
 *  C4 coll_wait returns only when every request it was given is done: on
 *     failure it withdraws what is still posted and waits for bodies in
 *     flight, so no callback writes a stack request or buffer later.
 *  C5 A collective's messages carry (group id, member digest, sequence
 *     number, description); a member that sees a description different
 *     from its own at the same sequence number fails the group and tells
 *     every member (MSG_ABORT), naming both ranks and both calls.
 *  C6 A group is broken by its first failure (mismatch, dead member,
 *     timeout, abort) and stays so: later operations fail at once with
 *     that error; messages for it are dropped.
 *  C7 Unexpected messages are bounded (COLL_UNEXPECTED_MAX); p2p messages
 *     of one (sender, tag) match in arrival order, which is the order UCX
 *     delivers active messages of one endpoint.
 *  C8 Receives of a collective are posted under exact keys (group, seq,
 *     step tag, source), so steps and operations never steal each other's
 *     messages, whatever order they arrive in.
 *  C9 A body offered in place (COLL_F_CMA) stays untouched until its
 *     reader's MSG_CMA (or, p2p, an error ack) arrives (the send completes
 *     only then); the reader copies it on the waiting thread, never in a
 *     callback, and answers exactly once: 0 (read), 1 (could not: the
 *     sender resends the body through UCX and stops offering to that
 *     rank) or 2 (p2p only: not now, send the body).
 * C10 A p2p offer is read in place only by a thread that is waiting for
 *     that receive (td_recv), or by td_irecv itself when the offer was
 *     there first; an offer matching an irecv posted earlier is answered
 *     2 from the callback. So no offer waits on a thread that may be
 *     blocked elsewhere (two ranks that irecv then send cannot deadlock).
 *     The resent body (COLL_F_RESEND) matches only the receive that
 *     answered, by sender and sequence number, so C7's order holds.
 *     Limit: a p2p send that times out with its offer unanswered returns
 *     its error while a receive posted later may still read the buffer
 *     (collectives tell every member, C6; p2p timeouts are local): after
 *     a td_send/td_isend timeout, keep the tensor unchanged until the
 *     group is destroyed, as the README says.
 * C11 Group ids grow in td_group_new's order; a message for an id at or
 *     below the highest registered here whose group is gone is dropped,
 *     and destroying a group frees what was queued for it, so messages
 *     that arrive late for destroyed groups hold no memory.
 */
#include "config.h"

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "todist/coll.h"
#include "todist/world.h"
#include "runtime/runtime.h"
#include "runtime/coll/coll_internal.h"
#include "runtime/coll/nccl.h"
#include "base/byteorder.h"
#include "base/clock.h"
#include "base/cpu.h"
#include "base/log.h"

#define SPIN_S 0.002       /* drive this long before sleeping */

static uint64_t zero_body;   /* where 0-byte bodies of matched receives go */

/* The single-copy path (C9): a large collective body is offered in place
 * (pid, address) and the receiver copies it with process_vm_readv, after
 * reading CMA_TOKEN at &cma_token in the sender to be sure the pid is the
 * sender (not another process of another pid namespace). */
static uint64_t cma_token;
static int      cma_enabled;
static uint8_t *cma_off;           /* per world rank: it cannot read ours */
static int32_t *cma_verified;      /* per world rank: pid checked, or 0 */

/* Algorithms each collective has (bit per coll_algo_t). */
static const unsigned algo_valid[COLL_NUM_KINDS] = {
    [COLL_ALL_REDUCE]     = 1u << ALGO_RD | 1u << ALGO_RING | 1u << ALGO_SHM,
    [COLL_BROADCAST]      = 1u << ALGO_BINOMIAL | 1u << ALGO_LINEAR |
                            1u << ALGO_SHM,
    [COLL_REDUCE]         = 1u << ALGO_BINOMIAL | 1u << ALGO_LINEAR,
    [COLL_ALL_GATHER]     = 1u << ALGO_DIRECT | 1u << ALGO_RING |
                            1u << ALGO_SHM,
    [COLL_GATHER]         = 1u << ALGO_LINEAR,
    [COLL_SCATTER]        = 1u << ALGO_LINEAR,
    [COLL_REDUCE_SCATTER] = 1u << ALGO_DIRECT | 1u << ALGO_RING |
                            1u << ALGO_SHM,
    [COLL_ALL_TO_ALL]     = 1u << ALGO_PAIRWISE,
    [COLL_BARRIER]        = 1u << ALGO_DISSEMINATION | 1u << ALGO_SHM,
};

typedef struct unexp {
    struct unexp *next;
    uint8_t       type, dtype, ndim;
    uint32_t      group_id, digest, seq, tag;
    int           src;             /* world rank */
    size_t        nbytes;
    coll_desc_t   desc;
    int64_t       shape[TD_MAX_DIMS];
    int32_t       code;            /* ABORT */
    char         *text;            /* ABORT */
    void         *body;            /* arrived bytes (ours to free) */
    int           arrived;
    td_status_t   status;
    coll_req_t   *claim;           /* a receive matched before the body */
    int           orphan;          /* its group failed: free on arrival */
    int           cma;             /* an offer in place (C9), no body */
    int           mbox_slot;       /* 1 + its slot: a mailbox message, its
                                    * body in the slot (mbox.c M6) */
    int32_t       cma_pid;
    uint64_t      cma_addr, cma_token_addr, cma_token;
} unexp_t;

static struct {
    td_transport_t *tp;
    int             rank, size;
    double          timeout;           /* > 0 */
    double          cfg_timeout;       /* td_coll_set_timeout, 0: none */
    coll_algo_t     forced[COLL_NUM_KINDS];
    atomic_int      stopped;
    pthread_mutex_t lock;              /* coll_lock */
    coll_req_t     *posted_head, *posted_tail;
    unexp_t        *ux_head, *ux_tail;
    size_t          n_ux;
    td_group_t     *groups[TD_GROUPS_MAX];
    int             groups_hi;         /* slots used so far: the rest NULL */
    pthread_mutex_t wait_lock;
    pthread_cond_t  wait_cond;
    atomic_int      waiters;
    atomic_long     active;            /* operations in flight */
    atomic_ulong    completions;       /* requests completed (progress) */
    uint32_t        id_max;            /* highest group id registered */
    atomic_ulong    pokes;             /* MSG_POKE sent (mbox.c M5) */
    atomic_ulong    fast[2];           /* receives taken, sends written on
                                        * the fast path (mbox.c M9, M10): a
                                        * debug count */
} C = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wait_lock = PTHREAD_MUTEX_INITIALIZER,
    .wait_cond = PTHREAD_COND_INITIALIZER,
};

td_transport_t *coll_transport(void) { return C.tp; }
int coll_world_rank(void) { return C.rank; }
int coll_world_size(void) { return C.size; }

double
coll_timeout(void)
{
    return C.cfg_timeout > 0 ? C.cfg_timeout : C.timeout;
}

int
coll_stopped(void)
{
    return atomic_load_explicit(&C.stopped, memory_order_relaxed);
}

long
coll_active_add(long d)
{
    return atomic_fetch_add(&C.active, d) + d;
}

/* ---- names -------------------------------------------------------------- */

static const char *kind_names[COLL_NUM_KINDS] = {
    "none", "all_reduce", "broadcast", "reduce", "all_gather", "gather",
    "scatter", "reduce_scatter", "all_to_all", "barrier"
};
static const char *algo_names[ALGO_NUM] = {
    "auto", "rd", "ring", "binomial", "linear", "direct", "pairwise",
    "dissemination", "shm"
};
static const char *op_names[TD_REDUCE_NUM_OPS] = {
    "sum", "prod", "min", "max", "avg", "band", "bor", "bxor"
};

const char *
coll_kind_name(coll_kind_t k)
{
    return (unsigned)k < COLL_NUM_KINDS ? kind_names[k] : "?";
}

const char *
coll_algo_name(coll_algo_t a)
{
    return (unsigned)a < ALGO_NUM ? algo_names[a] : "?";
}

const char *
td_reduce_op_name(td_reduce_op_t op)
{
    return (unsigned)op < TD_REDUCE_NUM_OPS ? op_names[op] : "?";
}

/* "all_reduce(float32 x 4097, sum, rd)" */
static void
desc_text(const coll_desc_t *d, char *s, size_t len)
{
    int n = snprintf(s, len, "%s(%s x %" PRIu64, coll_kind_name(d->kind),
                     td_dtype_name((td_dtype_t)d->dtype), d->count);

    if (n < 0 || (size_t)n >= len) {
        return;
    }
    if (d->kind == COLL_ALL_REDUCE || d->kind == COLL_REDUCE ||
        d->kind == COLL_REDUCE_SCATTER) {
        n += snprintf(s + n, len - n, ", %s",
                      td_reduce_op_name((td_reduce_op_t)d->op));
    }
    if (d->root >= 0 && (size_t)n < len) {
        n += snprintf(s + n, len - n, ", root %d", d->root);
    }
    if ((size_t)n < len) {
        snprintf(s + n, len - n, ", %s)", coll_algo_name(d->algo));
    }
}

static int
desc_equal(const coll_desc_t *a, const coll_desc_t *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op &&
           a->algo == b->algo && a->root == b->root && a->count == b->count;
}

/* ---- settings ----------------------------------------------------------- */

static td_status_t
parse_algo(const char *spec, coll_algo_t forced[COLL_NUM_KINDS])
{
    char buf[512], *save = NULL, *item;

    for (int k = 0; k < COLL_NUM_KINDS; k++) {
        forced[k] = ALGO_AUTO;
    }
    if (spec == NULL || spec[0] == '\0') {
        return TD_OK;
    }
    if (strlen(spec) >= sizeof(buf)) {
        return td_error(TD_ERR_INVALID, "coll: TODIST_COLL_ALGO has %zu "
                        "bytes, at most %zu", strlen(spec), sizeof(buf) - 1);
    }
    strcpy(buf, spec);
    for (item = strtok_r(buf, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        int k, a;

        if (colon == NULL) {
            return td_error(TD_ERR_INVALID, "coll: TODIST_COLL_ALGO item "
                            "'%s' is not collective:algorithm", item);
        }
        *colon = '\0';
        for (k = 1; k < COLL_NUM_KINDS; k++) {
            if (strcmp(item, kind_names[k]) == 0) {
                break;
            }
        }
        for (a = 0; a < ALGO_NUM; a++) {
            if (strcmp(colon + 1, algo_names[a]) == 0) {
                break;
            }
        }
        if (k == COLL_NUM_KINDS || a == ALGO_NUM) {
            return td_error(TD_ERR_INVALID, "coll: TODIST_COLL_ALGO: unknown "
                            "%s '%s' (collectives: all_reduce broadcast "
                            "reduce all_gather gather scatter reduce_scatter "
                            "all_to_all barrier; algorithms: auto rd ring "
                            "binomial linear direct pairwise dissemination)",
                            k == COLL_NUM_KINDS ? "collective" : "algorithm",
                            k == COLL_NUM_KINDS ? item : colon + 1);
        }
        if (a != ALGO_AUTO && !(algo_valid[k] & (1u << a))) {
            return td_error(TD_ERR_INVALID, "coll: TODIST_COLL_ALGO: %s has "
                            "no algorithm '%s'", kind_names[k], colon + 1);
        }
        forced[k] = (coll_algo_t)a;
    }
    return TD_OK;
}

td_status_t
td_coll_set_algo(const char *spec)
{
    coll_algo_t f[COLL_NUM_KINDS];
    td_status_t st = parse_algo(spec, f);

    if (st != TD_OK) {
        return st;
    }
    for (int k = 0; k < COLL_NUM_KINDS; k++) {
        __atomic_store_n(&C.forced[k], f[k], __ATOMIC_RELAXED);
    }
    return TD_OK;
}

coll_algo_t
coll_algo_forced(coll_kind_t kind)
{
    return __atomic_load_n(&C.forced[kind], __ATOMIC_RELAXED);
}

td_status_t
td_coll_set_timeout(double seconds)
{
    if (!(seconds > 0)) {
        return td_error(TD_ERR_RANGE, "coll: timeout %g s is not positive",
                        seconds);
    }
    C.cfg_timeout = seconds;
    return TD_OK;
}

/* ---- waking waiters -------------------------------------------------- */

static void
wake_waiters(void)
{
    if (atomic_load(&C.waiters) > 0) {
        pthread_mutex_lock(&C.wait_lock);
        pthread_cond_broadcast(&C.wait_cond);
        pthread_mutex_unlock(&C.wait_lock);
    }
    if (C.tp != NULL) {
        td_transport_wake(C.tp);
    }
}

/* One completion of R is due no more (C3). STATUS < 0 and MSG: the first
 * error is kept. */
static void
req_complete(coll_req_t *r, td_status_t status, const char *msg)
{
    if (status != TD_OK) {
        pthread_mutex_lock(&C.lock);
        if (r->status == TD_OK) {
            r->status = status;
            snprintf(r->err, sizeof(r->err), "%s", msg != NULL ? msg :
                     td_strerror(status));
        }
        pthread_mutex_unlock(&C.lock);
    }
    /* a "something completed" hint for the waiters' spin (no locked
     * instruction: a lost increment still changes the value) */
    atomic_store_explicit(&C.completions,
                          atomic_load_explicit(&C.completions,
                                               memory_order_relaxed) + 1,
                          memory_order_relaxed);
    /* The last completion due (C3): when only ours is left nobody else
     * touches `pending`, so no locked instruction is needed. */
    if (atomic_load_explicit(&r->pending, memory_order_acquire) == 1 ||
        atomic_fetch_sub(&r->pending, 1) == 1) {
        void (*on_done)(coll_req_t *) = r->on_done;

        atomic_store_explicit(&r->pending, 0, memory_order_relaxed);
        /* (only p2p.c's sends set it: a collective's stack requests
         * are not zeroed) */
        if (r->type == REQ_SEND_P2P && atomic_exchange(&r->tp_counted, 0)) {
            coll_mbox_tp_end(r->peer);          /* mbox.c M2 */
        }
        atomic_store(&r->done, 1);     /* seq_cst: then wake_waiters reads */
        wake_waiters();
        if (on_done != NULL) {
            on_done(r);            /* a work handle keeps R alive (C3) */
        }
    }
}

/* ---- the posted list (coll_lock held) ---------------------------------- */

static void
posted_append(coll_req_t *r)
{
    r->next = NULL;
    if (C.posted_tail != NULL) {
        C.posted_tail->next = r;
    } else {
        C.posted_head = r;
    }
    C.posted_tail = r;
}

/* Take Q, whose predecessor is PREV (NULL: Q is the head), off the list. */
static void
posted_unlink(coll_req_t *prev, coll_req_t *q)
{
    if (prev != NULL) {
        prev->next = q->next;
    } else {
        C.posted_head = q->next;
    }
    if (C.posted_tail == q) {
        C.posted_tail = prev;
    }
}

static int
posted_remove(coll_req_t *r)
{
    coll_req_t *p = NULL;

    for (coll_req_t *q = C.posted_head; q != NULL; p = q, q = q->next) {
        if (q == r) {
            posted_unlink(p, q);
            return 1;
        }
    }
    return 0;
}

static void
ux_append(unexp_t *e)
{
    e->next = NULL;
    if (C.ux_tail != NULL) {
        C.ux_tail->next = e;
    } else {
        C.ux_head = e;
    }
    C.ux_tail = e;
    C.n_ux++;
}

static void
ux_remove(unexp_t *e)
{
    unexp_t *p = NULL;

    for (unexp_t *q = C.ux_head; q != NULL; p = q, q = q->next) {
        if (q == e) {
            if (p != NULL) {
                p->next = q->next;
            } else {
                C.ux_head = q->next;
            }
            if (C.ux_tail == q) {
                C.ux_tail = p;
            }
            C.n_ux--;
            return;
        }
    }
}

static void
ux_free(unexp_t *e)
{
    if (e->mbox_slot) {
        /* M6: dropped unreceived; the sender gets its slot back (no
         * poke: coll_lock may be held). */
        coll_mbox_ack(e->src, e->mbox_slot - 1, TD_ERR_CANCELED, 0, 0, NULL,
                      0);
        e->body = NULL;
    }
    free(e->body);
    free(e->text);
    free(e);
}

/* ---- groups: registry and failure ---------------------------------------- */

/* Free the unclaimed unexpected messages of group GID (ABORTs too if
 * WITH_ABORT); one whose body is still landing is freed when it lands. */
static size_t
ux_drop_group_locked(uint32_t gid, int with_abort)
{
    size_t n = 0;

    for (unexp_t *e = C.ux_head, *en; e != NULL; e = en) {
        en = e->next;
        if (e->group_id == gid && e->claim == NULL &&
            (with_abort || e->type != MSG_ABORT)) {
            n++;
            if (e->arrived) {
                ux_remove(e);
                ux_free(e);
            } else {
                e->orphan = 1;
            }
        }
    }
    return n;
}

static td_group_t *
group_find(uint32_t id)
{
    /* every message looks its group up: scan the used slots only */
    for (int i = 0; i < C.groups_hi; i++) {
        if (C.groups[i] != NULL && C.groups[i]->id == id) {
            return C.groups[i];
        }
    }
    return NULL;
}

/* Fail G under coll_lock; returns the requests to complete after the
 * unlock (linked through next). */
static coll_req_t *
group_fail_locked(td_group_t *g, td_status_t code, const char *msg)
{
    coll_req_t *out = NULL, *p = NULL, *q, *next;

    if (g->broken != TD_OK) {
        return NULL;
    }
    g->broken = code;
    snprintf(g->broken_msg, sizeof(g->broken_msg), "%s", msg);
    for (q = C.posted_head; q != NULL; q = next) {
        next = q->next;
        if (q->group_id == g->id) {
            posted_unlink(p, q);
            q->next = out;
            out = q;
        } else {
            p = q;
        }
    }
    /* Unclaimed messages of a broken group are never received (C6). */
    ux_drop_group_locked(g->id, 0);
    return out;
}

static void
complete_list(coll_req_t *list, td_status_t code, const char *msg)
{
    while (list != NULL) {
        coll_req_t *next = list->next;

        req_complete(list, code, msg);
        list = next;
    }
}

static void cma_read(coll_req_t *r);
static void send_cma_answer(int dst, const coll_req_t *r, uint32_t status);
static size_t abort_hdr(uint8_t *h, const td_group_t *g, uint32_t seq,
                        td_status_t code, const char *msg);

/* Fail group G, or (G NULL) the group with id GID if it is still
 * registered: transport callbacks pass the id, since td_group_destroy on
 * another thread may free the group as soon as coll_lock is dropped. The
 * abort's header and addressees are taken under the lock for that reason
 * (C1: sent after it). */
static void
group_fail(td_group_t *g, uint32_t gid, td_status_t code, int tell,
           uint32_t seq, const char *msg)
{
    uint8_t h[COLL_WIRE_BYTES + 2 + COLL_ERR_MAX];
    size_t hlen = 0;
    int *dst = NULL, n_dst = 0;
    coll_req_t *list;
    int first;

    pthread_mutex_lock(&C.lock);
    if (g == NULL && (g = group_find(gid)) == NULL) {
        pthread_mutex_unlock(&C.lock);
        return;
    }
    gid = g->id;
    first = g->broken == TD_OK;
    list = group_fail_locked(g, code, msg);
    if (first && tell && (dst = malloc(sizeof(int) * (size_t)g->n)) != NULL) {
        hlen = abort_hdr(h, g, seq, code, msg);
        for (int i = 0; i < g->n; i++) {
            if (i != g->me) {
                dst[n_dst++] = g->ranks[i];
            }
        }
    }
    pthread_mutex_unlock(&C.lock);
    complete_list(list, code, msg);
    if (first) {
        td_log_debug("coll: group %u broken: %s", gid, msg);
        for (int i = 0; i < n_dst; i++) {
            if (td_transport_peer_alive(C.tp, dst[i])) {
                td_transport_send(C.tp, dst[i], COLL_TRANSPORT_ID, h, hlen,
                                  NULL, 0, NULL, NULL);
            }
        }
        wake_waiters();
    }
    free(dst);
}

void
coll_group_fail(td_group_t *g, td_status_t code, int tell, uint32_t seq,
                const char *msg)
{
    group_fail(g, 0, code, tell, seq, msg);
}

td_status_t
coll_group_check(td_group_t *g)
{
    td_status_t st;
    char msg[COLL_ERR_MAX];

    if (g->me < 0) {
        return td_error(TD_ERR_STATE, "coll: this rank (%d) is not a member "
                        "of group %u", C.rank, g->id);
    }
    if (atomic_load(&C.stopped) || C.tp == NULL) {
        return td_error(TD_ERR_STATE, "coll: the runtime is not running "
                        "(td_init not called, or td_finalize was)");
    }
    if (__atomic_load_n(&g->broken, __ATOMIC_ACQUIRE) == TD_OK) {
        return TD_OK;                   /* C6: once broken, it stays so */
    }
    pthread_mutex_lock(&C.lock);
    st = g->broken;
    if (st != TD_OK) {
        snprintf(msg, sizeof(msg), "%s", g->broken_msg);
    }
    pthread_mutex_unlock(&C.lock);
    if (st != TD_OK) {
        return td_error(st, "%s (group %u is broken by that failure: make a "
                        "new group)", msg, g->id);
    }
    return TD_OK;
}

td_status_t
coll_group_register(td_group_t *g)
{
    int slot = -1;
    unexp_t *abort_e = NULL;

    pthread_mutex_lock(&C.lock);
    for (int i = 0; i < TD_GROUPS_MAX; i++) {
        if (C.groups[i] == NULL) {
            slot = i;
            break;
        }
    }
    if (slot < 0) {
        pthread_mutex_unlock(&C.lock);
        return td_error(TD_ERR_RANGE, "coll: more than %d live groups; "
                        "destroy some", TD_GROUPS_MAX);
    }
    C.groups[slot] = g;
    if (slot >= C.groups_hi) {
        C.groups_hi = slot + 1;
    }
    g->registered = 1;
    if (g->id > C.id_max) {
        C.id_max = g->id;
    }
    /* A member may have failed the group before we made it. */
    for (unexp_t *e = C.ux_head; e != NULL; e = e->next) {
        if (e->type == MSG_ABORT && e->group_id == g->id) {
            abort_e = e;
            ux_remove(e);
            break;
        }
    }
    pthread_mutex_unlock(&C.lock);
    if (abort_e != NULL) {
        coll_group_fail(g, (td_status_t)abort_e->code, 0, abort_e->seq,
                        abort_e->text);
        ux_free(abort_e);
    }
    return TD_OK;
}

void
coll_group_unregister(td_group_t *g)
{
    size_t n;

    pthread_mutex_lock(&C.lock);
    for (int i = 0; i < TD_GROUPS_MAX; i++) {
        if (C.groups[i] == g) {
            C.groups[i] = NULL;
        }
    }
    g->registered = 0;
    /* C11: what is queued for it will never be received */
    n = ux_drop_group_locked(g->id, 1);
    pthread_mutex_unlock(&C.lock);
    if (n > 0) {
        td_log_debug("coll: group %u destroyed with %zu unreceived "
                     "messages: freed", g->id, n);
    }
}

void *
coll_scratch(td_group_t *g, size_t len)
{
    if (g->scratch_len < len) {
        size_t huge = (size_t)2 << 20;
        void *p;

        /* Large scratch on huge pages, as large tensor storage
         * (runtime/tensor/tensor.c): fewer faults, and bodies read in
         * place (C9) land at memcpy speed. Advice only. */
        if (len >= 2 * huge) {
            len = (len + huge - 1) & ~(huge - 1);
            p = aligned_alloc(huge, len);
#ifdef MADV_HUGEPAGE
            if (p != NULL) {
                (void)madvise(p, len, MADV_HUGEPAGE);
            }
#endif
        } else {
            p = malloc(len);
        }
        if (p != NULL) {
            free(g->scratch);
        }
        if (p == NULL) {
            td_error(TD_ERR_NO_MEMORY, "coll: out of memory for %zu bytes "
                     "of scratch", len);
            return NULL;
        }
        g->scratch = p;
        g->scratch_len = len;
    }
    return g->scratch;
}

/* ---- headers -------------------------------------------------------------- */

static void
hdr_fixed(uint8_t *h, uint8_t type, uint8_t dtype, uint8_t ndim,
          const td_group_t *g, uint32_t seq, uint32_t tag, uint64_t nbytes)
{
    h[0] = COLL_WIRE_VERSION;
    h[1] = type;
    h[2] = dtype;
    h[3] = ndim;
    td_put_be32(h + 4, g->id);
    td_put_be32(h + 8, g->digest);
    td_put_be32(h + 12, seq);
    td_put_be32(h + 16, tag);
    td_put_be32(h + 20, 0);
    td_put_be64(h + 24, nbytes);
}

size_t
coll_hdr_coll(uint8_t *h, const coll_op_t *op, uint32_t tag, size_t nbytes)
{
    const coll_desc_t *d = &op->desc;

    hdr_fixed(h, MSG_COLL, d->dtype, 0, op->g, op->seq, tag, nbytes);
    h[32] = d->kind;
    h[33] = d->dtype;
    h[34] = d->op;
    h[35] = d->algo;
    td_put_be32(h + 36, (uint32_t)d->root);
    td_put_be64(h + 40, d->count);
    return COLL_WIRE_BYTES + 16;
}

static void
shape_text(char *s, size_t len, uint8_t dtype, int ndim, const int64_t *shape)
{
    int n = snprintf(s, len, "%s [", td_dtype_name((td_dtype_t)dtype));

    for (int i = 0; i < ndim && n > 0 && (size_t)n < len; i++) {
        n += snprintf(s + n, len - n, "%s%" PRId64, i ? ", " : "", shape[i]);
    }
    if (n > 0 && (size_t)n < len) {
        snprintf(s + n, len - n, "]");
    }
}

/* ---- sending ------------------------------------------------------------- */

static void
send_done(void *arg, td_status_t status)
{
    coll_req_t *r = arg;
    char msg[COLL_ERR_MAX];

    if (status != TD_OK) {
        snprintf(msg, sizeof(msg), "coll: send to rank %d failed: %s",
                 r->peer, status == TD_ERR_PEER ? "the rank died" :
                 td_strerror(status));
    }
    req_complete(r, status, status != TD_OK ? msg : NULL);
}

td_status_t
coll_post_send(coll_req_t *r, int dst, const uint8_t *hdr, size_t hdr_len)
{
    td_iov_t iov = { r->buf, r->nbytes, TD_MEM_HOST };
    td_status_t st;

    atomic_store(&r->done, 0);
    r->status = TD_OK;
    r->err[0] = '\0';
    r->peer = dst;
    atomic_store(&r->pending, r->type == REQ_SEND_P2P ? 2 : 1);
    if (r->type == REQ_SEND_P2P) {
        /* In the ack list before the message leaves: the ack may come
         * before td_transport_send returns. */
        pthread_mutex_lock(&C.lock);
        posted_append(r);
        pthread_mutex_unlock(&C.lock);
    }
    st = td_transport_send(C.tp, dst, COLL_TRANSPORT_ID, hdr, hdr_len, &iov,
                           1, send_done, r);
    if (st != TD_OK) {
        if (r->type == REQ_SEND_P2P) {
            pthread_mutex_lock(&C.lock);
            posted_remove(r);
            pthread_mutex_unlock(&C.lock);
        }
        atomic_store(&r->done, 1);
        r->status = st;
        snprintf(r->err, sizeof(r->err), "%s", td_last_error());
        return st;
    }
    return TD_OK;
}

static void
send_ack(int dst, uint32_t group_id, uint32_t digest, uint32_t seq,
         td_status_t status, uint8_t dtype, int ndim, const int64_t *shape)
{
    uint8_t h[COLL_WIRE_BYTES + 4 + 8 * TD_MAX_DIMS + MBOX_OFFER_BYTES];
    td_group_t gg = { .id = group_id, .digest = digest };
    size_t len = COLL_WIRE_BYTES + 4 + 8 * (size_t)ndim, offer;

    hdr_fixed(h, MSG_ACK, dtype, (uint8_t)ndim, &gg, seq, 0, 0);
    td_put_be32(h + COLL_WIRE_BYTES, (uint32_t)(int32_t)status);
    for (int i = 0; i < ndim; i++) {
        td_put_be64(h + COLL_WIRE_BYTES + 4 + 8 * i, (uint64_t)shape[i]);
    }
    /* The first ack to a sender offers our inbox (mbox.c). */
    offer = coll_mbox_offer(dst, h + len);
    if (offer > 0) {
        h[20] = COLL_F_MBOX;
        len += offer;
    }
    if (td_transport_send(C.tp, dst, COLL_TRANSPORT_ID, h, len, NULL, 0,
                          NULL, NULL) != TD_OK) {
        td_log_debug("coll: ack to rank %d not sent: %s", dst,
                     td_last_error());
    }
}

/* An MSG_ABORT for G at SEQ into H; its length. */
static size_t
abort_hdr(uint8_t *h, const td_group_t *g, uint32_t seq, td_status_t code,
          const char *msg)
{
    size_t len = strnlen(msg, COLL_ERR_MAX - 1);

    hdr_fixed(h, MSG_ABORT, 0, 0, g, seq, (uint32_t)(int32_t)code, 0);
    h[COLL_WIRE_BYTES] = (uint8_t)(len >> 8);
    h[COLL_WIRE_BYTES + 1] = (uint8_t)len;
    memcpy(h + COLL_WIRE_BYTES + 2, msg, len);
    return COLL_WIRE_BYTES + 2 + len;
}

/* ---- matching ----------------------------------------------------------- */

/* A p2p message matched receive R: check it fits. TD_OK, or an error with
 * MSG naming both shapes. */
static td_status_t
p2p_fits(const coll_req_t *r, int src, uint8_t dtype, int ndim,
         const int64_t *shape, size_t nbytes, char *msg, size_t len)
{
    char a[160], b[160];

    if (dtype == r->dtype && nbytes == r->nbytes) {
        return TD_OK;
    }
    shape_text(a, sizeof(a), dtype, ndim, shape);
    shape_text(b, sizeof(b), r->dtype, r->ndim, r->shape);
    snprintf(msg, len, "coll: td_recv from rank %d tag %u: rank %d sent %s "
             "(%zu bytes) but rank %d receives into %s (%zu bytes)", src,
             r->tag, src, a, nbytes, C.rank, b, r->nbytes);
    return dtype != r->dtype ? TD_ERR_DTYPE : TD_ERR_SHAPE;
}

/* Two calls at one sequence number (C5): the text naming both. */
void
coll_mismatch_text(char *msg, size_t len, const td_group_t *g, uint32_t seq,
                   int other, const coll_desc_t *theirs,
                   const coll_desc_t *ours)
{
    char a[160], b[160];

    desc_text(theirs, a, sizeof(a));
    desc_text(ours, b, sizeof(b));
    snprintf(msg, len, "coll: mismatched collectives in group %u at call "
             "#%u: rank %d called %s, rank %d called %s", g->id, seq, other,
             a, C.rank, b);
}

typedef struct {
    td_status_t code;
    char        msg[COLL_ERR_MAX];
    td_group_t *g;                 /* set: fail this group (by gid) */
    uint32_t    gid;
    uint32_t    seq;
    int         tell;
} fail_t;

/* Body of a message that matched a posted receive landed (token holder). */
static void
matched_done(void *arg, td_status_t status, int src, td_iov_t *bodies,
             size_t n_bodies)
{
    coll_req_t *r = arg;
    char msg[COLL_ERR_MAX];

    (void)bodies;
    (void)n_bodies;
    r->from = src;
    if (status != TD_OK) {
        snprintf(msg, sizeof(msg), "coll: receiving from rank %d failed: %s",
                 src, status == TD_ERR_PEER ? "the rank died" :
                 td_strerror(status));
    } else if (r->type == REQ_RECV_P2P) {
        send_ack(src, r->group_id, r->g->digest, r->seq, TD_OK, r->dtype,
                 r->ndim, r->shape);
    }
    req_complete(r, status, status != TD_OK ? msg : NULL);
}

/* Copy an arrived unexpected message E into its receive R and complete R
 * (no lock held). */
static void
deliver(unexp_t *e, coll_req_t *r)
{
    char msg[COLL_ERR_MAX];
    td_status_t st = e->status;

    r->from = e->src;
    if (st == TD_OK) {
        if (e->nbytes > 0) {
            memcpy(r->buf, e->body, e->nbytes);
        }
        if (e->mbox_slot) {
            coll_mbox_ack(e->src, e->mbox_slot - 1, TD_OK, r->dtype, r->ndim,
                          r->shape, 1);
            e->mbox_slot = 0;
            e->body = NULL;
        } else if (r->type == REQ_RECV_P2P) {
            send_ack(e->src, e->group_id, e->digest, e->seq, TD_OK, r->dtype,
                     r->ndim, r->shape);
        }
    } else {
        snprintf(msg, sizeof(msg), "coll: receiving from rank %d failed: %s",
                 e->src, td_strerror(st));
    }
    ux_free(e);
    req_complete(r, st, st != TD_OK ? msg : NULL);
}

/* Body of an unexpected message landed (token holder). */
static void
unexp_done(void *arg, td_status_t status, int src, td_iov_t *bodies,
           size_t n_bodies)
{
    unexp_t *e = arg;
    coll_req_t *r;

    (void)src;
    pthread_mutex_lock(&C.lock);
    e->body = n_bodies > 0 ? bodies[0].buf : NULL;
    e->status = status;
    e->arrived = 1;
    r = e->claim;
    if (r != NULL || e->orphan) {
        ux_remove(e);
    }
    pthread_mutex_unlock(&C.lock);
    if (r != NULL) {
        deliver(e, r);
    } else if (e->orphan) {
        ux_free(e);
    }
}

/* Does unexpected E match posted receive R? */
static int
matches(const unexp_t *e, const coll_req_t *r)
{
    if (e->group_id != r->group_id || e->claim != NULL || e->orphan) {
        return 0;
    }
    if (r->type == REQ_RECV_P2P) {
        return e->type == MSG_P2P && e->tag == r->tag &&
               (r->peer < 0 || r->peer == e->src);
    }
    return e->type == MSG_COLL && e->seq == r->seq && e->tag == r->tag &&
           e->src == r->peer;
}

/* Mailbox message M matched receive R: copy it in when it fits, and ack
 * it in its slot (POKE: wake a sleeping sender; never under coll_lock).
 * R's status, with MSG naming both shapes when it does not fit. */
static td_status_t
mbox_receive(coll_req_t *r, const coll_mbox_msg_t *m, char *msg, size_t len,
             int poke)
{
    td_status_t code;

    r->from = m->src;
    r->seq = m->seq;                /* the ack names the sender's seq */
    code = p2p_fits(r, m->src, m->dtype, m->ndim, m->shape, m->nbytes, msg,
                    len);
    if (code == TD_OK && m->nbytes > 0) {
        memcpy(r->buf, m->body, m->nbytes);
    }
    coll_mbox_ack(m->src, m->slot, code, r->dtype, r->ndim, r->shape, poke);
    return code;
}

/* Is a p2p receive posted earlier (coll_lock held) that a message from
 * R's source to R's group could match? */
static int
posted_p2p_from(const coll_req_t *r)
{
    for (const coll_req_t *q = C.posted_head; q != NULL; q = q->next) {
        if (q->type == REQ_RECV_P2P && q->group_id == r->group_id &&
            (q->peer < 0 || q->peer == r->peer)) {
            return 1;
        }
    }
    return 0;
}

td_status_t
coll_post_recv(coll_req_t *r)
{
    unexp_t *e;
    fail_t f = { .code = TD_OK };
    char msg[COLL_ERR_MAX];
    td_status_t st;

    /* relaxed: published to other threads by coll_lock */
    atomic_store_explicit(&r->done, 0, memory_order_relaxed);
    atomic_store_explicit(&r->cma_ready_a, 0, memory_order_relaxed);
    r->status = TD_OK;
    r->err[0] = '\0';
    atomic_store_explicit(&r->pending, 1, memory_order_relaxed);
    r->from = -1;
    r->exact_seq = 0;
    pthread_mutex_lock(&C.lock);
    if (r->g->broken != TD_OK) {
        snprintf(msg, sizeof(msg), "%s", r->g->broken_msg);
        st = r->g->broken;
        pthread_mutex_unlock(&C.lock);
        req_complete(r, st, msg);
        return TD_OK;
    }
    for (e = C.ux_head; e != NULL; e = e->next) {
        if (matches(e, r)) {
            break;
        }
    }
    if (e == NULL && r->type == REQ_RECV_P2P && r->peer >= 0 &&
        !r->exact_seq && coll_mbox_active() && !posted_p2p_from(r)) {
        /* The message may wait in its sender's mailbox already: take it
         * for R at once, which nothing posted earlier could match
         * (mbox.c M3), instead of posting R for the drain to match. */
        coll_mbox_msg_t m;

        if (coll_mbox_take(r->peer, r->group_id, r->g->digest, r->tag, &m)) {
            pthread_mutex_unlock(&C.lock);
            st = mbox_receive(r, &m, msg, sizeof(msg), 1);
            req_complete(r, st, st != TD_OK ? msg : NULL);
            return TD_OK;
        }
    }
    if (e == NULL) {
        posted_append(r);
        pthread_mutex_unlock(&C.lock);
        return TD_OK;
    }
    if (r->type == REQ_RECV_P2P) {
        f.code = p2p_fits(r, e->src, e->dtype, e->ndim, e->shape, e->nbytes,
                          f.msg, sizeof(f.msg));
    } else if (e->nbytes != r->nbytes || !desc_equal(&e->desc, r->desc)) {
        f.code = TD_ERR_INVALID;
        coll_mismatch_text(f.msg, sizeof(f.msg), r->g, r->seq, e->src,
                           &e->desc, r->desc);
        f.tell = 1;
    }
    if (f.code != TD_OK) {
        if (r->type == REQ_RECV_P2P) {
            /* The sender learns it from the ack; its body is dropped. */
            int src = e->src, slot = e->mbox_slot;
            uint32_t gid = e->group_id, dig = e->digest, seq = e->seq;

            e->mbox_slot = 0;               /* acked below, not dropped */
            if (slot) {
                e->body = NULL;             /* in the slot */
            }
            if (e->arrived) {
                ux_remove(e);
                ux_free(e);
            } else {
                e->orphan = 1;
            }
            pthread_mutex_unlock(&C.lock);
            if (slot) {
                coll_mbox_ack(src, slot - 1, f.code, r->dtype, r->ndim,
                              r->shape, 1);
            } else {
                send_ack(src, gid, dig, seq, f.code, r->dtype, r->ndim,
                         r->shape);
            }
            req_complete(r, f.code, f.msg);
            return TD_OK;
        }
        pthread_mutex_unlock(&C.lock);
        coll_group_fail(r->g, f.code, 1, r->seq, f.msg);
        return TD_OK;
    }
    if (e->cma) {
        ux_remove(e);
        pthread_mutex_unlock(&C.lock);
        r->from = e->src;
        r->cma_pid = e->cma_pid;
        r->cma_addr = e->cma_addr;
        r->cma_token_addr = e->cma_token_addr;
        r->cma_token = e->cma_token;
        if (r->type == REQ_RECV_P2P) {
            r->seq = e->seq;                  /* the answer names it */
        }
        ux_free(e);
        if (r->type == REQ_RECV_P2P && r->on_done != NULL) {
            cma_read(r);                      /* C10: td_irecv reads it */
            return TD_OK;
        }
        atomic_store(&r->cma_ready_a, 1);     /* C9: the waiter reads it */
        return TD_OK;
    }
    if (e->arrived) {
        ux_remove(e);
        pthread_mutex_unlock(&C.lock);
        deliver(e, r);
        return TD_OK;
    }
    e->claim = r;          /* C2: unexp_done delivers it */
    pthread_mutex_unlock(&C.lock);
    return TD_OK;
}

int
coll_p2p_recv_fast(coll_req_t *r)
{
    coll_mbox_msg_t m;
    unexp_t *e;
    double t_first = 0;

    if (r->peer < 0 || r->nbytes > MBOX_BODY || !coll_mbox_from(r->peer)) {
        return 0;
    }
    for (unsigned i = 0; !coll_mbox_ready(r->peer); i++) {
        if ((i & 63) == 63 && coll_spin_over(&t_first, r->g)) {
            return 0;
        }
        td_cpu_relax();
    }
    r->status = TD_OK;
    r->err[0] = '\0';
    pthread_mutex_lock(&C.lock);
    for (e = C.ux_head; e != NULL && !matches(e, r); e = e->next) {
    }
    /* M10: only what coll_post_recv would have taken */
    if (r->g->broken != TD_OK || e != NULL || posted_p2p_from(r) ||
        !coll_mbox_take(r->peer, r->group_id, r->g->digest, r->tag, &m)) {
        pthread_mutex_unlock(&C.lock);
        return 0;
    }
    pthread_mutex_unlock(&C.lock);
    r->status = mbox_receive(r, &m, r->err, sizeof(r->err), 1);
    coll_fast_count(0);
    return 1;
}

#define MSG_P2P_RESEND 0x100       /* posted_take: a P2P with COLL_F_RESEND */

/* Take (C2) the first posted receive P2P/COLL message M matches. */
static coll_req_t *
posted_take(unsigned type, uint32_t gid, int src, uint32_t seq, uint32_t tag)
{
    coll_req_t *p = NULL;

    for (coll_req_t *q = C.posted_head; q != NULL; p = q, q = q->next) {
        int hit;

        if (q->group_id != gid) {
            continue;
        }
        switch (type) {
        case MSG_P2P:
            hit = q->type == REQ_RECV_P2P && q->tag == tag && !q->exact_seq &&
                  (q->peer < 0 || q->peer == src);
            break;
        case MSG_P2P_RESEND:
            hit = q->type == REQ_RECV_P2P && q->tag == tag && q->exact_seq &&
                  q->seq == seq && q->peer == src;
            break;
        case MSG_COLL:
            hit = q->type == REQ_RECV_COLL && q->seq == seq &&
                  q->tag == tag && q->peer == src;
            break;
        case MSG_ACK:
            hit = q->type == REQ_SEND_P2P && q->seq == seq && q->peer == src;
            break;
        case MSG_CMA:
            hit = (q->type == REQ_SEND_COLL || q->type == REQ_SEND_P2P) &&
                  q->cma_send && q->seq == seq && q->tag == tag &&
                  q->peer == src;
            break;
        default:
            hit = 0;
        }
        if (hit) {
            posted_unlink(p, q);
            return q;
        }
    }
    return NULL;
}

/* The transport's receive handler (token holder, C1). Every field is
 * checked before use. */
static void
rx_handler(void *arg, td_transport_rx_t *rx)
{
    const uint8_t *h = rx->header;
    coll_wire_t m;
    td_group_t *g;
    coll_req_t *r;
    unexp_t *e;
    fail_t f = { .code = TD_OK };

    (void)arg;
    if (coll_wire_parse(h, rx->header_len, rx->n_bodies,
                        rx->n_bodies > 0 ? rx->body_len[0] : 0, &m) != TD_OK) {
        goto reject;                    /* wire.c W1-W3 */
    }
    if (m.offer != NULL) {
        coll_mbox_offered(rx->src, m.offer);
    }
    if (m.type == MSG_P2P || m.type == MSG_POKE) {
        /* mbox.c M2: what the sender wrote into its mailbox before this
         * message comes first. */
        coll_mbox_drain(rx->src);
        if (m.type == MSG_POKE) {
            coll_mbox_poll();           /* acks, too */
            wake_waiters();
            return;
        }
    }
    pthread_mutex_lock(&C.lock);
    g = group_find(m.gid);
    if (g == NULL && m.gid != 0 && m.gid <= C.id_max) {
        /* C11: a group made here and destroyed since (ids grow in the
         * order td_group_new is called, the same on every rank) */
        pthread_mutex_unlock(&C.lock);
        td_log_debug("coll: dropped a message from rank %d for group %u, "
                     "destroyed here", rx->src, m.gid);
        return;
    }
    if (g != NULL && g->digest != m.digest) {
        f.code = TD_ERR_INVALID;
        snprintf(f.msg, sizeof(f.msg), "coll: group %u has different members "
                 "on rank %d and rank %d (member digests %08x and %08x): "
                 "every rank must call td_group_new with the same lists in "
                 "the same order", m.gid, rx->src, C.rank, m.digest,
                 g->digest);
        f.g = g;
        f.gid = m.gid;
        f.seq = m.seq;
        pthread_mutex_unlock(&C.lock);
        goto fail;
    }
    if (g != NULL && (g->broken != TD_OK ||
                      g->of_world[rx->src] < 0 || g->me < 0)) {
        pthread_mutex_unlock(&C.lock);
        return;                         /* C6: dropped */
    }
    if (m.type == MSG_ABORT) {
        const char *text = m.text;
        size_t len = m.text_len;

        if (g == NULL) {
            /* Not made here yet: applied when it is. */
            e = calloc(1, sizeof(*e));
            if (e != NULL && (e->text = strndup(text, len)) != NULL &&
                C.n_ux < COLL_UNEXPECTED_MAX) {
                e->type = MSG_ABORT;
                e->group_id = m.gid;
                e->seq = m.seq;
                e->code = (int32_t)m.tag;
                e->arrived = 1;
                e->src = rx->src;
                ux_append(e);
                e = NULL;
            }
            if (e != NULL) {
                free(e->text);
                free(e);
            }
            pthread_mutex_unlock(&C.lock);
            return;
        }
        pthread_mutex_unlock(&C.lock);
        f.code = (td_status_t)(int32_t)m.tag;
        if (f.code >= TD_OK) {
            f.code = TD_ERR_REMOTE;
        }
        snprintf(f.msg, sizeof(f.msg), "%.*s (reported by rank %d)", (int)len,
                 text, rx->src);
        f.g = g;
        f.gid = m.gid;
        f.seq = m.seq;
        goto fail;
    }
    if (m.type == MSG_CMA) {
        uint32_t answer = m.word;

        r = posted_take(MSG_CMA, m.gid, rx->src, m.seq, m.tag);
        pthread_mutex_unlock(&C.lock);
        if (r == NULL) {
            return;
        }
        if (answer == 0) {
            req_complete(r, TD_OK, NULL);
            return;
        }
        /* C9: it cannot read us (1: and stop offering) or does not want
         * to now (2); resend through UCX. */
        if (answer == 1) {
            __atomic_store_n(&cma_off[rx->src], 1, __ATOMIC_RELAXED);
        }
        r->cma_send = 0;
        if (r->type == REQ_SEND_P2P) {
            /* C10: matched by the receive that answered; completes with
             * the transport's completion and the ack (C3). */
            r->hdr[20] = COLL_F_RESEND;
            atomic_store(&r->pending, 2);
            pthread_mutex_lock(&C.lock);
            posted_append(r);
            pthread_mutex_unlock(&C.lock);
        }
        {
            td_iov_t iov = { r->buf, r->nbytes, TD_MEM_HOST };
            td_status_t st = td_transport_send(C.tp, rx->src,
                                               COLL_TRANSPORT_ID, r->hdr,
                                               r->hdr_len, &iov, 1,
                                               send_done, r);
            if (st != TD_OK) {
                int took = 1;

                if (r->type == REQ_SEND_P2P) {
                    pthread_mutex_lock(&C.lock);
                    took = posted_remove(r);
                    pthread_mutex_unlock(&C.lock);
                    atomic_store(&r->pending, 1);
                }
                if (took) {
                    req_complete(r, st, td_last_error());
                }
            }
        }
        return;
    }
    if (m.type == MSG_ACK) {
        pthread_mutex_unlock(&C.lock);
        coll_p2p_acked(rx->src, m.gid, m.seq,
                       (td_status_t)(int32_t)m.word,
                       m.dtype, m.ndim, m.shape);
        return;
    }
    if (m.type == MSG_COLL && g != NULL &&
        __atomic_load_n(&g->in_op, __ATOMIC_RELAXED) && g->cur_seq == m.seq &&
        !desc_equal(&m.desc, &g->cur_desc)) {
        f.code = TD_ERR_INVALID;
        coll_mismatch_text(f.msg, sizeof(f.msg), g, m.seq, rx->src, &m.desc,
                           &g->cur_desc);
        f.g = g;
        f.gid = m.gid;
        f.seq = m.seq;
        f.tell = 1;
        pthread_mutex_unlock(&C.lock);
        goto fail;
    }
    r = posted_take(m.type == MSG_P2P && (m.flags & COLL_F_RESEND) ?
                    MSG_P2P_RESEND : m.type, m.gid, rx->src, m.seq, m.tag);
    if (r != NULL) {
        if (m.type == MSG_P2P) {
            f.code = p2p_fits(r, rx->src, m.dtype, m.ndim, m.shape,
                              m.nbytes, f.msg, sizeof(f.msg));
        } else if (m.nbytes != r->nbytes) {
            f.code = TD_ERR_PROTOCOL;
            snprintf(f.msg, sizeof(f.msg), "coll: rank %d sent %" PRIu64
                     " bytes for step %u of call #%u in group %u, rank %d "
                     "expects %zu", rx->src, m.nbytes, m.tag, m.seq, m.gid,
                     C.rank, r->nbytes);
            f.g = g;
            f.gid = m.gid;
            f.seq = m.seq;
            f.tell = 1;
        }
        pthread_mutex_unlock(&C.lock);
        if (f.code != TD_OK) {
            if (m.type == MSG_P2P) {
                send_ack(rx->src, m.gid, m.digest, m.seq, f.code, r->dtype,
                         r->ndim, r->shape);
                req_complete(r, f.code, f.msg);     /* body dropped */
                return;
            }
            req_complete(r, f.code, f.msg);
            goto fail;
        }
        if (m.cma) {
            /* C9: the waiter reads it in place. */
            r->from = rx->src;
            r->cma_pid = m.cma_pid;
            r->cma_addr = m.cma_addr;
            r->cma_token_addr = m.cma_token_addr;
            r->cma_token = m.cma_token;
            if (m.type == MSG_P2P) {
                r->seq = m.seq;         /* the answer names it */
                if (r->on_done != NULL) {
                    /* C10: an irecv posted earlier; nobody may be
                     * waiting for it: have the body sent. */
                    r->peer = rx->src;
                    r->exact_seq = 1;
                    pthread_mutex_lock(&C.lock);
                    posted_append(r);
                    pthread_mutex_unlock(&C.lock);
                    send_cma_answer(rx->src, r, 2);
                    return;
                }
            }
            atomic_store(&r->cma_ready_a, 1);
            wake_waiters();
            return;
        }
        r->seq = m.seq;                 /* the ack names the sender's seq */
        /* A 0-byte body still needs a buffer, or the transport would
         * allocate one and hand it to us. */
        rx->dest[0].buf = r->buf != NULL ? r->buf : (void *)&zero_body;
        rx->dest[0].mem = TD_MEM_HOST;
        rx->done = matched_done;
        rx->done_arg = r;
        return;
    }
    if (m.type == MSG_P2P && (m.flags & COLL_F_RESEND)) {
        /* C10: its receive was withdrawn (timeout, failure) meanwhile. */
        pthread_mutex_unlock(&C.lock);
        td_log_debug("coll: dropped a resent body from rank %d (group %u, "
                     "#%u): its receive is gone", rx->src, m.gid, m.seq);
        return;
    }
    /* Unexpected: kept (C7) until its receive is posted. */
    if (C.n_ux >= COLL_UNEXPECTED_MAX || (e = calloc(1, sizeof(*e))) == NULL) {
        pthread_mutex_unlock(&C.lock);
        td_log_error("coll: dropped a message from rank %d (group %u): %zu "
                     "unmatched messages queued already", rx->src, m.gid,
                     C.n_ux);
        return;
    }
    e->type = m.type;
    e->dtype = m.dtype;
    e->ndim = m.ndim;
    e->group_id = m.gid;
    e->digest = m.digest;
    e->seq = m.seq;
    e->tag = m.tag;
    e->src = rx->src;
    e->nbytes = m.nbytes;
    e->desc = m.desc;
    memcpy(e->shape, m.shape, sizeof(m.shape));
    if (m.cma) {
        e->cma = 1;
        e->arrived = 1;
        e->cma_pid = m.cma_pid;
        e->cma_addr = m.cma_addr;
        e->cma_token_addr = m.cma_token_addr;
        e->cma_token = m.cma_token;
    }
    ux_append(e);
    pthread_mutex_unlock(&C.lock);
    if (!m.cma) {
        rx->done = unexp_done;
        rx->done_arg = e;
    }
    return;

fail:
    if (f.g != NULL) {
        /* by id: the group may be destroyed meanwhile (only read under
         * the lock) */
        group_fail(NULL, f.gid, f.code, f.tell, f.seq, f.msg);
    }
    return;
reject:
    td_log_warn("coll: rejected a malformed message from rank %d (%zu "
                "header bytes)", rx->src, rx->header_len);
}

/* ---- point-to-point through mailboxes (mbox.c) --------------------------- */

void coll_lock(void) { pthread_mutex_lock(&C.lock); }
void coll_unlock(void) { pthread_mutex_unlock(&C.lock); }

void
coll_req_complete(coll_req_t *r, td_status_t status, const char *msg)
{
    req_complete(r, status, status != TD_OK ? msg : NULL);
}

void
coll_group_fail_id(uint32_t gid, td_status_t code, uint32_t seq,
                   const char *msg)
{
    group_fail(NULL, gid, code, 0, seq, msg);
}

/* coll_lock held: the send SEQ of group GID to world rank SRC, whose ack
 * came back, taken off the posted list (C2); NULL when it is gone. */
coll_req_t *
coll_p2p_ack_take_locked(int src, uint32_t gid, uint32_t seq)
{
    return posted_take(MSG_ACK, gid, src, seq, 0);
}

/* Complete send R (taken by its ack from SRC) with the ack's status ST and
 * the receiver's DTYPE, NDIM, SHAPE (no lock held). */
void
coll_p2p_ack_complete(coll_req_t *r, int src, td_status_t st, uint8_t dtype,
                      int ndim, const int64_t *shape)
{
    char msg[COLL_ERR_MAX] = "";

    if (st == TD_ERR_CANCELED) {
        snprintf(msg, sizeof(msg), "coll: td_send to rank %d tag %u: rank "
                 "%d dropped the message unreceived (its group was "
                 "destroyed or failed there)", src, r->tag, src);
    } else if (st == TD_ERR_PROTOCOL) {
        snprintf(msg, sizeof(msg), "coll: td_send to rank %d tag %u: rank "
                 "%d rejected the message as malformed", src, r->tag, src);
    } else if (st != TD_OK) {
        char a[160], b[160];

        shape_text(a, sizeof(a), r->dtype, r->ndim, r->shape);
        shape_text(b, sizeof(b), dtype, ndim, shape);
        snprintf(msg, sizeof(msg), "coll: td_send to rank %d tag %u: rank %d "
                 "sent %s (%zu bytes) but rank %d receives into %s", src,
                 r->tag, C.rank, a, r->nbytes, src, b);
        if (st != TD_ERR_SHAPE && st != TD_ERR_DTYPE) {
            st = TD_ERR_REMOTE;
        }
    }
    req_complete(r, st, msg);
}

/* The ack of our p2p send SEQ in group GID came back from world rank SRC
 * (a MSG_ACK): complete the send (C2). */
void
coll_p2p_acked(int src, uint32_t gid, uint32_t seq, td_status_t st,
               uint8_t dtype, int ndim, const int64_t *shape)
{
    coll_req_t *r;

    pthread_mutex_lock(&C.lock);
    r = posted_take(MSG_ACK, gid, src, seq, 0);
    pthread_mutex_unlock(&C.lock);
    if (r != NULL) {
        coll_p2p_ack_complete(r, src, st, dtype, ndim, shape);
    }
}

/* coll_lock held: send R through DST's mailbox, posted (for its ack)
 * before the slot is published, since the ack may come at once. */
void
coll_p2p_post_mbox_locked(coll_req_t *r, int dst)
{
    /* relaxed: published to other threads by coll_lock */
    atomic_store_explicit(&r->done, 0, memory_order_relaxed);
    r->status = TD_OK;
    r->err[0] = '\0';
    r->peer = dst;
    r->cma_send = 0;
    atomic_store_explicit(&r->tp_counted, 0, memory_order_relaxed);
    atomic_store_explicit(&r->pending, 1, memory_order_relaxed);
    posted_append(r);
}

/* TODIST_FAULT's verdict on a mailbox message (tests only). */
int
coll_fault_roll(void)
{
    return C.tp != NULL ? td_transport_fault_roll(C.tp, "mbox") : 0;
}

int
coll_spin_over(double *t_first, const td_group_t *g)
{
    double now = td_now_s();

    if (*t_first == 0) {
        *t_first = now;                 /* (the clock is read only now) */
        return 0;
    }
    return now - *t_first > MBOX_SPIN_S ||
           atomic_load_explicit(&C.stopped, memory_order_relaxed) ||
           (g != NULL && __atomic_load_n(&g->broken, __ATOMIC_RELAXED) !=
                             TD_OK);
}

void
coll_fast_count(int send)
{
    /* no locked instruction: a lost count is harmless (a debug figure) */
    atomic_store_explicit(&C.fast[send != 0],
                          atomic_load_explicit(&C.fast[send != 0],
                                               memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

void
coll_poke(int dst)
{
    uint8_t h[COLL_WIRE_BYTES];
    td_group_t gg = { .id = 0 };

    atomic_fetch_add_explicit(&C.pokes, 1, memory_order_relaxed);
    hdr_fixed(h, MSG_POKE, 0, 0, &gg, 0, 0, 0);
    if (td_transport_send(C.tp, dst, COLL_TRANSPORT_ID, h, sizeof(h), NULL,
                          0, NULL, NULL) != TD_OK) {
        td_log_debug("coll: poke to rank %d not sent: %s", dst,
                     td_last_error());
    }
}

/* coll_lock held (mbox.c M4): a p2p message from world rank M->src read
 * out of its mailbox; rx_handler's MSG_P2P path, with the body in the
 * slot. Returns the receive it matched, to be completed after the unlock
 * with A->code and A->msg (copied and acked here), or NULL (kept as
 * unexpected, or dropped and acked; A->fail: fail group M->gid with
 * A->msg after the unlock). Acks written here never poke. */
coll_req_t *
coll_p2p_arrive_locked(const coll_mbox_msg_t *m, coll_arrive_t *a)
{
    td_group_t *g;
    coll_req_t *r;
    unexp_t *e;

    a->code = TD_OK;
    a->fail = 0;
    a->msg[0] = '\0';
    g = group_find(m->gid);
    if ((g == NULL && m->gid != 0 && m->gid <= C.id_max) ||
        (g != NULL && (g->broken != TD_OK || g->of_world[m->src] < 0 ||
                       g->me < 0))) {
        coll_mbox_ack(m->src, m->slot, TD_ERR_CANCELED, 0, 0, NULL, 0);
        return NULL;                          /* C11, C6: dropped */
    }
    if (g != NULL && g->digest != m->digest) {
        snprintf(a->msg, sizeof(a->msg), "coll: group %u has different "
                 "members on rank %d and rank %d (member digests %08x and "
                 "%08x): every rank must call td_group_new with the same "
                 "lists in the same order", m->gid, m->src, C.rank, m->digest,
                 g->digest);
        coll_mbox_ack(m->src, m->slot, TD_ERR_CANCELED, 0, 0, NULL, 0);
        a->fail = 1;
        return NULL;
    }
    r = posted_take(MSG_P2P, m->gid, m->src, m->seq, m->tag);
    if (r != NULL) {
        a->code = mbox_receive(r, m, a->msg, sizeof(a->msg), 0);
        return r;
    }
    /* Unexpected: kept in its slot (M6, C7) until its receive is posted. */
    if (C.n_ux >= COLL_UNEXPECTED_MAX || (e = calloc(1, sizeof(*e))) == NULL) {
        td_log_error("coll: dropped a message from rank %d (group %u): %zu "
                     "unmatched messages queued already", m->src, m->gid,
                     C.n_ux);
        coll_mbox_ack(m->src, m->slot, TD_ERR_CANCELED, 0, 0, NULL, 0);
        return NULL;
    }
    e->type = MSG_P2P;
    e->dtype = m->dtype;
    e->ndim = m->ndim;
    e->group_id = m->gid;
    e->digest = m->digest;
    e->seq = m->seq;
    e->tag = m->tag;
    e->src = m->src;
    e->nbytes = m->nbytes;
    memcpy(e->shape, m->shape, sizeof(int64_t) * m->ndim);
    e->body = (void *)m->body;
    e->mbox_slot = m->slot + 1;
    e->arrived = 1;
    e->status = TD_OK;
    ux_append(e);
    return NULL;
}

/* ---- waiting ------------------------------------------------------------- */

typedef struct {
    coll_req_t **reqs;
    int          n;
    td_group_t  *g;
    double       spin;       /* drive this long after the last completion */
} wait_t;

static int
all_done(const wait_t *w)
{
    for (int i = 0; i < w->n; i++) {
        if (w->reqs[i] != NULL &&
            !atomic_load_explicit(&w->reqs[i]->done, memory_order_acquire)) {
            return 0;
        }
    }
    return 1;
}

/* Receives whose bodies wait to be read in place (C9). */
static int
cma_pending(const wait_t *w)
{
    for (int i = 0; i < w->n; i++) {
        if (w->reqs[i] != NULL &&
            atomic_load_explicit(&w->reqs[i]->cma_ready_a,
                                 memory_order_acquire)) {
            return 1;
        }
    }
    return 0;
}

static void
cma_service(const wait_t *w)
{
    for (int i = 0; i < w->n; i++) {
        coll_req_t *r = w->reqs[i];

        if (r != NULL && atomic_exchange(&r->cma_ready_a, 0)) {
            cma_read(r);
        }
    }
}

/* Is W's wait over (or has it work to do)? No polling: callable under
 * wait_lock. */
static int
wait_check(const wait_t *w)
{
    return all_done(w) || cma_pending(w) ||
           (w->g != NULL &&
            __atomic_load_n(&w->g->broken, __ATOMIC_RELAXED) != TD_OK) ||
           atomic_load_explicit(&C.stopped, memory_order_relaxed);
}

/* The transport's predicate while we drive: mailboxes are polled here. */
static int
wait_pred(void *arg)
{
    const wait_t *w = arg;

    if (all_done(w)) {
        return 1;
    }
    coll_mbox_poll();
    return wait_check(w);
}

/* Drive or sleep until PRED holds or UNTIL (td_now_s) passes. */
static void
wait_some(wait_t *w, double until, double t0)
{
    double now = td_now_s();
    td_status_t st;
    int sleep_cookie;

    if (now - t0 < w->spin) {
        double max = t0 + w->spin - now;

        if (until > 0 && until - now < max) {
            max = until - now;
        }
        st = td_transport_drive(C.tp, wait_pred, w, max);
        if (st == TD_OK || st == TD_ERR_TIMEOUT) {
            return;
        }
    }
    /* Another thread drives, or we waited long: sleep until a completion
     * wakes us (the progress thread delivers), then drive a little.
     * Mailbox writers poke us once told (mbox.c M5). */
    sleep_cookie = coll_mbox_sleep_begin();
    coll_mbox_poll();
    pthread_mutex_lock(&C.wait_lock);
    atomic_fetch_add(&C.waiters, 1);
    /* M5: announced to mailbox writers, who read it without a fence, a
     * first nap, then a poll that sees any write that missed it */
    for (int nap = sleep_cookie != 0; !wait_check(w); nap = 0) {
        struct timespec ts;

        td_deadline_after(nap ? MBOX_RECHECK_S : 0.002, &ts);
        pthread_cond_timedwait(&C.wait_cond, &C.wait_lock, &ts);
        if (!nap) {
            break;
        }
        pthread_mutex_unlock(&C.wait_lock);
        coll_mbox_poll();
        pthread_mutex_lock(&C.wait_lock);
    }
    atomic_fetch_sub(&C.waiters, 1);
    pthread_mutex_unlock(&C.wait_lock);
    if (!wait_pred(w)) {
        td_transport_drive(C.tp, wait_pred, w, 50e-6);
    }
    /* (still announced while it drives: a mailbox writer pokes then,
     * harmlessly, and so the whole slow path is covered) */
    coll_mbox_sleep_end(sleep_cookie);
}

/* Take the not-yet-matched requests of W off the posted list and
 * complete them with CODE/MSG (C4). */
static void
withdraw(wait_t *w, td_status_t code, const char *msg)
{
    for (int i = 0; i < w->n; i++) {
        coll_req_t *r = w->reqs[i];
        int took;

        if (r == NULL || atomic_load(&r->done)) {
            continue;
        }
        pthread_mutex_lock(&C.lock);
        took = posted_remove(r);
        pthread_mutex_unlock(&C.lock);
        if (took) {
            req_complete(r, code, msg);
        }
    }
}

/* "1, 3" for the ranks W's unfinished receives wait for. */
static void
missing_ranks(const wait_t *w, char *s, size_t len)
{
    size_t n = 0;

    s[0] = '\0';
    for (int i = 0; i < w->n && n < len; i++) {
        const coll_req_t *r = w->reqs[i];

        if (r != NULL && !atomic_load(&r->done)) {
            int dup = 0;

            for (int j = 0; j < i; j++) {
                dup |= w->reqs[j] != NULL && !atomic_load(&w->reqs[j]->done) &&
                       w->reqs[j]->peer == r->peer;
            }
            if (!dup) {
                int k = snprintf(s + n, len - n, "%s%d", n ? ", " : "",
                                 r->peer);
                n += k > 0 ? (size_t)k : 0;
            }
        }
    }
}

td_status_t
coll_wait_ex(td_group_t *g, coll_req_t **reqs, int n, double deadline,
             int is_coll, double give_up)
{
    wait_t w = { reqs, n, g, SPIN_S };
    double t0, t_spin;
    unsigned long seen = atomic_load(&C.completions);
    char msg[COLL_ERR_MAX];
    size_t bytes = 0;

    /* Large bodies move only while some thread drives the worker (the
     * progress thread sleeps between events): keep driving for as long as
     * the bytes need at 1 GB/s, and after every completion, before
     * sleeping. */
    for (int i = 0; i < n; i++) {
        bytes += reqs[i] != NULL ? reqs[i]->nbytes : 0;
    }
    w.spin += (double)bytes * 1e-9;

    if (td_transport_on_progress_thread(C.tp)) {
        withdraw(&w, TD_ERR_STATE, "coll: waited for inside a transport "
                 "callback");
        /* Cannot drive from here: leave what is in flight to finish. */
        return td_error(TD_ERR_STATE, "coll: a wait inside a transport "
                        "callback would deadlock");
    }
    if (!is_coll && coll_mbox_active()) {
        /* A peer on this host answers through its mailbox within a
         * microsecond or two when it is waiting too: poll the mailboxes
         * alone for a moment before driving the transport (mbox.c). The
         * clock is read only once that takes long. */
        double t_first = 0;
        int what = 0;

        /* Only what these requests wait for: a td_send's wait leaving the
         * reply in the mailbox lets the td_recv that follows match it
         * straight from there, not through the unexpected list. */
        for (int i = 0; i < n; i++) {
            const coll_req_t *r = reqs[i];

            if (r == NULL || atomic_load(&r->done)) {
                continue;
            }
            /* only when each answer comes through a mailbox: a message
             * over the network needs the transport driven at once */
            if ((r->type == REQ_SEND_P2P && atomic_load(&r->tp_counted)) ||
                r->nbytes > MBOX_BODY || r->peer < 0 ||
                !coll_mbox_local(r->peer)) {
                what = 0;
                break;
            }
            what |= r->type == REQ_SEND_P2P ? MBOX_POLL_ACKS : MBOX_POLL_IN;
        }
        for (unsigned i = 0; what != 0 && !all_done(&w); i++) {
            coll_mbox_poll_some(what);
            if ((i & 63) == 63 && coll_spin_over(&t_first, NULL)) {
                break;
            }
            td_cpu_relax();
        }
    }
    t0 = all_done(&w) ? 0 : td_now_s();     /* (done: no clock read) */
    t_spin = t0;
    if (deadline < 0) {
        deadline = t0 + coll_timeout();
    }
    while (!all_done(&w)) {
        double now;
        td_status_t st = TD_OK;

        if (is_coll && g != NULL && g->shm != NULL) {
            /* a member waiting in the segment for another call (shm.c
             * S4) fails the group here; the check below reports it */
            (void)coll_shm_check(g, g->cur_seq, &g->cur_desc);
        }
        cma_service(&w);
        if (all_done(&w)) {
            break;
        }
        now = td_now_s();

        if (atomic_load(&C.stopped)) {
            st = TD_ERR_CANCELED;
            snprintf(msg, sizeof(msg), "coll: the runtime shut down with "
                     "this operation pending");
        } else if (g != NULL &&
                   __atomic_load_n(&g->broken, __ATOMIC_ACQUIRE) != TD_OK) {
            pthread_mutex_lock(&C.lock);
            st = g->broken;
            snprintf(msg, sizeof(msg), "%s", g->broken_msg);
            pthread_mutex_unlock(&C.lock);
        } else if (give_up > 0 && now > give_up) {
            return td_error(TD_ERR_TIMEOUT, "coll: wait timed out after %.3f "
                            "s (the operation goes on)", now - t0);
        } else if (deadline > 0 && now > deadline) {
            char who[128];

            missing_ranks(&w, who, sizeof(who));
            st = TD_ERR_TIMEOUT;
            snprintf(msg, sizeof(msg), "coll: %s timed out after %.1f s on "
                     "rank %d waiting for rank(s) %s", is_coll ?
                     coll_kind_name(g->cur_desc.kind) : "point-to-point",
                     coll_timeout(), C.rank, who[0] ? who : "(none: sends "
                     "in flight)");
            if (is_coll) {
                /* Told to every member: a late one must not go on as if
                 * the call had worked (C6). */
                coll_group_fail(g, st, 1, g->cur_seq, msg);
            }
        }
        if (st != TD_OK) {
            withdraw(&w, st, msg);
            while (!all_done(&w)) {       /* C4: bodies in flight land */
                cma_service(&w);
                wait_some(&w, td_now_s() + 0.01, 0);
            }
            break;
        }
        {
            double until = deadline;

            if (give_up > 0 && (until <= 0 || give_up < until)) {
                until = give_up;
            }
            unsigned long c = atomic_load_explicit(&C.completions,
                                                   memory_order_relaxed);

            if (c != seen) {
                seen = c;
                t_spin = td_now_s();
            }
            wait_some(&w, until, t_spin);
        }
    }
    for (int i = 0; i < n; i++) {
        if (reqs[i] != NULL && reqs[i]->status != TD_OK) {
            return td_error(reqs[i]->status, "%s", reqs[i]->err);
        }
    }
    return TD_OK;
}

td_status_t
coll_wait(td_group_t *g, coll_req_t **reqs, int n, double deadline)
{
    return coll_wait_ex(g, reqs, n, deadline, 1, 0);
}

/* ---- collective steps ------------------------------------------------------ */

td_status_t
coll_irecv(coll_op_t *op, coll_req_t *r, int src, uint32_t tag, void *buf,
           size_t nbytes)
{
    r->type = REQ_RECV_COLL;
    r->on_done = NULL;
    r->cma_dst = NULL;          /* set by the caller after posting, if */
    r->cma_landed = 0;
    r->g = op->g;
    r->group_id = op->g->id;
    r->peer = op->g->ranks[src];
    r->tag = tag;
    r->seq = op->seq;
    r->buf = buf;
    r->nbytes = nbytes;
    r->desc = &op->desc;
    return coll_post_recv(r);
}

td_status_t
coll_isend(coll_op_t *op, coll_req_t *r, int dst, uint32_t tag,
           const void *buf, size_t nbytes)
{
    int wdst = op->g->ranks[dst];

    r->type = REQ_SEND_COLL;
    r->on_done = NULL;
    r->g = op->g;
    r->group_id = op->g->id;
    r->tag = tag;
    r->seq = op->seq;
    r->buf = (void *)buf;
    r->nbytes = nbytes;
    r->hdr_len = coll_hdr_coll(r->hdr, op, tag, nbytes);
    return coll_post_send_offer(r, wdst);
}

/* Send R (its header in r->hdr) to world rank WDST: offered in place (C9)
 * when the single-copy path may serve it, else with its body. */
td_status_t
coll_post_send_offer(coll_req_t *r, int wdst)
{
    uint8_t h[sizeof(r->hdr) + 32];
    td_status_t st;

    r->cma_send = 0;
    atomic_store(&r->cma_ready_a, 0);
    if (!cma_enabled || r->nbytes < COLL_CMA_MIN || wdst == C.rank ||
        __atomic_load_n(&cma_off[wdst], __ATOMIC_RELAXED)) {
        return coll_post_send(r, wdst, r->hdr, r->hdr_len);
    }
    /* C9: offer the buffer; the reader's MSG_CMA completes the send. */
    memcpy(h, r->hdr, r->hdr_len);
    h[20] = COLL_F_CMA;
    td_put_be32(h + r->hdr_len, (uint32_t)getpid());
    td_put_be32(h + r->hdr_len + 4, 0);
    td_put_be64(h + r->hdr_len + 8, (uint64_t)(uintptr_t)r->buf);
    td_put_be64(h + r->hdr_len + 16, (uint64_t)(uintptr_t)&cma_token);
    td_put_be64(h + r->hdr_len + 24, cma_token);
    atomic_store(&r->done, 0);
    r->status = TD_OK;
    r->err[0] = '\0';
    r->peer = wdst;
    r->cma_send = 1;
    atomic_store(&r->pending, 1);
    pthread_mutex_lock(&C.lock);
    posted_append(r);
    pthread_mutex_unlock(&C.lock);
    st = td_transport_send(C.tp, wdst, COLL_TRANSPORT_ID, h, r->hdr_len + 32,
                           NULL, 0, NULL, NULL);
    if (st != TD_OK) {
        int took;

        pthread_mutex_lock(&C.lock);
        took = posted_remove(r);
        pthread_mutex_unlock(&C.lock);
        if (took) {
            req_complete(r, st, td_last_error());
        }
        return st;
    }
    return TD_OK;
}

/* Tell world rank DST what became of its offer KEY (0 read, 1 resend). */
static void
send_cma_answer(int dst, const coll_req_t *r, uint32_t status)
{
    uint8_t h[COLL_WIRE_BYTES + 4];
    td_group_t gg = { .id = r->group_id, .digest = r->g->digest };

    hdr_fixed(h, MSG_CMA, 0, 0, &gg, r->seq, r->tag, 0);
    td_put_be32(h + COLL_WIRE_BYTES, status);
    if (td_transport_send(C.tp, dst, COLL_TRANSPORT_ID, h, sizeof(h), NULL,
                          0, NULL, NULL) != TD_OK) {
        td_log_debug("coll: answer to rank %d not sent: %s", dst,
                     td_last_error());
    }
}

/* Copy R's offered body from its sender (C9), on the waiting thread. */
static void
cma_read(coll_req_t *r)
{
    int src = r->from;
    pid_t pid = (pid_t)r->cma_pid;
    size_t done = 0;
    int ok = 1;

    if (__atomic_load_n(&cma_verified[src], __ATOMIC_RELAXED) != r->cma_pid) {
        uint64_t tok = 0;
        struct iovec l = { &tok, sizeof(tok) };
        struct iovec rv = { (void *)(uintptr_t)r->cma_token_addr,
                            sizeof(tok) };

        ok = process_vm_readv(pid, &l, 1, &rv, 1, 0) == (ssize_t)sizeof(tok) &&
             tok == r->cma_token;
        if (ok) {
            __atomic_store_n(&cma_verified[src], r->cma_pid,
                             __ATOMIC_RELAXED);
        }
    }
    char *dst = r->cma_dst != NULL ? r->cma_dst : r->buf;

    while (ok && done < r->nbytes) {
        struct iovec l = { dst + done, r->nbytes - done };
        struct iovec rv = { (void *)(uintptr_t)(r->cma_addr + done),
                            r->nbytes - done };
        ssize_t got = process_vm_readv(pid, &l, 1, &rv, 1, 0);

        if (got <= 0) {
            ok = 0;
            break;
        }
        done += (size_t)got;
    }
    if (ok) {
        if (r->type == REQ_RECV_P2P) {
            td_log_debug("coll: p2p body of %zu bytes from rank %d read in "
                         "place", r->nbytes, src);
        }
        r->cma_landed = r->cma_dst != NULL;
        send_cma_answer(src, r, 0);
        req_complete(r, TD_OK, NULL);
        return;
    }
    /* Not readable (another node, no permission): the body comes through
     * UCX into this receive, posted again. */
    td_log_debug("coll: cannot read %zu bytes in place from rank %d (pid "
                 "%d): asking for the body", r->nbytes, src, (int)pid);
    if (r->type == REQ_RECV_P2P) {
        r->peer = src;                        /* C10 */
        r->exact_seq = 1;
    }
    pthread_mutex_lock(&C.lock);
    if (r->g->broken == TD_OK) {
        posted_append(r);
        pthread_mutex_unlock(&C.lock);
        send_cma_answer(src, r, 1);
        return;
    }
    pthread_mutex_unlock(&C.lock);
    send_cma_answer(src, r, 1);
    req_complete(r, r->g->broken, r->g->broken_msg);
}

td_status_t
coll_sendrecv(coll_op_t *op, int dst, const void *sbuf, size_t slen, int src,
              void *rbuf, size_t rlen, uint32_t tag)
{
    coll_req_t rr, sr;
    coll_req_t *reqs[2] = { NULL, NULL };
    td_status_t st;

    if (rbuf != NULL || src >= 0) {
        st = coll_irecv(op, &rr, src, tag, rbuf, rlen);
        if (st != TD_OK) {
            return st;
        }
        reqs[0] = &rr;
    }
    if (dst >= 0) {
        st = coll_isend(op, &sr, dst, tag, sbuf, slen);
        if (st != TD_OK) {
            coll_wait(op->g, reqs, 1, op->deadline);
            return st;
        }
        reqs[1] = &sr;
    }
    return coll_wait(op->g, reqs, 2, op->deadline);
}

/* ---- an operation's life ---------------------------------------------------- */

td_status_t
coll_op_begin(coll_op_t *op)
{
    td_group_t *g = op->g;
    fail_t f = { .code = TD_OK };

    if (!g->watched) {
        /* Endpoints to every member, so a death is noticed (keepalive)
         * even by members that never talk to the dead one. */
        for (int i = 0; i < g->n; i++) {
            if (i != g->me) {
                td_transport_watch(C.tp, g->ranks[i]);
            }
        }
        g->watched = 1;
    }
    op->seq = g->seq++;
    /* Through a segment already mapped the deadline is set by the wait's
     * first look at the clock (shm.c): a call that waits less reads no
     * clock at all (25 ns of a 190 ns all_reduce here). */
    op->deadline = op->desc.algo == ALGO_SHM && g->shm_state == SHM_ON
                   ? 0 : td_now_s() + coll_timeout();
    op->esize = td_dtype_size((td_dtype_t)op->desc.dtype);
    pthread_mutex_lock(&C.lock);
    if (g->broken != TD_OK) {
        pthread_mutex_unlock(&C.lock);
        return coll_group_check(g);
    }
    __atomic_store_n(&g->in_op, 1, __ATOMIC_RELAXED);
    g->cur_seq = op->seq;
    g->cur_desc = op->desc;
    /* C5: what arrived for this call before we made it. */
    for (unexp_t *e = C.ux_head; e != NULL; e = e->next) {
        if (e->type == MSG_COLL && e->group_id == g->id &&
            e->seq == op->seq && !desc_equal(&e->desc, &op->desc)) {
            f.code = TD_ERR_INVALID;
            coll_mismatch_text(f.msg, sizeof(f.msg), g, op->seq, e->src,
                               &e->desc, &op->desc);
            break;
        }
    }
    pthread_mutex_unlock(&C.lock);
    coll_shm_announce(g, op->seq, &op->desc);       /* shm.c S4 */
    if (f.code != TD_OK) {
        coll_group_fail(g, f.code, 1, op->seq, f.msg);
        __atomic_store_n(&g->in_op, 0, __ATOMIC_RELEASE);
        return td_error(f.code, "%s", f.msg);
    }
    return TD_OK;
}

void
coll_op_end(coll_op_t *op)
{
    /* no lock: a message read under it meanwhile compares with the call
     * that just ended, as it would have a moment before */
    __atomic_store_n(&op->g->in_op, 0, __ATOMIC_RELEASE);
}

/* ---- the runtime module ---------------------------------------------------- */

static td_status_t
module_setup(void *arg, td_transport_t *tp, const td_world_t *w)
{
    const char *s = getenv("TODIST_COLL_TIMEOUT");
    td_status_t st;

    (void)arg;
    C.timeout = 60;
    if (s != NULL && *s != '\0') {
        char *end;
        double v = strtod(s, &end);

        if (*end != '\0' || !(v > 0)) {
            return td_error(TD_ERR_INVALID, "coll: TODIST_COLL_TIMEOUT='%s' "
                            "is not a positive number of seconds", s);
        }
        C.timeout = v;
    }
    st = parse_algo(getenv("TODIST_COLL_ALGO"), C.forced);
    if (st != TD_OK) {
        return st;
    }
    s = getenv("TODIST_COLL_CMA");
    cma_enabled = !(s != NULL && strcmp(s, "0") == 0);
    free(cma_off);
    free(cma_verified);
    cma_off = calloc((size_t)w->world_size, 1);
    cma_verified = calloc((size_t)w->world_size, sizeof(int32_t));
    if (cma_off == NULL || cma_verified == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    cma_token = ((uint64_t)getpid() << 32) ^ (uint64_t)(td_now_s() * 1e9) ^
                (uint64_t)(uintptr_t)&cma_token;
    coll_shm_setup(w);
    st = coll_mbox_setup(w->rank, w->world_size, coll_shm_boot_id());
    if (st != TD_OK) {
        return st;
    }
    C.tp = tp;
    C.rank = w->rank;
    C.size = w->world_size;
    atomic_store(&C.stopped, 0);
    st = td_transport_set_handler(tp, COLL_TRANSPORT_ID, rx_handler, NULL);
    if (st != TD_OK) {
        return st;
    }
    td_transport_set_kind(tp, COLL_TRANSPORT_ID, "coll");   /* TODIST_FAULT */
    return coll_world_group_create(w->rank, w->world_size);
}

static size_t
module_outstanding(void *arg)
{
    long n = atomic_load(&C.active);

    (void)arg;
    return n > 0 ? (size_t)n : 0;
}

static void
module_peer_failed(void *arg, int rank, td_status_t why)
{
    struct { uint32_t id; int grank, n; } hit[TD_GROUPS_MAX];
    int n_hit = 0;

    (void)arg;
    (void)why;
    coll_mbox_peer_dead(rank);          /* mbox.c M7 */
    /* Ids, not pointers: a group may be destroyed once the lock is
     * dropped (group_fail looks it up again). */
    pthread_mutex_lock(&C.lock);
    for (int i = 0; i < TD_GROUPS_MAX; i++) {
        td_group_t *g = C.groups[i];

        if (g != NULL && g->me >= 0 && rank < C.size && g->of_world[rank] >= 0) {
            hit[n_hit].id = g->id;
            hit[n_hit].grank = g->of_world[rank];
            hit[n_hit++].n = g->n;
        }
    }
    pthread_mutex_unlock(&C.lock);
    for (int i = 0; i < n_hit; i++) {
        char msg[COLL_ERR_MAX];

        snprintf(msg, sizeof(msg), "coll: rank %d (group rank %d of group "
                 "%u, %d members) died", rank, hit[i].grank, hit[i].id,
                 hit[i].n);
        group_fail(NULL, hit[i].id, TD_ERR_PEER, 0, 0, msg);
    }
    /* Sends waiting for an ack from it in any group, too. */
    pthread_mutex_lock(&C.lock);
    {
        coll_req_t *out = NULL, *p = NULL, *next;

        for (coll_req_t *q = C.posted_head; q != NULL; q = next) {
            next = q->next;
            if (q->peer == rank) {
                posted_unlink(p, q);
                q->next = out;
                out = q;
            } else {
                p = q;
            }
        }
        pthread_mutex_unlock(&C.lock);
        while (out != NULL) {
            char msg[COLL_ERR_MAX];

            next = out->next;
            snprintf(msg, sizeof(msg), "coll: rank %d died with a "
                     "point-to-point message pending", rank);
            req_complete(out, TD_ERR_PEER, msg);
            out = next;
        }
    }
}

static void
module_shutdown(void *arg)
{
    td_group_t *live[TD_GROUPS_MAX];
    int n_live = 0;
    coll_req_t *list;

    (void)arg;
    atomic_store(&C.stopped, 1);
    wake_waiters();
    pthread_mutex_lock(&C.lock);
    for (int i = 0; i < TD_GROUPS_MAX; i++) {
        if (C.groups[i] != NULL) {
            live[n_live++] = C.groups[i];
        }
    }
    pthread_mutex_unlock(&C.lock);
    for (int i = 0; i < n_live; i++) {
        coll_group_stop_thread(live[i]);
    }
    pthread_mutex_lock(&C.lock);
    list = C.posted_head;
    C.posted_head = C.posted_tail = NULL;
    /* Groups the user still holds leave the table: a later td_init
     * numbers its groups from 1 again. */
    for (int i = 0; i < TD_GROUPS_MAX; i++) {
        if (C.groups[i] != NULL) {
            C.groups[i]->registered = 0;
            C.groups[i] = NULL;
        }
    }
    C.groups_hi = 0;
    pthread_mutex_unlock(&C.lock);
    complete_list(list, TD_ERR_CANCELED, "coll: the runtime shut down");
    pthread_mutex_lock(&C.lock);
    while (C.ux_head != NULL) {
        unexp_t *e = C.ux_head;

        C.ux_head = e->next;
        if (e->arrived) {
            ux_free(e);
        } else {
            e->orphan = 1;           /* freed if its body still lands */
            e->claim = NULL;
        }
    }
    C.ux_tail = NULL;
    C.n_ux = 0;
    C.id_max = 0;                    /* ids start again at the next init */
    pthread_mutex_unlock(&C.lock);
    coll_mbox_shutdown();            /* after the queue: M6's acks, M7 */
    td_log_debug("coll: %lu mailbox pokes sent", atomic_load(&C.pokes));
    td_log_debug("coll: %lu sends and %lu receives done on the fast path",
                 atomic_load(&C.fast[1]), atomic_load(&C.fast[0]));
    atomic_store(&C.pokes, 0);
    atomic_store(&C.fast[0], 0);
    atomic_store(&C.fast[1], 0);
    coll_groups_reset();
    coll_world_group_free();
    coll_nccl_shutdown();            /* nccl.h N2 */
    C.tp = NULL;
}

/* In the runtime's module table (runtime/modules.c), after rpc. */
const td_runtime_module_t td_coll_module = {
    .name = "coll",
    .setup = module_setup,
    .outstanding = module_outstanding,
    .peer_failed = module_peer_failed,
    .shutdown = module_shutdown,
    .arg = NULL,
};
