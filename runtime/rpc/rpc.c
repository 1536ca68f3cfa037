/* rpc.c: remote calls (todist/rpc.h) over the UCX transport.
 *
 * Pieces: the function registry (name -> FNV-1a id), the plug-ins (remote
 * references, distributed autograd: td__rpc_plug), the table of pending
 * calls (message id -> future, destination, deadline), a timer thread
 * failing calls past their deadline, the receive path, which validates
 * every message before use and hands calls to the handler pool (pool.c)
 * or runs TD_RPC_INLINE ones where they arrive, and td_rpc_drive, through
 * which a waiting thread drives the transport itself. RPC is the first
 * module of the runtime's table (runtime/modules.c).
 *
 * Invariants (comments below cite them as R1..R8):
 *  R1 One thread at a time is in the UCX worker, the progress token's
 *     holder; every receive and send-completion callback, and every inline
 *     handler, runs on it.
 *  R2 A call runs on the pool unless its function is TD_RPC_INLINE and it
 *     carries no autograd context; an inline handler never waits
 *     (td__rpc_drive_until refuses: drive.c's W1), so it cannot stall the
 *     calls behind it.
 *  R3 A pending call is removed in exactly one place (pending_take /
 *     pending_take_matching), and whoever removes it completes its future:
 *     the reply, the timer, a dead peer, a failed send or shutdown, never
 *     two of them.
 *  R4 User callbacks of futures never run on the token holder: completions
 *     from the receive path post them to the pool.
 *  R5 A pending call is in the table before its message is sent: the reply
 *     may come before the send returns.
 *  R6 Once shutdown stored RPC_STOPPED and td__rpc_drive_stop returned
 *     (drive.c's W2), no thread enters the transport through this module.
 *  R7 Messages from one thread leave in the order it posted them (a direct
 *     send drains the queue first).
 *  R8 No field of a received message is used before td__rpc_wire_parse and
 *     the body checks accepted it against the received sizes.
 *  R9 An async handler's call (td_rpc_register_async), or a plug-in's
 *     message whose handler handed back a future, is answered exactly
 *     once, by the callback of that future, on whichever thread completes
 *     it; no pool thread waits for it, and the call counts as busy
 *     (td_finalize waits) until that answer is sent.
 * R10 Between ranks of one host, a message whose bodies hold
 *     RPC_INPLACE_MIN bytes or more is offered in place (transport.c
 *     O1-O5; TODIST_RPC_CMA=0 turns it off): the receiver copies each body
 *     once, straight into the tensor rx_handler names, before rx_done; the
 *     sender's tensors are held (send_t) until the reader answered. Calls,
 *     replies, remote-reference fetches and gradient messages all take
 *     this path: they are all send_msg's.
 * R11 Messages from one rank are handed on (run inline, posted to the
 *     pool, or completing a call) in the order they arrived, which is the
 *     order they were sent (R7, one UCX endpoint): one whose bodies are
 *     still arriving by rendezvous holds back the later ones from its
 *     sender (rx_order, token holder only). Without this an 8 B call sent
 *     after a 1 MiB one ran first (198 of 200 mixed calls out of order).
 * R12 Between ranks of one host, a message whose header and bodies fit a
 *     mailbox slot (about 4 KiB) is written into the receiver's mailbox
 *     in shared memory instead of sent through UCX (transport.c X1-X6;
 *     TODIST_RPC_MBOX=0 turns it off). The transport delivers it to
 *     rx_handler like any other, in its place among the sender's
 *     messages (X3), so R7, R8 and R11 hold across both paths; timeouts
 *     and peer failure act on the pending table, whatever the path.
 * R13 A call's deadline holds whoever sees it first: the timer (every
 *     RPC_TIMER_TICK_S), or the reply itself, which fails the call with
 *     the timer's error when it arrives past the deadline (read on the
 *     coarse clock: a few ms late may pass, as the timer's tick lets
 *     them). At a load of 15-18 on 2 cores the timer thread went 0.4 s
 *     without the CPU and a 0.2 s call returned its 0.6 s handler's
 *     result (test_rpc timeout_per_call). TODIST_TEST_RPC_TIMER_S (tests
 *     only) lengthens the tick to play that starved timer.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <sys/mman.h>

#include "todist/rpc.h"
#include "todist/init.h"
#include "todist/world.h"
#include "todist/device.h"
#include "runtime/runtime.h"
#include "runtime/rpc/rpc_internal.h"
#include "runtime/rpc/rpc_wire.h"
#include "runtime/rpc/rpc_device.h"
#include "runtime/rpc/pool.h"
#include "runtime/rpc/drive.h"
#include "runtime/rpc/future.h"
#include "base/byteorder.h"
#include "base/clock.h"
#include "base/log.h"

#define RPC_TRANSPORT_ID     1      /* transport handler id of RPC */
#define RPC_FN_TABLE         256    /* registry slots (power of two) */
#define RPC_PENDING_BUCKETS  1024
#define RPC_TIMER_TICK_S     0.01
/* The timer's tick: RPC_TIMER_TICK_S, or TODIST_TEST_RPC_TIMER_S (R13). */
static double timer_tick_s = RPC_TIMER_TICK_S;
#define RPC_INPLACE_MIN      (64u * 1024u)   /* R10: bodies offered from here */

/* Error kinds in an ERROR reply (its INT item). */
enum { ERR_HANDLER = 0, ERR_NO_FUNCTION = 1, ERR_DECODE = 2 };

/* ---- registry ------------------------------------------------------------ */

typedef struct {
    char      name[TD_RPC_NAME_MAX];
    uint64_t  id;
    td_rpc_fn fn;
    void     *arg;
    unsigned  flags;     /* TD_RPC_INLINE */
    /* td_rpc_register_async: FN is then NULL and the handler's pair is
     * here (a slot is free when both are NULL). */
    td_rpc_async_fn afn;
    void     *afn_arg;
} fn_entry_t;

static fn_entry_t fns[RPC_FN_TABLE];
static size_t     n_fns;
static int        cfg_threads = 0;          /* 0: env or 4 */
static double     cfg_timeout = -1;         /* < 0: env or 60 */
static double     env_timeout = -1;         /* the env's, from td_init on */

/* The plug-ins (td__rpc_plug), and for each hook kind the one providing it,
 * resolved when a plug-in comes so the hot paths test one flag. */
#define RPC_PLUGINS_MAX 8

static td_rpc_plugin_t plugins[RPC_PLUGINS_MAX];
static size_t     n_plugins;
static td_rpc_plugin_t hooks;               /* the autograd provider */
static int        have_hooks;
static const td_rpc_plugin_t *refs;         /* the rref provider (NULL) */
static const td_rpc_plugin_t *typed[TD_RPC_MSG_TYPE_MAX + 1];

/* ---- pending calls ------------------------------------------------------- */

typedef struct pending {
    uint64_t        id;
    int             dst;
    char            name[TD_RPC_NAME_MAX];
    double          deadline;       /* 0: none */
    td_future_t    *fut;
    struct pending *next;
} pending_t;

/* A bounded copy (snprintf's formatting machinery costs more than a short
 * call's whole encoding). */
static void
copy_name(char *dst, size_t len, const char *src)
{
    size_t n = strnlen(src, len - 1);

    memcpy(dst, src, n);
    dst[n] = '\0';
}

struct rx;
static void run_inline(struct rx *r, const char *name);

/* ---- state --------------------------------------------------------------- */

enum { RPC_OFF = 0, RPC_RUNNING = 1, RPC_STOPPED = 2 };

static struct {
    atomic_int        state;
    td_transport_t   *tp;
    int               rank;
    int               world_size;
    char              worker_name[TD_WORKER_NAME_MAX];
    atomic_uint_fast64_t next_id;
    pthread_mutex_t   plock;                   /* pending table */
    pending_t        *buckets[RPC_PENDING_BUCKETS];
    size_t            n_pending;               /* under plock; also read
                                                * without it (atomic) */
    atomic_long       busy;                    /* jobs + sends in flight */
    pthread_t         timer;
    int               timer_started;
    pthread_mutex_t   tlock;
    pthread_cond_t    tcond;
    int               timer_stop;
} rpc = {
    .plock = PTHREAD_MUTEX_INITIALIZER,
    .tlock = PTHREAD_MUTEX_INITIALIZER,
    .tcond = PTHREAD_COND_INITIALIZER,
};

static double rpc_spin_us = -1;    /* env TODIST_RPC_SPIN_US */

static const char *
worker_name(int rank, char *buf, size_t len)
{
    if (td_worker_name(rank, rpc.world_size, buf, len) != TD_OK) {
        snprintf(buf, len, "worker%d", rank);
    }
    return buf;
}

void
td__rpc_format_remote_error(char *buf, size_t len, int rank, const char *msg)
{
    char name[TD_WORKER_NAME_MAX];

    snprintf(buf, len, "Error on rank %d (%s): %s", rank,
             worker_name(rank, name, sizeof(name)), msg);
}

/* ---- registry ------------------------------------------------------------ */

static fn_entry_t *
fn_find(uint64_t id)
{
    for (size_t i = id & (RPC_FN_TABLE - 1), k = 0; k < RPC_FN_TABLE;
         i = (i + 1) & (RPC_FN_TABLE - 1), k++) {
        if (fns[i].fn == NULL && fns[i].afn == NULL) {
            return NULL;
        }
        if (fns[i].id == id) {
            return &fns[i];
        }
    }
    return NULL;
}

/* What an outgoing message is, for TODIST_FAULT's rules (transport.h):
 * reads only the fixed part of our wire header (type, function id). */
static td_transport_kind_t
classify(void *arg, uint16_t id, const void *header, size_t len)
{
    const uint8_t *h = header;
    td_transport_kind_t k = { "other", NULL };

    if (len < TD_RPC_WIRE_HDR_SIZE || h[0] != TD_RPC_WIRE_MAGIC) {
        return k;
    }
    switch (h[2]) {
    case TD_RPC_MSG_CALL:
    case TD_RPC_MSG_REMOTE:
    case TD_RPC_MSG_RREF_CALL: {
        fn_entry_t *e = fn_find(td_get_le64(h + 24));   /* function id */
        k.kind = "call";
        k.name = e != NULL ? e->name : NULL;
        break;
    }
    case TD_RPC_MSG_REPLY:
    case TD_RPC_MSG_ERROR:
        k.kind = "reply";
        break;
    default:
        k.kind = "rref";
        break;
    }
    return k;
}

td_status_t
td_rpc_register(const char *name, td_rpc_fn fn, void *arg)
{
    return td_rpc_register_flags(name, fn, arg, 0);
}

static td_status_t reg(const char *name, td_rpc_fn fn, void *arg,
                       unsigned flags, td_rpc_async_fn afn, void *afn_arg);

td_status_t
td_rpc_register_flags(const char *name, td_rpc_fn fn, void *arg,
                      unsigned flags)
{
    return reg(name, fn, arg, flags, NULL, NULL);
}

td_status_t
td_rpc_register_async(const char *name, td_rpc_async_fn fn, void *arg)
{
    if (fn == NULL) {
        return td_error(TD_ERR_INVALID, "rpc: register_async '%s': function "
                        "is NULL", name != NULL ? name : "(null)");
    }
    return reg(name, NULL, NULL, 0, fn, arg);
}

static td_status_t
reg(const char *name, td_rpc_fn fn, void *arg, unsigned flags,
    td_rpc_async_fn afn, void *afn_arg)
{
    size_t len;
    uint64_t id;

    if ((flags & ~(unsigned)TD_RPC_INLINE) != 0) {
        return td_error(TD_ERR_INVALID, "rpc: register '%s': unknown flags "
                        "0x%x", name != NULL ? name : "(null)",
                        flags & ~(unsigned)TD_RPC_INLINE);
    }
    if (name == NULL || (fn == NULL && afn == NULL)) {
        return td_error(TD_ERR_INVALID, "rpc: register: %s is NULL",
                        name == NULL ? "name" : "function");
    }
    len = strlen(name);
    if (len == 0 || len >= TD_RPC_NAME_MAX) {
        return td_error(TD_ERR_INVALID, "rpc: function name '%.40s' has %zu "
                        "bytes, allowed 1..%d", name, len,
                        TD_RPC_NAME_MAX - 1);
    }
    if (atomic_load(&rpc.state) == RPC_RUNNING) {
        return td_error(TD_ERR_STATE, "rpc: function '%s' registered after "
                        "td_init: register on every worker before td_init",
                        name);
    }
    id = td__rpc_wire_fn_id(name);
    fn_entry_t *e = fn_find(id);
    if (e != NULL) {
        if (strcmp(e->name, name) != 0) {
            return td_error(TD_ERR_EXISTS, "rpc: function names '%s' and "
                            "'%s' hash alike; rename one", e->name, name);
        }
        return td_error(TD_ERR_EXISTS, "rpc: function '%s' is already "
                        "registered", name);
    }
    if (n_fns >= RPC_FN_TABLE / 2) {
        return td_error(TD_ERR_RANGE, "rpc: more than %d functions",
                        RPC_FN_TABLE / 2);
    }
    for (size_t i = id & (RPC_FN_TABLE - 1);;
         i = (i + 1) & (RPC_FN_TABLE - 1)) {
        if (fns[i].fn == NULL && fns[i].afn == NULL) {
            memcpy(fns[i].name, name, len + 1);
            fns[i].id = id;
            fns[i].fn = fn;
            fns[i].arg = arg;
            fns[i].flags = flags;
            fns[i].afn = afn;
            fns[i].afn_arg = afn_arg;
            break;
        }
    }
    n_fns++;
    return TD_OK;
}

td_status_t
td_rpc_set_threads(int n)
{
    if (n < 1 || n > TD_RPC_POOL_MAX) {
        return td_error(TD_ERR_RANGE, "rpc: %d handler threads, allowed "
                        "1..%d", n, TD_RPC_POOL_MAX);
    }
    cfg_threads = n;
    return TD_OK;
}

td_status_t
td_rpc_set_default_timeout(double seconds)
{
    if (!(seconds >= 0)) {
        return td_error(TD_ERR_RANGE, "rpc: default timeout %g s is "
                        "negative", seconds);
    }
    cfg_timeout = seconds;
    return TD_OK;
}

/* TODIST_RPC_TIMEOUT, or 60 s when unset or not a number >= 0. */
static double
env_timeout_read(void)
{
    const char *s = getenv("TODIST_RPC_TIMEOUT");

    if (s != NULL && *s != '\0') {
        char *end;
        double v = strtod(s, &end);

        if (*end == '\0' && v >= 0) {
            return v;
        }
    }
    return 60.0;
}

double
td_rpc_default_timeout(void)
{
    if (cfg_timeout >= 0) {
        return cfg_timeout;
    }
    if (env_timeout >= 0) {
        return env_timeout;         /* read once at td_init: not per call */
    }
    return env_timeout_read();
}

#define RPC_PLUG_TYPES (((1u << (TD_RPC_MSG_TYPE_MAX + 1)) - 1) & \
                        ~((1u << TD_RPC_MSG_REMOTE) - 1))

static int
has_autograd(const td_rpc_plugin_t *p)
{
    return p->current_context != NULL || p->set_context != NULL ||
           p->on_send != NULL || p->on_recv != NULL;
}

/* What the plug-in P offers that Q offers too (NULL: nothing). */
static const char *
plugin_clash(const td_rpc_plugin_t *p, const td_rpc_plugin_t *q)
{
    if ((p->types & q->types) != 0) {
        return "message types";
    }
    if (p->rref_out != NULL && q->rref_out != NULL) {
        return "remote references";
    }
    if (has_autograd(p) && has_autograd(q)) {
        return "autograd hooks";
    }
    return NULL;
}

static void
plugins_resolve(void)
{
    memset(&hooks, 0, sizeof(hooks));
    have_hooks = 0;
    refs = NULL;
    memset(typed, 0, sizeof(typed));
    for (size_t i = 0; i < n_plugins; i++) {
        const td_rpc_plugin_t *p = &plugins[i];

        if (has_autograd(p)) {
            hooks = *p;
            have_hooks = 1;
        }
        if (p->rref_out != NULL) {
            refs = p;
            td__rpc_list_set_ref_ops(p->rref_retain, p->rref_release);
        }
        for (int t = TD_RPC_MSG_REMOTE; t <= TD_RPC_MSG_TYPE_MAX; t++) {
            if (p->types & (1u << t)) {
                typed[t] = p;
            }
        }
    }
}

td_status_t
td__rpc_plug(const td_rpc_plugin_t *p)
{
    size_t slot = n_plugins;

    if (p == NULL || p->name == NULL) {
        return td_error(TD_ERR_INVALID, "rpc: a plug-in needs a name");
    }
    if (atomic_load(&rpc.state) == RPC_RUNNING) {
        return td_error(TD_ERR_STATE, "rpc: plug-in '%s' after td_init",
                        p->name);
    }
    if ((p->types & ~RPC_PLUG_TYPES) != 0 ||
        (p->types != 0 && p->handle == NULL)) {
        return td_error(TD_ERR_INVALID, "rpc: plug-in '%s': message types "
                        "0x%x need a handler and must lie in %d..%d",
                        p->name, p->types, TD_RPC_MSG_REMOTE,
                        TD_RPC_MSG_TYPE_MAX);
    }
    if ((p->rref_out != NULL || p->rref_in != NULL ||
         p->rref_retain != NULL || p->rref_release != NULL) &&
        (p->rref_out == NULL || p->rref_in == NULL ||
         p->rref_retain == NULL || p->rref_release == NULL)) {
        return td_error(TD_ERR_INVALID, "rpc: plug-in '%s' has some of the "
                        "four remote reference hooks, not all", p->name);
    }
    if (has_autograd(p) &&
        (p->current_context == NULL || p->set_context == NULL ||
         p->on_send == NULL || p->on_recv == NULL)) {
        return td_error(TD_ERR_INVALID, "rpc: plug-in '%s' has some of the "
                        "four autograd hooks, not all", p->name);
    }
    for (size_t i = 0; i < n_plugins; i++) {
        const char *what;

        if (strcmp(plugins[i].name, p->name) == 0) {
            slot = i;                       /* the same name replaces */
        } else if ((what = plugin_clash(p, &plugins[i])) != NULL) {
            return td_error(TD_ERR_EXISTS, "rpc: plug-in '%s' provides %s, "
                            "which plug-in '%s' provides already", p->name,
                            what, plugins[i].name);
        }
    }
    if (slot == RPC_PLUGINS_MAX) {
        return td_error(TD_ERR_RANGE, "rpc: more than %d plug-ins "
                        "(plugging '%s')", RPC_PLUGINS_MAX, p->name);
    }
    plugins[slot] = *p;
    if (slot == n_plugins) {
        n_plugins++;
    }
    plugins_resolve();
    return TD_OK;
}

/* Whether a message of TYPE expects a reply. */
static int
msg_wants_reply(int type)
{
    const td_rpc_plugin_t *p;

    if (type < TD_RPC_MSG_REMOTE || type > TD_RPC_MSG_TYPE_MAX) {
        return type == TD_RPC_MSG_CALL;
    }
    p = typed[type];
    return p == NULL || p->wants_reply == NULL ||
           p->wants_reply(p->arg, type);
}

/* The world size, also before td_init (from the environment). */
static int
world_size_now(void)
{
    td_world_t env;

    if (atomic_load(&rpc.state) == RPC_RUNNING) {
        return rpc.world_size;      /* set up: td_init's world */
    }
    return td_world_from_env(&env) == TD_OK ? env.world_size : 1;
}

td_status_t
td_rpc_worker_rank(const char *name, int *rank_p)
{
    int size = world_size_now();

    for (int r = 0; name != NULL && r < size; r++) {
        char buf[TD_WORKER_NAME_MAX];

        if (td_worker_name(r, size, buf, sizeof(buf)) == TD_OK &&
            strcmp(buf, name) == 0) {
            *rank_p = r;
            return TD_OK;
        }
    }
    return td_error(TD_ERR_NOT_FOUND, "rpc: no worker named '%s' among %d",
                    name != NULL ? name : "(null)", size);
}

td_status_t
td_rpc_worker_name(int rank, char *buf, size_t len)
{
    int size = world_size_now();

    if (rank < 0 || rank >= size) {
        return td_error(TD_ERR_RANGE, "rpc: rank %d is not below the world "
                        "size %d", rank, size);
    }
    return td_worker_name(rank, size, buf, len);
}

/* ---- pending table ------------------------------------------------------- */

static void *slot_get(void *_Atomic *slot, size_t size);
static void  slot_put(void *_Atomic *slot, void *p);
static void  slot_clear(void *_Atomic *slot);
static void *_Atomic pending_slot;     /* a pending_t, one-slot cache */

static void
pending_insert(pending_t *pc)
{
    pthread_mutex_lock(&rpc.plock);
    pending_t **b = &rpc.buckets[pc->id % RPC_PENDING_BUCKETS];
    pc->next = *b;
    *b = pc;
    __atomic_fetch_add(&rpc.n_pending, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&rpc.plock);
}

/* Remove and return the call with ID (NULL when gone: completed, timed out
 * or failed already). */
static pending_t *
pending_take(uint64_t id)
{
    pending_t *pc;

    pthread_mutex_lock(&rpc.plock);
    for (pending_t **pp = &rpc.buckets[id % RPC_PENDING_BUCKETS];
         (pc = *pp) != NULL; pp = &pc->next) {
        if (pc->id == id) {
            *pp = pc->next;
            __atomic_fetch_sub(&rpc.n_pending, 1, __ATOMIC_RELAXED);
            break;
        }
    }
    pthread_mutex_unlock(&rpc.plock);
    return pc;
}

/* Take every call matching (DST or any when < 0; deadline passed when
 * NOW > 0) into a list. */
static pending_t *
pending_take_matching(int dst, double now)
{
    pending_t *out = NULL;

    pthread_mutex_lock(&rpc.plock);
    for (size_t b = 0; b < RPC_PENDING_BUCKETS; b++) {
        pending_t **pp = &rpc.buckets[b], *pc;

        while ((pc = *pp) != NULL) {
            int match = (dst < 0 || pc->dst == dst) &&
                        (now <= 0 || (pc->deadline > 0 && pc->deadline < now));
            if (match) {
                *pp = pc->next;
                __atomic_fetch_sub(&rpc.n_pending, 1, __ATOMIC_RELAXED);
                pc->next = out;
                out = pc;
            } else {
                pp = &pc->next;
            }
        }
    }
    pthread_mutex_unlock(&rpc.plock);
    return out;
}

static void
pending_fail(pending_t *pc, td_status_t status, const char *msg,
             int from_progress)
{
    if (from_progress) {
        td__future_fail_async(pc->fut, status, msg);
    } else {
        td_future_fail(pc->fut, status, "%s", msg);
    }
    td_future_release(pc->fut);
    slot_put(&pending_slot, pc);
}

/* ---- timer --------------------------------------------------------------- */

/* The error of a call PC past its deadline (R13), into MSG. */
static void
timeout_text(const pending_t *pc, char *msg, size_t len)
{
    char name[TD_WORKER_NAME_MAX];

    snprintf(msg, len, "rpc: call '%s' to rank %d (%s) timed out", pc->name,
             pc->dst, worker_name(pc->dst, name, sizeof(name)));
}

/* Seconds on the coarse monotonic clock: a few ns to read, up to a tick
 * (a few ms) behind td_now_s (R13 reads it on every reply). */
static double
now_coarse_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *
timer_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "td-rpc-timer");
    pthread_mutex_lock(&rpc.tlock);
    while (!rpc.timer_stop) {
        struct timespec ts;

        td_deadline_after(timer_tick_s, &ts);
        pthread_cond_timedwait(&rpc.tcond, &rpc.tlock, &ts);
        if (rpc.timer_stop) {
            break;
        }
        pthread_mutex_unlock(&rpc.tlock);
        /* a hint read without plock (a call missed now is seen at the
         * next tick): atomic, as its updates under plock are */
        if (__atomic_load_n(&rpc.n_pending, __ATOMIC_RELAXED) > 0) {
            pending_t *pc = pending_take_matching(-1, td_now_s());

            while (pc != NULL) {
                pending_t *next = pc->next;
                char msg[512];

                timeout_text(pc, msg, sizeof(msg));
                pending_fail(pc, TD_ERR_TIMEOUT, msg, 1);
                pc = next;
            }
        }
        for (size_t i = 0; i < n_plugins; i++) {
            if (plugins[i].tick != NULL) {
                plugins[i].tick(plugins[i].arg, td_now_s());
            }
        }
        pthread_mutex_lock(&rpc.tlock);
    }
    pthread_mutex_unlock(&rpc.tlock);
    return NULL;
}

/* ---- one-slot caches ------------------------------------------------------ *
 * A send's state (2 KB) and a received message's (6 KB) are "large" to
 * malloc, which then consolidates its fast bins on every call, and a
 * pending call's (pending_slot) is a malloc and a free on every call's
 * path: a single atomic slot per kind gives the last freed block to the
 * next message
 * (exchange to take it, compare-and-swap to put it back: no ABA, the
 * taker owns what it took). */

static void *_Atomic send_slot;
static void *_Atomic rx_slot;

static void *
slot_get(void *_Atomic *slot, size_t size)
{
    void *p = atomic_exchange_explicit(slot, NULL, memory_order_acquire);

    return p != NULL ? p : malloc(size);
}

static void
slot_put(void *_Atomic *slot, void *p)
{
    void *expected = NULL;

    if (!atomic_compare_exchange_strong_explicit(slot, &expected, p,
                                                 memory_order_release,
                                                 memory_order_relaxed)) {
        free(p);
    }
}

static void
slot_clear(void *_Atomic *slot)
{
    free(atomic_exchange(slot, NULL));
}

/* ---- sending ------------------------------------------------------------- */

typedef struct {
    td_rpc_wire_out_t out;
    uint64_t          id;        /* pending call, 0 for replies */
    int               dst;
} send_t;

static void
send_done(void *arg, td_status_t status)
{
    send_t *s = arg;

    if (status != TD_OK && s->id != 0) {
        pending_t *pc = pending_take(s->id);

        if (pc != NULL) {
            char msg[512], name[TD_WORKER_NAME_MAX];

            snprintf(msg, sizeof(msg), "rpc: call '%s' to rank %d (%s) "
                     "failed: %s", pc->name, pc->dst,
                     worker_name(pc->dst, name, sizeof(name)),
                     status == TD_ERR_PEER ? "the peer died or is "
                     "unreachable" : td_strerror(status));
            pending_fail(pc, status, msg, 1);
        }
    }
    td__rpc_wire_out_free(&s->out);
    slot_put(&send_slot, s);
    atomic_fetch_sub(&rpc.busy, 1);
}

/* The staged bodies of S are in the receiver's device memory (or
 * failed): now the message itself (rpc_device.h DV3). Engine thread. */
static void
staged_done(void *arg, td_status_t status)
{
    send_t *s = arg;

    if (status == TD_OK) {
        status = td__transport_send(rpc.tp, s->dst, RPC_TRANSPORT_ID,
                                   s->out.header, s->out.header_len,
                                   s->out.bodies, (size_t)s->out.n_bodies,
                                   send_done, s);
        if (status == TD_OK) {
            return;
        }
    }
    send_done(s, status);
}

/* Encode and send; on TD_OK the message is on its way. */
static td_status_t
send_msg(int dst, const td_rpc_wire_meta_t *meta, const td_rpc_list_t *args,
         uint64_t pending_id)
{
    send_t *s;
    td_rpc_device_route_t route;
    td_status_t status;

    s = slot_get(&send_slot, sizeof(*s));   /* encode sets what it uses */
    if (s == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory for a send");
    }
    /* the tensors prepared (host copies made), then the codec describes
     * them (rpc_device.h) */
    status = td__rpc_device_encode(meta, args, dst, TD_TRANSPORT_HEADER_MAX,
                                  refs != NULL ? refs->rref_out : NULL,
                                  refs != NULL ? refs->arg : NULL,
                                  td__rpc_device_route(dst, meta->type,
                                                      &route),
                                  &s->out);
    if (status == TD_OK) {
        status = td__rpc_device_sync_out(&s->out);
        if (status != TD_OK) {
            td__rpc_wire_out_free(&s->out);
        }
    }
    if (status != TD_OK) {
        slot_put(&send_slot, s);
        return status;
    }
    s->id = pending_id;
    s->dst = dst;
    atomic_fetch_add(&rpc.busy, 1);
    if (s->out.n_staged > 0) {
        /* device bodies go ahead through the staging engine */
        status = td__rpc_device_send_staged(dst, &s->out, staged_done, s);
    } else {
        status = td__transport_send(rpc.tp, dst, RPC_TRANSPORT_ID,
                                   s->out.header, s->out.header_len,
                                   s->out.bodies, (size_t)s->out.n_bodies,
                                   send_done, s);
    }
    if (status != TD_OK) {
        atomic_fetch_sub(&rpc.busy, 1);
        td__rpc_wire_out_free(&s->out);
        slot_put(&send_slot, s);
    }
    return status;
}

static td_status_t
check_dst(int dst)
{
    if (atomic_load(&rpc.state) != RPC_RUNNING) {
        return td_error(TD_ERR_STATE, "rpc: not running (call td_init "
                        "first; calls after td_finalize fail)");
    }
    if (dst < 0 || dst >= rpc.world_size) {
        return td_error(TD_ERR_RANGE, "rpc: destination rank %d is not "
                        "below the world size %d", dst, rpc.world_size);
    }
    return TD_OK;
}

/* Autograd ids for a message to DST carrying LIST inside CTX. */
static td_status_t
autograd_send(uint64_t ctx, int dst, const td_rpc_list_t *list,
              td_rpc_wire_meta_t *meta)
{
    if (!have_hooks || ctx == 0 || !td__rpc_list_requires_grad(list)) {
        return TD_OK;
    }
    meta->autograd_context_id = ctx;
    return hooks.on_send(hooks.arg, ctx, dst, list,
                         &meta->autograd_message_id);
}

td_status_t
td__rpc_send_typed(int dst, int type, uint64_t function_id, const char *name,
                  const td_rpc_list_t *args, double timeout,
                  td_future_t **fut_p)
{
    td_rpc_wire_meta_t meta;
    pending_t *pc = NULL;
    td_future_t *fut = NULL;
    td_status_t status;

    status = check_dst(dst);
    if (status != TD_OK) {
        return status;
    }
    if (timeout < 0) {
        timeout = td_rpc_default_timeout();
    }
    memset(&meta, 0, sizeof(meta));
    meta.type = (uint8_t)type;
    meta.sender = rpc.rank;
    meta.message_id = atomic_fetch_add(&rpc.next_id, 1);
    meta.function_id = function_id;
    status = autograd_send(have_hooks ? hooks.current_context(hooks.arg) : 0,
                           dst, args, &meta);
    if (status != TD_OK) {
        return status;
    }
    if (type == TD_RPC_MSG_RREF_FETCH && have_hooks) {
        /* to_here carries the caller's context (no tensors of its own), so
         * the owner's reply, the value, is recorded like a call's result
         * (distributed autograd) */
        meta.autograd_context_id = hooks.current_context(hooks.arg);
    }

    if (fut_p != NULL) {
        status = td_future_create(&fut);
        if (status != TD_OK) {
            return status;
        }
        pc = slot_get(&pending_slot, sizeof(*pc));   /* all set below */
        if (pc == NULL) {
            td_future_release(fut);
            return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory");
        }
        pc->id = meta.message_id;
        pc->dst = dst;
        copy_name(pc->name, sizeof(pc->name), name != NULL ? name : "?");
        pc->deadline = timeout > 0 ? td_now_s() + timeout : 0;
        pc->fut = td_future_retain(fut);
        pending_insert(pc);       /* R5: before sending */
    }
    status = send_msg(dst, &meta, args, fut_p != NULL ? meta.message_id : 0);
    if (status != TD_OK) {
        if (pc != NULL && (pc = pending_take(meta.message_id)) != NULL) {
            td_future_release(pc->fut);
            slot_put(&pending_slot, pc);
        }
        td_future_release(fut);
        return status;
    }
    if (fut_p != NULL) {
        *fut_p = fut;
    }
    return TD_OK;
}

td_status_t
td_rpc_async(int dst, const char *name, const td_rpc_list_t *args,
             double timeout, td_future_t **fut_p)
{
    size_t len;

    if (name == NULL || fut_p == NULL) {
        return td_error(TD_ERR_INVALID, "rpc: async: %s is NULL",
                        name == NULL ? "function name" : "future pointer");
    }
    /* The same bound as registration: a name no worker can have is an
     * error here, not a call that fails remotely. */
    len = strlen(name);
    if (len == 0 || len >= TD_RPC_NAME_MAX) {
        return td_error(TD_ERR_INVALID, "rpc: call to rank %d: function name "
                        "'%.40s' has %zu bytes, allowed 1..%d", dst, name,
                        len, TD_RPC_NAME_MAX - 1);
    }
    return td__rpc_send_typed(dst, TD_RPC_MSG_CALL, td__rpc_wire_fn_id(name),
                             name, args, timeout, fut_p);
}

td_status_t
td_rpc_sync(int dst, const char *name, const td_rpc_list_t *args,
            double timeout, td_rpc_list_t **result_p)
{
    td_future_t *fut;
    td_status_t status;

    td__transport_will_drive(1);     /* the wait below drives at once */
    status = td_rpc_async(dst, name, args, timeout, &fut);
    td__transport_will_drive(0);
    if (status != TD_OK) {
        return status;
    }
    /* The call's own deadline ends the wait (the timer fails it). */
    status = td_future_wait(fut, -1);
    if (status == TD_OK && result_p != NULL) {
        status = td__future_take_last(fut, result_p);   /* no empty list */
    }
    td_future_release(fut);   /* RESULT_P NULL: the result is dropped */
    return status;
}

/* ---- running calls ------------------------------------------------------- */

uint64_t
td__rpc_context_current(void)
{
    return have_hooks ? hooks.current_context(hooks.arg) : 0;
}

uint64_t
td__rpc_context_swap(uint64_t ctx)
{
    return have_hooks ? hooks.set_context(hooks.arg, ctx) : 0;
}

td_status_t
td__rpc_run_local(uint64_t function_id, int caller, const td_rpc_list_t *args,
                 td_rpc_list_t *result, td_future_t **fut_p)
{
    fn_entry_t *e = fn_find(function_id);
    td_rpc_call_info_t info;
    td_status_t status;

    *fut_p = NULL;
    if (e == NULL) {
        return td_error(TD_ERR_NOT_FOUND, "rpc: rank %d has no function "
                        "with id %016llx", rpc.rank,
                        (unsigned long long)function_id);
    }
    info.caller = caller;
    info.name = e->name;
    if (e->afn == NULL) {
        return e->fn(e->arg, &info, args, result);
    }
    status = e->afn(e->afn_arg, &info, args, fut_p);
    if (status == TD_OK && *fut_p == NULL) {
        status = td_error(TD_ERR_INVALID, "rpc: async handler '%s' returned "
                          "TD_OK without a future", e->name);
    }
    if (status != TD_OK) {
        td_future_release(*fut_p);
        *fut_p = NULL;
    }
    return status;
}

/* ---- receive buffers ------------------------------------------------------ *
 * Large tensor bodies land in buffers from a small cache instead of fresh
 * allocations: a fresh 64 MiB buffer is a new mmap each time, so UCX
 * registers (and on munmap deregisters) it for every message, and every
 * page faults on first touch. Reused buffers keep UCX's registration cache
 * warm. Power-of-two classes from 64 KiB; at most BUF_KEEP per class. */

#define BUF_MIN_SHIFT 16
#define BUF_CLASSES   20           /* 64 KiB .. 32 GiB */
#define BUF_KEEP      4
#define BUF_HUGE      ((size_t)2 << 20)   /* a huge page */

static pthread_mutex_t buf_lock = PTHREAD_MUTEX_INITIALIZER;
static void *buf_free[BUF_CLASSES][BUF_KEEP];
static int   buf_n[BUF_CLASSES];

static int
buf_class(size_t n)
{
    int c = 0;

    while (c < BUF_CLASSES && ((size_t)1 << (BUF_MIN_SHIFT + c)) < n) {
        c++;
    }
    return c;
}

static void
buf_release(void *data, void *arg)
{
    int c = (int)(intptr_t)arg;

    pthread_mutex_lock(&buf_lock);
    if (buf_n[c] < BUF_KEEP) {
        buf_free[c][buf_n[c]++] = data;
        data = NULL;
    }
    pthread_mutex_unlock(&buf_lock);
    free(data);
}

/* A tensor for a received body of NBYTES (cached buffer when large). */
static td_status_t
rx_tensor(const td_rpc_wire_tensor_t *t, td_tensor_t **out)
{
    int c;
    void *data = NULL;
    td_status_t status;

    if (t->nbytes < ((size_t)1 << BUF_MIN_SHIFT) ||
        (c = buf_class(t->nbytes)) >= BUF_CLASSES) {
        return td_tensor_empty(t->shape, t->ndim, t->dtype, TD_CPU, out);
    }
    pthread_mutex_lock(&buf_lock);
    if (buf_n[c] > 0) {
        data = buf_free[c][--buf_n[c]];
    }
    pthread_mutex_unlock(&buf_lock);
    if (data == NULL) {
        size_t n = (size_t)1 << (BUF_MIN_SHIFT + c);

        /* Large ones on transparent huge pages, as large tensors are
         * (runtime/tensor/tensor.c): a body read in place (R10) lands
         * at memcpy speed there, at half of it on 4 KiB pages. */
        data = aligned_alloc(n >= BUF_HUGE ? BUF_HUGE : 64, n);
#ifdef MADV_HUGEPAGE
        if (data != NULL && n >= BUF_HUGE) {
            (void)madvise(data, n, MADV_HUGEPAGE);
        }
#endif
        if (data == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "rpc: cannot allocate %zu "
                            "bytes for a received tensor", t->nbytes);
        }
    }
    status = td_tensor_from_blob(data, t->shape, t->ndim, t->dtype, TD_CPU,
                                 buf_release, (void *)(intptr_t)c, out);
    if (status != TD_OK) {
        buf_release(data, (void *)(intptr_t)c);
    }
    return status;
}

static void
buf_cache_clear(void)
{
    pthread_mutex_lock(&buf_lock);
    for (int c = 0; c < BUF_CLASSES; c++) {
        while (buf_n[c] > 0) {
            free(buf_free[c][--buf_n[c]]);
        }
    }
    pthread_mutex_unlock(&buf_lock);
}

/* A received message, from the transport's receive handler to the pool. */
#define RX_HDR_SMALL 256

typedef struct rx {
    td_rpc_wire_msg_t msg;
    uint8_t          *hdr_copy;      /* inline args point in here */
    uint8_t           hdr_small[RX_HDR_SMALL];  /* hdr_copy of small ones */
    uint8_t          *args_buf;      /* args body */
    td_tensor_t      *tensors[TD_RPC_MAX_TENSORS];
    uint64_t          eager;         /* tensors still to move to a device */
    int               src;
    struct rx        *onext;         /* R11: the next from src */
    int               landed;        /* R11: its bodies are in (lstatus) */
    td_status_t       lstatus;
} rx_t;

/* R11: per source rank, the messages whose bodies are still arriving, in
 * arrival order (token holder only), one per rank. */
typedef struct {
    rx_t *head, *tail;
} rx_fifo_t;

static rx_fifo_t *rx_order;

static void
rx_free(rx_t *r)
{
    for (int k = 0; k < r->msg.n_tensors; k++) {
        td_tensor_release(r->tensors[k]);
    }
    if (r->hdr_copy != r->hdr_small) {
        free(r->hdr_copy);
    }
    free(r->args_buf);
    slot_put(&rx_slot, r);
}

static void
log_drop(int src, const char *why)
{
    td_log_warn("rpc: dropped a message from rank %d: %s",
            src, why);
}

static td_status_t
rx_decode(rx_t *r, td_rpc_list_t **list_p)
{
    const uint8_t *args = r->msg.args_body >= 0 ? r->args_buf : r->msg.args;
    td_status_t status;

    if (r->msg.args_body >= 0) {
        status = td__rpc_wire_check_args(args, r->msg.args_len,
                                        r->msg.n_tensors, r->src);
        if (status != TD_OK) {
            return status;
        }
    }
    for (int k = 0; r->eager != 0 && k < r->msg.n_tensors; k++) {
        td_tensor_t *d = NULL;

        if (r->eager & (1ull << k)) {   /* rpc_wire.h V5 */
            status = td__rpc_device_land_eager(r->tensors[k],
                                              r->msg.tensors[k].device, &d);
            if (status != TD_OK) {
                return status;
            }
            td_tensor_release(r->tensors[k]);
            r->tensors[k] = d;
        }
    }
    r->eager = 0;
    for (int k = 0; k < r->msg.n_tensors; k++) {
        if (r->msg.tensors[k].requires_grad) {
            td_tensor_set_requires_grad(r->tensors[k], 1);
        }
    }
    return td__rpc_wire_decode_args(args, r->msg.args_len, r->tensors,
                                   r->msg.n_tensors, r->src,
                                   refs != NULL ? refs->rref_in : NULL,
                                   refs != NULL ? refs->arg : NULL, list_p);
}

/* The reply (RESULT) or, STATUS != TD_OK, the error (ERRMSG, KIND) to
 * message MSG_ID from DST. */
static void
send_reply_to(int dst, uint64_t msg_id, td_status_t status,
              const char *errmsg, int kind, td_rpc_list_t *result,
              uint64_t ctx)
{
    td_rpc_wire_meta_t meta;
    td_rpc_list_t *err = NULL;
    td_status_t st;

    memset(&meta, 0, sizeof(meta));
    meta.sender = rpc.rank;
    meta.message_id = msg_id;
    if (status == TD_OK) {
        meta.type = TD_RPC_MSG_REPLY;
        st = autograd_send(ctx, dst, result, &meta);
        if (st != TD_OK) {
            status = st;
            errmsg = td_last_error();
        }
    }
    if (status != TD_OK) {
        char text[1024];

        td__rpc_format_remote_error(text, sizeof(text), rpc.rank, errmsg);
        meta.type = TD_RPC_MSG_ERROR;
        meta.autograd_context_id = meta.autograd_message_id = 0;
        meta.function_id = (uint64_t)(int64_t)status;
        if (td_rpc_list_create(&err) != TD_OK ||
            td_rpc_list_add_string(err, text) != TD_OK ||
            td_rpc_list_add_int(err, kind) != TD_OK) {
            td_rpc_list_free(err);
            return;
        }
        result = err;
    }
    st = send_msg(dst, &meta, result, 0);
    if (st != TD_OK && status == TD_OK) {
        /* E.g. a result the wire cannot carry: tell the caller. */
        char msg[1024];

        snprintf(msg, sizeof(msg), "%s", td_last_error());
        td_rpc_list_free(err);
        send_reply_to(dst, msg_id, st, msg, ERR_HANDLER, NULL, 0);
        return;
    }
    if (st != TD_OK) {
        log_drop(dst, td_last_error());
    }
    td_rpc_list_free(err);
}

static void
send_reply(const rx_t *r, td_status_t status, const char *errmsg, int kind,
           td_rpc_list_t *result, uint64_t ctx)
{
    send_reply_to(r->src, r->msg.meta.message_id, status, errmsg, kind,
                  result, ctx);
}

/* A message the decoder rejected (R8): log it, and when it still names a
 * call expecting a reply, send the error back so the caller fails now
 * rather than at its timeout (a peer built from another version, say). */
static void
reject(const td_transport_rx_t *rx, const char *why)
{
    uint8_t type;
    uint64_t id;

    log_drop(rx->src, why);
    if (td__rpc_wire_peek(rx->header, rx->header_len, rx->src, &type,
                         &id) == TD_OK &&
        msg_wants_reply(type)) {
        send_reply_to(rx->src, id, TD_ERR_PROTOCOL, why, ERR_DECODE, NULL,
                      0);
    }
}

/* The answer an async handler owes (R9): where it goes, and the context
 * its reply's tensors belong to. */
typedef struct {
    int      src;
    uint64_t msg_id;
    uint64_t ctx;
} owed_t;

/* The future an async handler handed back is done: answer the call. */
static void
answer_owed(void *arg, td_future_t *fut)
{
    owed_t *o = arg;
    td_status_t status = td_future_status(fut);

    if (atomic_load(&rpc.state) != RPC_RUNNING) {
        /* td_finalize's join waits for owed answers (they count as busy);
         * one completed after shutdown anyway has nobody to send it (R6) */
        td_log_warn("rpc: answer to rank %d completed after shutdown; "
                    "dropped", o->src);
    } else if (status == TD_OK) {
        /* the value is only read (encoded, send node recorded) */
        send_reply_to(o->src, o->msg_id, TD_OK, "", ERR_HANDLER,
                      (td_rpc_list_t *)td_future_value(fut), o->ctx);
    } else {
        send_reply_to(o->src, o->msg_id, status, td_future_error(fut),
                      ERR_HANDLER, NULL, 0);
    }
    free(o);
    atomic_fetch_sub(&rpc.busy, 1);
}

/* Answer R's call when FUT completes (R9; FUT's reference is taken).
 * TD_OK: the answer is owed and the call stays busy; otherwise the caller
 * answers with the error. */
static td_status_t
owe_answer(const rx_t *r, td_future_t *fut, uint64_t ctx)
{
    td_status_t status;
    owed_t *o;

    o = malloc(sizeof(*o));
    if (o == NULL) {
        td_future_release(fut);
        return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory");
    }
    o->src = r->src;
    o->msg_id = r->msg.meta.message_id;
    o->ctx = ctx;
    status = td_future_then(fut, answer_owed, o);   /* now or later */
    if (status != TD_OK) {
        free(o);
    }
    td_future_release(fut);
    return status;
}

/* Run async handler E for R; as owe_answer. */
static td_status_t
run_async(const fn_entry_t *e, const rx_t *r, const td_rpc_list_t *args,
          uint64_t ctx)
{
    td_rpc_call_info_t info = { r->src, e->name };
    td_future_t *fut = NULL;
    td_status_t status;

    td_error_clear();
    status = e->afn(e->afn_arg, &info, args, &fut);
    if (status == TD_OK && fut == NULL) {
        status = td_error(TD_ERR_INVALID, "rpc: async handler '%s' returned "
                          "TD_OK without a future", e->name);
    }
    if (status != TD_OK) {
        td_future_release(fut);
        return status;
    }
    return owe_answer(r, fut, ctx);
}

/* A call (or rref message) on a pool thread. */
static void
run_call(void *arg)
{
    rx_t *r = arg;
    td_rpc_list_t *args = NULL, *result = NULL;
    uint64_t ctx = r->msg.meta.autograd_context_id, prev_ctx = 0;
    int type = r->msg.meta.type, want_reply = 1, kind = ERR_HANDLER;
    int owed = 0;
    td_status_t status;

    status = rx_decode(r, &args);
    if (status != TD_OK) {
        kind = ERR_DECODE;
        goto reply;
    }
    if (ctx != 0 && have_hooks) {
        status = hooks.on_recv(hooks.arg, ctx, r->msg.meta.autograd_message_id,
                               r->src, args);
        if (status != TD_OK) {
            goto reply;
        }
        prev_ctx = hooks.set_context(hooks.arg, ctx);
    }
    status = td_rpc_list_create(&result);
    if (status != TD_OK) {
        goto restore;
    }
    if (type == TD_RPC_MSG_CALL) {
        fn_entry_t *e = fn_find(r->msg.meta.function_id);

        if (e == NULL) {
            status = td_error(TD_ERR_NOT_FOUND, "no function with id "
                              "%016llx", (unsigned long long)
                              r->msg.meta.function_id);
            kind = ERR_NO_FUNCTION;
        } else if (e->afn != NULL) {
            status = run_async(e, r, args, ctx);
            if (status == TD_OK) {
                want_reply = 0;      /* R9: answer_owed replies */
                owed = 1;
            }
        } else {
            td_rpc_call_info_t info = { r->src, e->name };

            td_error_clear();
            status = e->fn(e->arg, &info, args, result);
        }
    } else if (typed[type] != NULL) {
        td_future_t *fut = NULL;

        want_reply = msg_wants_reply(type);
        status = typed[type]->handle(typed[type]->arg, type, r->src,
                                     r->msg.meta.function_id, args, result,
                                     &fut);
        if (status == TD_OK && fut != NULL && !want_reply) {
            td_future_release(fut);
        } else if (status == TD_OK && fut != NULL) {
            status = owe_answer(r, fut, ctx);
            if (status == TD_OK) {
                want_reply = 0;      /* R9: answer_owed replies */
                owed = 1;
            }
        } else if (fut != NULL) {
            td_future_release(fut);
        }
    } else {
        status = td_error(TD_ERR_PROTOCOL, "no handler for message type %d",
                          type);
    }
restore:
    if (ctx != 0 && have_hooks) {
        hooks.set_context(hooks.arg, prev_ctx);
    }
reply:
    if (want_reply) {
        char msg[1024];

        msg[0] = '\0';
        if (status != TD_OK) {
            snprintf(msg, sizeof(msg), "%s", td_last_error()[0] ?
                     td_last_error() : td_strerror(status));
        }
        send_reply(r, status, msg, kind, result, ctx);
    } else if (status != TD_OK) {
        log_drop(r->src, td_last_error());
    }
    td_rpc_list_free(args);
    td_rpc_list_free(result);
    rx_free(r);
    if (!owed) {
        atomic_fetch_sub(&rpc.busy, 1);
    }
}

/* A call to a TD_RPC_INLINE function, on the receiving thread. That may be
 * a thread driving progress inside its own dist-autograd context: the
 * handler must not see that context. */
static void
run_inline(rx_t *r, const char *name)
{
    const char *outer;
    uint64_t prev = 0;

    if (have_hooks) {
        prev = hooks.set_context(hooks.arg, 0);
    }
    outer = td__rpc_inline_enter(name);      /* R2 */
    run_call(r);
    td__rpc_inline_leave(outer);
    if (have_hooks) {
        hooks.set_context(hooks.arg, prev);
    }
}

/* A reply or error for one of our calls. FROM_PROGRESS: on that thread. */
static void
finish_reply(rx_t *r, int from_progress)
{
    pending_t *pc = pending_take(r->msg.meta.message_id);
    td_rpc_list_t *list = NULL;
    td_status_t status;
    char name[TD_WORKER_NAME_MAX];

    if (pc == NULL) {
        /* Timed out or failed already: the late reply is dropped. */
        rx_free(r);
        return;
    }
    if (pc->deadline > 0 && now_coarse_s() > pc->deadline) {
        char msg[512];                           /* R13: too late, dropped */

        timeout_text(pc, msg, sizeof(msg));
        pending_fail(pc, TD_ERR_TIMEOUT, msg, from_progress);
        rx_free(r);
        return;
    }
    status = rx_decode(r, &list);
    if (status != TD_OK) {
        char msg[1024];

        snprintf(msg, sizeof(msg), "rpc: call '%s' to rank %d: bad reply: "
                 "%s", pc->name, pc->dst, td_last_error());
        pending_fail(pc, status, msg, from_progress);
    } else if (r->msg.meta.type == TD_RPC_MSG_ERROR) {
        const char *text = "?";
        int64_t kind = ERR_HANDLER;
        char msg[1200];

        td_rpc_list_string(list, 0, &text);
        td_rpc_list_int(list, 1, &kind);
        if (kind == ERR_NO_FUNCTION) {
            snprintf(msg, sizeof(msg), "rpc: rank %d (%s) has no function "
                     "'%s'", pc->dst,
                     worker_name(pc->dst, name, sizeof(name)), pc->name);
            pending_fail(pc, TD_ERR_NOT_FOUND, msg, from_progress);
        } else {
            pending_fail(pc, TD_ERR_REMOTE, text, from_progress);
        }
        td_rpc_list_free(list);
    } else {
        uint64_t ctx = r->msg.meta.autograd_context_id;

        if (ctx != 0 && have_hooks) {
            status = hooks.on_recv(hooks.arg, ctx,
                                   r->msg.meta.autograd_message_id, r->src,
                                   list);
        }
        if (status != TD_OK) {
            char msg[1024];

            snprintf(msg, sizeof(msg), "%s", td_last_error());
            td_rpc_list_free(list);
            pending_fail(pc, status, msg, from_progress);
        } else {
            if (from_progress) {
                td__future_complete_async(pc->fut, list);
            } else {
                td_future_complete(pc->fut, list);
            }
            td_future_release(pc->fut);
            slot_put(&pending_slot, pc);
        }
    }
    rx_free(r);
}

static void
run_reply(void *arg)
{
    finish_reply(arg, 0);
    atomic_fetch_sub(&rpc.busy, 1);
}

/* Every body of message R arrived, and of those from its sender before it
 * (progress thread). */
static void
rx_deliver(rx_t *r, td_status_t status)
{
    int src = r->src;
    int type = r->msg.meta.type;

    if (status != TD_OK) {
        char why[256];

        snprintf(why, sizeof(why), "its bodies failed: %s",
                 td_strerror(status));
        log_drop(src, why);
        rx_free(r);
        atomic_fetch_sub(&rpc.busy, 1);
        return;
    }
    if ((type == TD_RPC_MSG_REPLY || type == TD_RPC_MSG_ERROR) &&
        r->msg.meta.autograd_context_id == 0) {
        finish_reply(r, 1);             /* fast path: no pool hop */
        atomic_fetch_sub(&rpc.busy, 1);
        return;
    }
    if (type == TD_RPC_MSG_CALL && r->msg.meta.autograd_context_id == 0) {
        const fn_entry_t *e = fn_find(r->msg.meta.function_id);

        if (e != NULL && (e->flags & TD_RPC_INLINE)) {
            run_inline(r, e->name);     /* no pool hop either */
            return;
        }
    }
    if (td__rpc_pool_post(type == TD_RPC_MSG_REPLY || type == TD_RPC_MSG_ERROR
                         ? run_reply : run_call, r) != TD_OK) {
        log_drop(src, td_last_error());
        rx_free(r);
        atomic_fetch_sub(&rpc.busy, 1);
    }
}

/* Every body of a message arrived (progress thread): it and the ones from
 * its sender that waited for it are delivered, in arrival order (R11). */
static void
rx_done(void *arg, td_status_t status, int src, td_iov_t *bodies,
        size_t n_bodies)
{
    rx_t *r = arg;
    rx_fifo_t *q = &rx_order[src];

    (void)bodies;
    (void)n_bodies;
    r->landed = 1;
    r->lstatus = status;
    while (q->head != NULL && q->head->landed) {
        rx_t *h = q->head;

        q->head = h->onext;
        if (q->head == NULL) {
            q->tail = NULL;
        }
        rx_deliver(h, h->lstatus);
    }
}

/* The transport's receive handler (progress thread): validate, then name
 * where the bodies go (tensor storage, allocated here: zero-copy). */
static void
rx_handler(void *arg, td_transport_rx_t *rx)
{
    rx_t *r;
    td_status_t status;

    (void)arg;
    /* Not calloc: R is 6 KB of descriptors, mostly unused; the parse sets
     * what the message uses, the rest is set here. */
    r = slot_get(&rx_slot, sizeof(*r));
    if (r == NULL) {
        log_drop(rx->src, "out of memory");
        return;
    }
    r->hdr_copy = NULL;
    r->args_buf = NULL;
    r->eager = 0;
    r->src = rx->src;
    status = td__rpc_wire_parse(rx->header, rx->header_len, rx->src, &r->msg);
    for (int k = 0; status == TD_OK && k < r->msg.n_tensors; k++) {
        r->tensors[k] = NULL;       /* rx_free releases the first n_tensors */
    }
    if (status == TD_OK) {
        status = td__rpc_wire_check_bodies(&r->msg, rx->src, rx->body_len,
                                          rx->n_bodies);
    }
    if (status != TD_OK) {
        char why[512];

        snprintf(why, sizeof(why), "%s", td_last_error());
        reject(rx, why);
        slot_put(&rx_slot, r);
        return;                         /* bodies are dropped (done NULL) */
    }
    if (r->msg.args_body < 0 && r->msg.args_len > 0) {
        r->hdr_copy = rx->header_len <= RX_HDR_SMALL ? r->hdr_small
                                                     : malloc(rx->header_len);
        if (r->hdr_copy == NULL) {
            log_drop(rx->src, "out of memory");
            slot_put(&rx_slot, r);
            return;
        }
        memcpy(r->hdr_copy, rx->header, rx->header_len);
        r->msg.args = r->hdr_copy + (r->msg.args - (const uint8_t *)
                                     rx->header);
    }
    if (r->msg.reply_map.n_pairs > 0) {
        td__rpc_device_learn(rx->src, &r->msg.reply_map);
    }
    for (int k = 0; k < r->msg.n_tensors; k++) {
        const td_rpc_wire_tensor_t *t = &r->msg.tensors[k];
        td_mem_type_t mem = TD_MEM_HOST;

        status = t->device.type == TD_DEVICE_CPU
                 ? rx_tensor(t, &r->tensors[k])
                 : td__rpc_device_rx_tensor(rx->src, t, &r->tensors[k], &mem);
        if (status != TD_OK) {
            char why[512];

            snprintf(why, sizeof(why), "%s", td_last_error());
            reject(rx, why);
            rx_free(r);
            return;
        }
        if (t->xfer == TD_RPC_WIRE_XFER_EAGER) {
            r->eager |= 1ull << k;
        }
        if (t->body >= 0) {
            rx->dest[t->body].buf = td_tensor_data(r->tensors[k]);
            rx->dest[t->body].mem = mem;
        }
    }
    if (r->msg.args_body >= 0) {
        r->args_buf = malloc(r->msg.args_len ? r->msg.args_len : 1);
        if (r->args_buf == NULL) {
            log_drop(rx->src, "out of memory");
            rx_free(r);
            return;
        }
        rx->dest[r->msg.args_body].buf = r->args_buf;
        rx->dest[r->msg.args_body].mem = TD_MEM_HOST;
    }
    atomic_fetch_add(&rpc.busy, 1);
    r->onext = NULL;                    /* R11: in arrival order */
    r->landed = 0;
    if (rx_order[rx->src].tail != NULL) {
        rx_order[rx->src].tail->onext = r;
    } else {
        rx_order[rx->src].head = r;
    }
    rx_order[rx->src].tail = r;
    rx->done = rx_done;
    rx->done_arg = r;
}

/* ---- the runtime module -------------------------------------------------- */

static td_status_t
module_setup(void *arg, td_transport_t *tp, const td_world_t *w)
{
    td_status_t status;
    int n = cfg_threads;
    const char *s;

    (void)arg;
    if (n == 0) {
        s = getenv("TODIST_RPC_THREADS");
        n = (s != NULL && atoi(s) > 0) ? atoi(s) : 4;
        if (n > TD_RPC_POOL_MAX) {
            n = TD_RPC_POOL_MAX;
        }
    }
    s = getenv("TODIST_RPC_SPIN_US");
    rpc_spin_us = (s != NULL && *s != '\0') ? atof(s) : 0;
    s = getenv("TODIST_TEST_RPC_TIMER_S");              /* R13, tests only */
    timer_tick_s = s != NULL && atof(s) > 0 ? atof(s) : RPC_TIMER_TICK_S;
    env_timeout = env_timeout_read();
    rpc.tp = tp;
    rpc.rank = w->rank;
    rpc.world_size = w->world_size;
    snprintf(rpc.worker_name, sizeof(rpc.worker_name), "%s", w->worker_name);
    atomic_store(&rpc.next_id, 1);
    atomic_store(&rpc.busy, 0);
    /* R11: a fresh transport, nothing in flight; kept after shutdown, as
     * the transport may still finish messages then */
    free(rx_order);
    rx_order = calloc((size_t)w->world_size, sizeof(*rx_order));
    if (rx_order == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "rpc: out of memory for %d ranks",
                        w->world_size);
    }
    status = td__transport_set_handler(tp, RPC_TRANSPORT_ID, rx_handler, NULL);
    if (status == TD_OK) {
        /* R10: bodies in place between ranks of one host */
        s = getenv("TODIST_RPC_CMA");
        status = td__transport_set_inplace(tp, RPC_TRANSPORT_ID,
                                          s != NULL && strcmp(s, "0") == 0
                                          ? 0 : RPC_INPLACE_MIN);
    }
    if (status == TD_OK) {
        /* R12: small messages through mailboxes between ranks of one host */
        s = getenv("TODIST_RPC_MBOX");
        if (s == NULL || strcmp(s, "0") != 0) {
            status = td__transport_set_mbox(tp, RPC_TRANSPORT_ID);
        }
    }
    if (status == TD_OK) {
        status = td__rpc_device_setup(tp, w);   /* device tensors' staging */
    }
    if (status != TD_OK) {
        return status;
    }
    td__transport_set_classifier(tp, classify, NULL);
    status = td__rpc_pool_start(tp, n, rpc_spin_us);
    if (status != TD_OK) {
        return status;
    }
    rpc.timer_stop = 0;
    if (pthread_create(&rpc.timer, NULL, timer_main, NULL) != 0) {
        td__rpc_pool_stop();
        return td_error(TD_ERR_IO, "rpc: cannot start the timer thread");
    }
    rpc.timer_started = 1;
    td__rpc_drive_start(tp, rpc_spin_us);
    atomic_store(&rpc.state, RPC_RUNNING);
    return TD_OK;
}

static size_t
module_outstanding(void *arg)
{
    long busy = atomic_load(&rpc.busy);
    size_t n;

    (void)arg;
    pthread_mutex_lock(&rpc.plock);
    n = rpc.n_pending;
    pthread_mutex_unlock(&rpc.plock);
    return n + (busy > 0 ? (size_t)busy : 0) + td__rpc_device_outstanding();
}

static void
module_peer_failed(void *arg, int rank, td_status_t why)
{
    pending_t *pc = pending_take_matching(rank, 0);
    char name[TD_WORKER_NAME_MAX];
    char where[256];      /* the host and its ranks, when another host */
    char fate[160];       /* "died", or it dropped this rank (L12) */

    (void)arg;
    (void)why;
    td__rpc_device_peer_failed(rank);
    td__runtime_host_text(rank, where, sizeof(where));
    td__runtime_peer_fate(rank, fate, sizeof(fate));
    while (pc != NULL) {
        pending_t *next = pc->next;
        char msg[768];

        snprintf(msg, sizeof(msg), "rpc: rank %d (%s%s%s) %s with call "
                 "'%s' pending", rank, worker_name(rank, name, sizeof(name)),
                 where[0] ? "; " : "", where, fate, pc->name);
        pending_fail(pc, TD_ERR_PEER, msg, 1);
        pc = next;
    }
}

static void
module_shutdown(void *arg)
{
    pending_t *pc;

    (void)arg;
    atomic_store(&rpc.state, RPC_STOPPED);
    /* R6: waiters driving progress leave; after this no thread enters the
     * transport through td__rpc_drive_until. */
    td__rpc_drive_stop();
    if (rpc.timer_started) {
        pthread_mutex_lock(&rpc.tlock);
        rpc.timer_stop = 1;
        pthread_cond_signal(&rpc.tcond);
        pthread_mutex_unlock(&rpc.tlock);
        pthread_join(rpc.timer, NULL);
        rpc.timer_started = 0;
    }
    pc = pending_take_matching(-1, 0);
    while (pc != NULL) {
        pending_t *next = pc->next;

        pending_fail(pc, TD_ERR_CANCELED, "rpc: the runtime shut down with "
                     "this call pending", 0);
        pc = next;
    }
    td__rpc_device_shutdown();     /* fails staged sends still in progress */
    td__rpc_pool_stop();
    buf_cache_clear();
    slot_clear(&send_slot);
    slot_clear(&rx_slot);
    slot_clear(&pending_slot);
    td__future_spare_clear();
    rpc.tp = NULL;
}

const td_runtime_module_t td_rpc_module = {
    .name = "rpc",
    .setup = module_setup,
    .outstanding = module_outstanding,
    .peer_failed = module_peer_failed,
    .shutdown = module_shutdown,
};
