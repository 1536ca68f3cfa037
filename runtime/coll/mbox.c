/* mbox.c: point-to-point messages through shared memory between ranks of
 * one host: a mailbox per ordered pair of ranks, in the receiver's inbox.
 *
 * A small td_send (at most MBOX_BODY bytes) to a rank of this host is
 * written into a slot of the receiver's mailbox for us, which the
 * receiver polls while it waits; the receiver's ack (its status and
 * shape, so that a mismatch still fails both sides) is written back into
 * the slot, which the sender polls. A round trip is then two cache-line
 * transfers instead of four active messages through the progress token.
 *
 * Setup: a rank creates its inbox (a memfd with a mailbox per world rank,
 * sparse: only the pages of senders that write are ever touched) at its
 * first receive, and offers it in the ack of each sender's first
 * transport message (MSG_ACK with COLL_F_MBOX: pid, fd, token, boot id
 * hash). At its next send the sender opens /proc/PID/fd/FD if the boot id
 * is its own, maps its own mailbox and checks the token; failing that it
 * keeps using the transport to that rank.
 *
 * Invariants (comments cite them as M1..M8):
 *  M1 A slot is the sender's when FREE or ACKED, the receiver's when FULL.
 *     The owner writes the fields, then the state (release); the other
 *     side reads the state (acquire), then copies the fields once and
 *     checks them before use (a peer's memory is not trusted).
 *  M2 Messages of one sender to one receiver keep their order across the
 *     two paths: the sender writes its mailbox only while none of its
 *     transport p2p sends to that receiver is unacked (tp_busy), and the
 *     receiver drains a sender's mailbox before it handles that sender's
 *     transport p2p message (the mailbox write came first).
 *  M3 Slots are written and consumed in ring order: the receiver takes
 *     slot pos % MBOX_SLOTS only when its pos is the next one (rd), so a
 *     reused slot is never read twice; a sender whose next slot is still
 *     held (an unexpected message keeps it, M6) uses the transport.
 *  M4 Mailboxes are drained, their acks taken and their slots written
 *     under coll_lock (match.c, L1-L5), from reading a slot until its message or
 *     ack is in the matching engine: one lock per message, the one the
 *     matching takes anyway. Completions, pokes and group failures come
 *     after the unlock (C1). A sender's ring (positions, pending slots,
 *     what each is for) is under that mailbox's own spinlock, taken
 *     inside coll_lock where both are needed: a blocking send (M9), which
 *     posts nothing, takes only the spinlock.
 *  M5 A waiter that sleeps says so first (its inbox's sleepers, and
 *     s_sleep of every mailbox it writes), then polls, sleeps at most
 *     MBOX_RECHECK_S (wait.c) and polls again before it sleeps longer; a
 *     side that writes a message or an ack then reads the flag, with no
 *     fence, and pokes a sleeper with an empty transport message
 *     (MSG_POKE). Without a fence the flag may be read before the write
 *     is seen, but a store is seen within nanoseconds, far less than the
 *     recheck: a write that missed the announcement is found by the
 *     second poll. (A fence would cost every message the time its line
 *     takes to move, ~50-100 ns here.) Sleeps are bounded (2 ms), so a
 *     lost poke costs time, never a hang.
 *  M6 An unexpected mailbox message keeps its slot (its body is read in
 *     place when matched); one that is dropped (its group destroyed or
 *     broken, the runtime stopping) is acked TD_ERR_CANCELED, so the slot
 *     comes back.
 *  M7 Mappings live until the next td_init (the progress thread may still
 *     handle a message after the modules shut down); a dead peer's
 *     mailboxes are skipped (dead), never unmapped under a poller.
 *  M8 Bounded: MBOX_SLOTS slots per ordered pair, MBOX_BODY bytes per
 *     body, worlds of at most MBOX_WORLD_MAX ranks (larger ones use the
 *     transport only).
 *  M9 A blocking td_send's slot may be left to its thread (lean): the
 *     thread polls the slot for its ack itself, with no posted request;
 *     acks() leaves a lean slot alone. A slot is freed (its ring position
 *     given back) only once its ack was taken (handled), oldest first,
 *     under the ring's lock; a freed slot keeps its ACKED state (M1: the
 *     sender's), so freeing writes nothing the receiver polls. A lean
 *     send not acked within MBOX_SPIN_S is posted under coll_lock, after
 *     a last look at its slot, and waited for like any other.
 * M10 A blocking td_recv may take its message from the mailbox itself
 *     (coll_p2p_recv_fast), under coll_lock, only when no receive posted
 *     earlier and no unexpected message could match it, and only the
 *     oldest message (M3): what any other receive would have matched.
 *
 * Thread safety: all functions are thread-safe. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "runtime/coll/mbox.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/wire.h"
#include "base/byteorder.h"
#include "base/clock.h"
#include "base/cpu.h"
#include "base/log.h"

#define MBOX_SLOTS     8
#define MBOX_WORLD_MAX 4096
#define MBOX_MAGIC     0x746f6469737462ull      /* "todistb" */

enum { SLOT_FREE = 0, SLOT_FULL = 1, SLOT_ACKED = 2 };

/* One message. A small one (a vector of up to two float32s, one int64)
 * is one cache line: the control fields, then its shape and body. */
typedef struct {
    _Atomic uint32_t state;            /* M1 */
    uint32_t pos;                      /* ring position (M3) */
    uint32_t gid, digest, seq, tag;
    uint64_t nbytes;
    uint8_t  dtype, ndim, ack_dtype, ack_ndim;
    int32_t  ack_status;
    uint8_t  data[8 * TD_MAX_DIMS + MBOX_BODY];   /* shape[ndim], body */
    int64_t  ack_shape[TD_MAX_DIMS];   /* the receiver's, on a mismatch */
} __attribute__((aligned(64))) slot_t;

typedef struct {
    _Atomic uint32_t s_sleep;          /* the sender's waiters asleep (M5) */
    uint8_t  pad[60];
    slot_t   slot[MBOX_SLOTS];
} __attribute__((aligned(64))) mbox_t;

typedef struct {
    uint64_t magic, token;
    uint32_t nworld, mbox_bytes;
    _Atomic uint32_t sleepers;         /* our waiters asleep (M5) */
} inbox_hdr_t;

/* A sender's mailbox in our inbox. */
typedef struct {
    int      offered;                  /* polled (in poll_list) */
    int      used;                     /* it wrote to us: on this host */
    uint32_t rd;                       /* next ring position (coll_lock) */
} in_t;

enum { OUT_NONE = 0, OUT_OFFERED, OUT_ATTACHED, OUT_NO };

/* Our mailbox in a receiver's inbox. */
typedef struct {
    pthread_mutex_t lock;              /* the offer and attaching */
    _Atomic int     st;                /* OUT_* */
    int32_t         pid, fd;           /* the offer */
    uint64_t        token, size;
    inbox_hdr_t    *hdr;               /* mapped: the inbox's first page */
    mbox_t         *mb;                /* mapped: our mailbox in it */
    size_t          mb_map;            /* its mapping's length ... */
    size_t          mb_skew;           /* ... and where mb sits in it */
    /* under ring (M4): taken inside coll_lock where both are held */
    atomic_int      ring;              /* a spinlock: a few stores inside */
    uint32_t        wr;                /* next ring position */
    int             npend;             /* slots FULL or ACKED (ours) */
    uint8_t         handled[MBOX_SLOTS];   /* its ack was taken */
    uint8_t         lean[MBOX_SLOTS];      /* its sender polls it (M9) */
    uint32_t        gid[MBOX_SLOTS], seq[MBOX_SLOTS];  /* what each is for */
    atomic_int      tp_busy;           /* transport p2p sends unacked (M2) */
    _Atomic int     dead;              /* M7 */
} out_t;

static struct {
    pthread_mutex_t lock;              /* setup, poll lists */
    int             on;                /* TODIST_COLL_P2P_SHM */
    int             rank, size;
    uint64_t        boot_hash;
    int             fd;                /* our inbox, or -1 */
    uint8_t        *base;
    size_t          len, mbox_bytes, page;
    uint64_t        token;
    in_t           *in;                /* per world rank */
    out_t          *out;               /* per world rank */
    int            *in_list, *out_list;
    atomic_int      n_in, n_out;       /* entries published (append-only) */
    atomic_int      active;            /* anything to poll */
} M = { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1 };

static atomic_ulong pokes;            /* MSG_POKE sent (M5) */
static atomic_ulong fast[2];          /* receives taken, sends written on
                                       * the fast path (M9, M10): a debug
                                       * count */

static size_t
mbox_bytes(void)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t p = page > 0 ? (size_t)page : 4096;

    return (sizeof(mbox_t) + p - 1) / p * p;
}

static size_t
page_size(void)
{
    return M.page;
}

/* ---- setup ------------------------------------------------------------- */

static void mbox_free(void);
static void slot_drop(int src, int slot);

/* Wake a sleeper of DST (M5): an empty transport message. */
static void
send_poke(int dst)
{
    uint8_t h[COLL_WIRE_BYTES];

    atomic_fetch_add_explicit(&pokes, 1, memory_order_relaxed);
    coll_wire_fixed(h, MSG_POKE, 0, 0, 0, 0, 0, 0, 0);
    if (td__transport_send(coll_transport(), dst, COLL_TRANSPORT_ID, h,
                          sizeof(h), NULL, 0, NULL, NULL) != TD_OK) {
        td_log_debug("coll: poke to rank %d not sent: %s", dst,
                     td_last_error());
    }
}

/* TODIST_FAULT's verdict on a mailbox message (tests only). */
static int
fault_roll(void)
{
    td_transport_t *tp = coll_transport();

    return tp != NULL ? td__transport_fault_roll(tp, "mbox") : 0;
}

int
coll_spin_over(double *t_first, const td_group_t *g)
{
    double now = td_now_s();

    if (*t_first == 0) {
        *t_first = now;                 /* (the clock is read only now) */
        return 0;
    }
    return now - *t_first > MBOX_SPIN_S || coll_stopped() ||
           (g != NULL && __atomic_load_n(&g->broken, __ATOMIC_RELAXED) !=
                             TD_OK);
}

void
coll_mbox_fast_count(int send)
{
    /* no locked instruction: a lost count is harmless (a debug figure) */
    atomic_store_explicit(&fast[send != 0],
                          atomic_load_explicit(&fast[send != 0],
                                               memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

td_status_t
coll_mbox_setup(int rank, int size, const char *boot_id)
{
    const char *s = getenv("TODIST_COLL_P2P_SHM");
    uint64_t h = 0xcbf29ce484222325ull;

    coll_match_hooks_t hooks = { coll_mbox_tp_end, slot_drop };

    coll_match_set_hooks(&hooks);       /* match.h: M2, M6 */
    mbox_free();                        /* the last td_init's (M7) */
    M.rank = rank;
    M.size = size;
    M.on = !(s != NULL && strcmp(s, "0") == 0) && size <= MBOX_WORLD_MAX &&
           boot_id != NULL && boot_id[0] != '\0';
    for (const char *p = boot_id != NULL ? boot_id : ""; *p; p++) {
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    }
    M.boot_hash = h;
    M.fd = -1;
    M.base = NULL;
    atomic_store(&M.n_in, 0);
    atomic_store(&M.n_out, 0);
    atomic_store(&M.active, 0);
    M.mbox_bytes = mbox_bytes();
    {
        long page = sysconf(_SC_PAGESIZE);

        M.page = page > 0 ? (size_t)page : 4096;
    }
    if (!M.on) {
        return TD_OK;
    }
    M.in = calloc((size_t)size, sizeof(*M.in));
    M.out = calloc((size_t)size, sizeof(*M.out));
    M.in_list = calloc((size_t)size, sizeof(int));
    M.out_list = calloc((size_t)size, sizeof(int));
    if (M.in == NULL || M.out == NULL || M.in_list == NULL ||
        M.out_list == NULL) {
        mbox_free();
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    for (int i = 0; i < size; i++) {
        pthread_mutex_init(&M.out[i].lock, NULL);
    }
    return TD_OK;
}

/* Unmap and free what the last td_init's mailboxes held. */
static void
mbox_free(void)
{
    int n_out = M.out != NULL ? atomic_load(&M.n_out) : 0;

    atomic_store(&M.active, 0);
    for (int i = 0; i < n_out; i++) {
        out_t *o = &M.out[M.out_list[i]];

        if (o->hdr != NULL) {
            munmap(o->hdr, page_size());
        }
        if (o->mb != NULL) {
            munmap((uint8_t *)o->mb - o->mb_skew, o->mb_map);
        }
    }
    if (M.base != NULL) {
        munmap(M.base, M.len);
    }
    if (M.fd >= 0) {
        close(M.fd);
    }
    if (M.out != NULL) {
        for (int i = 0; i < M.size; i++) {
            pthread_mutex_destroy(&M.out[i].lock);
        }
    }
    free(M.in);
    free(M.out);
    free(M.in_list);
    free(M.out_list);
    M.in = NULL;
    M.out = NULL;
    M.in_list = M.out_list = NULL;
    M.base = NULL;
    M.fd = -1;
    M.on = 0;
}

/* The runtime shuts down: mailboxes are no longer used. Their memory is
 * freed at the next td_init (M7): the transport's progress thread runs
 * until after the modules shut down, and a message it handles meanwhile
 * may still look at a mailbox. */
void
coll_mbox_shutdown(void)
{
    coll_lock();
    M.on = 0;
    atomic_store(&M.active, 0);
    coll_unlock();
    td_log_debug("coll: %lu mailbox pokes sent", atomic_load(&pokes));
    td_log_debug("coll: %lu sends and %lu receives done on the fast path",
                 atomic_load(&fast[1]), atomic_load(&fast[0]));
    atomic_store(&pokes, 0);
    atomic_store(&fast[0], 0);
    atomic_store(&fast[1], 0);
}

/* Our inbox, made at the first receive (a user thread: never in a
 * callback, where a syscall would hold the token). */
void
coll_mbox_inbox_ensure(void)
{
    inbox_hdr_t *h;
    int fd;
    size_t len;

    if (!M.on || __atomic_load_n(&M.base, __ATOMIC_ACQUIRE) != NULL) {
        return;
    }
    pthread_mutex_lock(&M.lock);
    if (M.base != NULL || M.fd == -2) {
        pthread_mutex_unlock(&M.lock);
        return;
    }
    len = page_size() + M.mbox_bytes * (size_t)M.size;
    fd = memfd_create("todist-p2p", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        td_log_debug("coll: no point-to-point inbox (%s): the transport "
                     "carries every message", strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        M.fd = -2;                      /* do not try again */
        pthread_mutex_unlock(&M.lock);
        return;
    }
    h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        close(fd);
        M.fd = -2;
        pthread_mutex_unlock(&M.lock);
        return;
    }
    M.token = ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)h ^
              (uint64_t)(td_now_s() * 1e9);
    h->magic = MBOX_MAGIC;
    h->token = M.token;
    h->nworld = (uint32_t)M.size;
    h->mbox_bytes = (uint32_t)M.mbox_bytes;
    M.fd = fd;
    M.len = len;
    __atomic_store_n(&M.base, (uint8_t *)h, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&M.lock);
}

static mbox_t *
in_mbox(int src)
{
    return (mbox_t *)(M.base + M.page + M.mbox_bytes * (size_t)src);
}

/* The offer of our inbox to world rank DST, for the ack of its first
 * transport message: its length into T (MBOX_OFFER_BYTES), or 0 (none,
 * or offered before). From then on its mailbox is polled. */
size_t
coll_mbox_offer(int dst, uint8_t *t)
{
    in_t *in;

    if (!M.on || dst == M.rank || dst < 0 || dst >= M.size ||
        __atomic_load_n(&M.base, __ATOMIC_ACQUIRE) == NULL) {
        return 0;
    }
    in = &M.in[dst];
    pthread_mutex_lock(&M.lock);
    if (in->offered) {
        pthread_mutex_unlock(&M.lock);
        return 0;
    }
    __atomic_store_n(&in->offered, 1, __ATOMIC_RELEASE);
    M.in_list[atomic_load(&M.n_in)] = dst;
    atomic_fetch_add(&M.n_in, 1);       /* publishes the entry */
    atomic_store(&M.active, 1);
    pthread_mutex_unlock(&M.lock);
    td_put_be32(t, (uint32_t)getpid());
    td_put_be32(t + 4, (uint32_t)M.fd);
    td_put_be64(t + 8, M.token);
    td_put_be64(t + 16, M.boot_hash);
    td_put_be64(t + 24, (uint64_t)M.len);
    return MBOX_OFFER_BYTES;
}

/* World rank SRC offered its inbox (T, from an ack; a callback: recorded
 * only, mapped at our next send to it). */
void
coll_mbox_offered(int src, const uint8_t *t)
{
    out_t *o;

    if (!M.on || src == M.rank || src < 0 || src >= M.size) {
        return;
    }
    o = &M.out[src];
    pthread_mutex_lock(&o->lock);
    if (atomic_load(&o->st) == OUT_NONE) {
        o->pid = (int32_t)td_get_be32(t);
        o->fd = (int32_t)td_get_be32(t + 4);
        o->token = td_get_be64(t + 8);
        o->size = td_get_be64(t + 24);
        /* Another host: opening /proc/PID/fd/FD there would reach an
         * unrelated process's file. */
        atomic_store(&o->st, td_get_be64(t + 16) == M.boot_hash &&
                     o->pid > 0 && o->fd >= 0 ? OUT_OFFERED : OUT_NO);
        td_log_debug("coll: rank %d offered its inbox (%s)", src,
                     atomic_load(&o->st) == OUT_OFFERED ? "this host" :
                     "another host: not used");
    }
    pthread_mutex_unlock(&o->lock);
}

/* Map our mailbox in DST's inbox (out lock held, user thread). */
static void
attach(int dst, out_t *o)
{
    size_t page = page_size(), off, skew;
    char path[64];
    struct stat sb;
    inbox_hdr_t *h = MAP_FAILED;
    void *mb = MAP_FAILED;
    int fd;

    atomic_store(&o->st, OUT_NO);        /* unless all goes well */
    if (o->size != page + M.mbox_bytes * (size_t)M.size) {
        td_log_debug("coll: rank %d's inbox has %" PRIu64 " bytes, not %zu: "
                     "point-to-point messages to it use the transport", dst,
                     o->size, page + M.mbox_bytes * (size_t)M.size);
        return;
    }
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)o->pid, (int)o->fd);
    fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        td_log_debug("coll: cannot open rank %d's inbox (%s: %s): "
                     "point-to-point messages to it use the transport", dst,
                     path, strerror(errno));
        return;
    }
    off = page + M.mbox_bytes * (size_t)M.rank;
    skew = off % page;                   /* 0: mbox_bytes is whole pages */
    /* (non-blocking, and a regular file only: a damaged offer must not
     * open someone's FIFO or device and wait on it) */
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
        (uint64_t)sb.st_size != o->size) {
        goto out;
    }
    h = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    mb = mmap(NULL, M.mbox_bytes + skew, PROT_READ | PROT_WRITE, MAP_SHARED,
              fd, (off_t)(off - skew));
    if (h == MAP_FAILED || mb == MAP_FAILED) {
        goto out;
    }
    /* The same pid and fd in another pid namespace: not DST's inbox. */
    if (h->magic != MBOX_MAGIC || h->token != o->token ||
        h->nworld != (uint32_t)M.size ||
        h->mbox_bytes != (uint32_t)M.mbox_bytes) {
        goto out;
    }
    o->hdr = h;
    o->mb = (mbox_t *)((uint8_t *)mb + skew);
    o->mb_map = M.mbox_bytes + skew;
    o->mb_skew = skew;
    o->wr = 0;
    o->npend = 0;
    for (int i = 0; i < MBOX_SLOTS; i++) {
        if (atomic_load_explicit(&o->mb->slot[i].state,
                                 memory_order_acquire) != SLOT_FREE) {
            goto out_detach;            /* not fresh: not ours to use */
        }
    }
    close(fd);
    pthread_mutex_lock(&M.lock);
    M.out_list[atomic_load(&M.n_out)] = dst;
    atomic_fetch_add(&M.n_out, 1);
    atomic_store(&M.active, 1);
    pthread_mutex_unlock(&M.lock);
    atomic_store(&o->st, OUT_ATTACHED);
    td_log_debug("coll: point-to-point mailbox to rank %d attached", dst);
    return;
out_detach:
    o->hdr = NULL;
    o->mb = NULL;
out:
    td_log_debug("coll: rank %d's inbox (%s) is not one to use: "
                 "point-to-point messages to it use the transport", dst,
                 path);
    if (mb != MAP_FAILED) {
        munmap(mb, M.mbox_bytes + skew);
    }
    if (h != MAP_FAILED) {
        munmap(h, page);
    }
    close(fd);
}

/* ---- the receiver's side --------------------------------------------- */

/* Write the ack of slot SLOT of SRC's mailbox (M1); POKE: wake the sender
 * if it sleeps (M5; never under coll_lock: it may send). */
void
coll_mbox_ack(int src, int slot, td_status_t status, uint8_t dtype,
              int ndim, const int64_t *shape, int poke)
{
    slot_t *s = &in_mbox(src)->slot[slot];

    s->ack_status = (int32_t)status;
    s->ack_dtype = dtype;
    s->ack_ndim = (uint8_t)ndim;
    if (status != TD_OK && ndim > 0) {     /* an error ack may carry no shape */
        memcpy(s->ack_shape, shape, 8 * (size_t)ndim);
    }
    atomic_store_explicit(&s->state, SLOT_ACKED, memory_order_release);
    if (poke) {
        atomic_signal_fence(memory_order_seq_cst);      /* M5: no fence */
        if (atomic_load_explicit(&in_mbox(src)->s_sleep,
                                 memory_order_relaxed) != 0) {
            send_poke(src);
        }
    }
}

/* Read the message in slot K of SRC's mailbox into *M (M1: copied once,
 * then checked); 0 when it is malformed. */
static int
slot_read(int src, int k, const slot_t *s, coll_mbox_msg_t *m)
{
    m->src = src;
    m->slot = k;
    m->gid = s->gid;
    m->digest = s->digest;
    m->seq = s->seq;
    m->tag = s->tag;
    m->dtype = s->dtype;
    m->ndim = s->ndim;
    m->nbytes = s->nbytes;
    if (m->ndim > TD_MAX_DIMS || m->dtype >= TD_NUM_DTYPES ||
        m->nbytes > MBOX_BODY || m->tag > (uint32_t)TD_TAG_MAX) {
        return 0;
    }
    memcpy(m->shape, s->data, 8 * (size_t)m->ndim);
    m->body = s->data + 8 * (size_t)m->ndim;
    return 1;
}

/* Is SRC's mailbox in our inbox polled (offered to SRC, inbox made)? */
static int
in_polled(int src)
{
    return M.on && src >= 0 && src < M.size &&
           __atomic_load_n(&M.in[src].offered, __ATOMIC_ACQUIRE) &&
           __atomic_load_n(&M.base, __ATOMIC_ACQUIRE) != NULL;
}

/* Is the next message of SRC's mailbox there? (a hint: re-checked under
 * coll_lock) */
static int
next_full(int src, slot_t **s_p)
{
    in_t *in = &M.in[src];
    slot_t *s = &in_mbox(src)->slot[__atomic_load_n(&in->rd,
                                                   __ATOMIC_RELAXED) %
                                    MBOX_SLOTS];

    *s_p = s;
    if (atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_FULL ||
        s->pos != __atomic_load_n(&in->rd, __ATOMIC_RELAXED)) {
        return 0;
    }
    __builtin_prefetch(s, 1);   /* the ack goes here: own the line early */
    return 1;
}

/* M6: a dropped message's slot comes back (match.h hook; no poke: coll_lock
 * may be held). */
static void
slot_drop(int src, int slot)
{
    coll_mbox_ack(src, slot, TD_ERR_CANCELED, 0, 0, NULL, 0);
}

td_status_t
coll_mbox_receive(coll_req_t *r, const coll_mbox_msg_t *m, char *msg,
                  size_t len, int poke)
{
    td_status_t code;

    r->from = m->src;
    r->seq = m->seq;                /* the ack names the sender's seq */
    code = coll_p2p_fits(r, m->src, m->dtype, m->ndim, m->shape, m->nbytes,
                         msg, len);
    if (code == TD_OK && m->nbytes > 0) {
        memcpy(r->buf, m->body, m->nbytes);
    }
    coll_mbox_ack(m->src, m->slot, code, r->dtype, r->ndim, r->shape, poke);
    return code;
}

/* What a mailbox message came to (arrive_locked). */
typedef struct {
    td_status_t code;              /* the matched receive's status */
    int         fail;              /* fail the message's group with msg */
    char        msg[COLL_ERR_MAX];
} arrive_t;

/* coll_lock held (M4): a p2p message from world rank M->src read out of
 * its mailbox; rx.c's MSG_P2P path, with the body in the slot. Returns
 * the receive it matched, to be completed after the unlock with A->code
 * and A->msg (copied and acked here), or NULL (kept as unexpected, or
 * dropped and acked; A->fail: fail group M->gid with A->msg after the
 * unlock). Acks written here never poke (L4). */
static coll_req_t *
arrive_locked(const coll_mbox_msg_t *m, arrive_t *a)
{
    td_group_t *g;
    coll_req_t *r;
    coll_unexp_t *e;

    a->code = TD_OK;
    a->fail = 0;
    a->msg[0] = '\0';
    g = coll_group_find_locked(m->gid);
    if ((g == NULL && coll_group_gone_locked(m->gid)) ||
        (g != NULL && (g->broken != TD_OK || g->of_world[m->src] < 0 ||
                       g->me < 0))) {
        coll_mbox_ack(m->src, m->slot, TD_ERR_CANCELED, 0, 0, NULL, 0);
        return NULL;                          /* C11, C6: dropped */
    }
    if (g != NULL && g->digest != m->digest) {
        snprintf(a->msg, sizeof(a->msg), "coll: group %u has different "
                 "members on rank %d and rank %d (member digests %08x and "
                 "%08x): every rank must call td_group_new with the same "
                 "lists in the same order", m->gid, m->src, M.rank,
                 m->digest, g->digest);
        coll_mbox_ack(m->src, m->slot, TD_ERR_CANCELED, 0, 0, NULL, 0);
        a->fail = 1;
        return NULL;
    }
    r = coll_posted_take_locked(MSG_P2P, m->gid, m->src, m->seq, m->tag);
    if (r != NULL) {
        a->code = coll_mbox_receive(r, m, a->msg, sizeof(a->msg), 0);
        return r;
    }
    /* Unexpected: kept in its slot (M6, C7) until its receive is posted. */
    if ((e = coll_ux_new_locked()) == NULL) {
        td_log_error("coll: dropped a message from rank %d (group %u): %zu "
                     "unmatched messages queued already", m->src, m->gid,
                     coll_ux_count_locked());
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
    coll_ux_append_locked(e);
    return NULL;
}

/* Hand the messages waiting in SRC's mailbox to the matching engine, in
 * order (M3), one at a time under coll_lock (M4). */
static void
drain(int src)
{
    in_t *in = &M.in[src];
    mbox_t *mb = in_mbox(src);
    int took = 0;
    slot_t *s;

    while (next_full(src, &s)) {
        coll_mbox_msg_t m;
        arrive_t a;
        coll_req_t *r;
        int k;

        coll_lock();
        k = (int)(in->rd % MBOX_SLOTS);
        s = &mb->slot[k];
        if (atomic_load_explicit(&s->state, memory_order_acquire) !=
                SLOT_FULL || s->pos != in->rd) {
            coll_unlock();              /* another thread took it */
            continue;
        }
        __atomic_store_n(&in->rd, in->rd + 1, __ATOMIC_RELAXED);
        __atomic_store_n(&in->used, 1, __ATOMIC_RELAXED);
        took++;
        if (!slot_read(src, k, s, &m)) {
            coll_mbox_ack(src, k, TD_ERR_PROTOCOL, 0, 0, NULL, 0);
            coll_unlock();
            td_log_warn("coll: rejected a malformed mailbox message from "
                        "rank %d", src);
            continue;
        }
        r = arrive_locked(&m, &a);      /* acked, or kept (M6) */
        coll_unlock();
        if (r != NULL) {
            coll_req_complete(r, a.code, a.code != TD_OK ? a.msg : NULL);
        }
        if (a.fail) {
            coll_group_fail_quiet(NULL, m.gid, TD_ERR_INVALID, a.msg);
        }
    }
    /* M5: a sender asleep for its ack is poked (outside coll_lock: a
     * poke is a transport send, C1). */
    if (took > 0) {
        atomic_signal_fence(memory_order_seq_cst);      /* M5: no fence */
        if (atomic_load_explicit(&mb->s_sleep, memory_order_relaxed) != 0) {
            send_poke(src);
        }
    }
}

/* The oldest waiting message of SRC's mailbox, if it is for group GID
 * (members' digest DIGEST) and tag TAG: taken (M3) into *M for a receive
 * that nothing posted earlier could match (coll_post_recv; coll_lock
 * held, M4). 1 taken, 0 not (anything odd is left to drain). */
int
coll_mbox_take(int src, uint32_t gid, uint32_t digest, uint32_t tag,
               coll_mbox_msg_t *m)
{
    in_t *in;
    slot_t *s;
    int k;

    if (!in_polled(src) || !next_full(src, &s)) {
        return 0;
    }
    in = &M.in[src];
    k = (int)(in->rd % MBOX_SLOTS);
    if (!slot_read(src, k, s, m) || m->gid != gid || m->digest != digest ||
        m->tag != tag) {
        return 0;
    }
    __atomic_store_n(&in->rd, in->rd + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&in->used, 1, __ATOMIC_RELAXED);
    return 1;
}

int
coll_mbox_from(int src)
{
    return M.on && src >= 0 && src < M.size &&
           __atomic_load_n(&M.in[src].used, __ATOMIC_RELAXED) &&
           __atomic_load_n(&M.base, __ATOMIC_ACQUIRE) != NULL;
}

int
coll_mbox_ready(int src)
{
    slot_t *s;

    return next_full(src, &s);
}

void
coll_mbox_drain(int src)
{
    if (in_polled(src)) {
        drain(src);
    }
}

/* ---- the sender's side -------------------------------------------------- */

/* An ack's fields out of slot S (M1: copied once, then checked). */
static void
ack_read(const slot_t *s, td_status_t *st, uint8_t *dtype, uint8_t *nd,
         int64_t *shape)
{
    *st = (td_status_t)s->ack_status;
    *dtype = s->ack_dtype;
    *nd = s->ack_ndim;
    if (*st != TD_OK && *nd <= TD_MAX_DIMS) {
        memcpy(shape, s->ack_shape, 8 * (size_t)*nd);
    }
    if (*nd > TD_MAX_DIMS || *st > TD_OK) {
        *st = TD_ERR_PROTOCOL;
        *nd = 0;
    }
}

static void
ring_lock(out_t *o)
{
    while (atomic_exchange_explicit(&o->ring, 1, memory_order_acquire)) {
        while (atomic_load_explicit(&o->ring, memory_order_relaxed)) {
            td_cpu_relax();
        }
    }
}

static void
ring_unlock(out_t *o)
{
    atomic_store_explicit(&o->ring, 0, memory_order_release);
}

/* Free the slots whose acks were taken, oldest first (M9; ring held). */
static void
ring_free_locked(out_t *o)
{
    while (o->npend > 0) {
        int k = (int)((o->wr - (uint32_t)o->npend) % MBOX_SLOTS);

        if (!__atomic_load_n(&o->handled[k], __ATOMIC_ACQUIRE)) {
            break;
        }
        __atomic_store_n(&o->handled[k], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&o->lean[k], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&o->npend, o->npend - 1, __ATOMIC_RELAXED);
    }
}

/* Has an ack come back that was not taken yet? (a hint, without the
 * lock: re-checked under it) */
static int
acks_ready(const out_t *o)
{
    uint32_t wr = __atomic_load_n(&o->wr, __ATOMIC_RELAXED);
    int n = __atomic_load_n(&o->npend, __ATOMIC_RELAXED);

    for (uint32_t p = wr - (uint32_t)n; p != wr; p++) {
        int k = (int)(p % MBOX_SLOTS);

        if (atomic_load_explicit(&o->mb->slot[k].state,
                                 memory_order_relaxed) == SLOT_ACKED &&
            !__atomic_load_n(&o->handled[k], __ATOMIC_RELAXED) &&
            !__atomic_load_n(&o->lean[k], __ATOMIC_RELAXED)) {
            return 1;
        }
    }
    return 0;
}

/* Acks that came back into DST's mailbox: their sends taken off the
 * posted list under coll_lock (M4) and completed after it (the one who
 * takes a send off the posted list completes it, C2). */
static void
acks(int dst, out_t *o)
{
    struct {
        coll_req_t *r;
        td_status_t st;
        uint8_t     dtype, nd;
        int64_t     shape[TD_MAX_DIMS];
    } done[MBOX_SLOTS];
    int n = 0;

    coll_lock();
    ring_lock(o);
    /* Slots come back in ring order only: an earlier one may be held. */
    for (uint32_t p = o->wr - (uint32_t)o->npend; p != o->wr; p++) {
        int k = (int)(p % MBOX_SLOTS);
        slot_t *s = &o->mb->slot[k];

        if (__atomic_load_n(&o->handled[k], __ATOMIC_RELAXED) ||
            __atomic_load_n(&o->lean[k], __ATOMIC_RELAXED) ||
            atomic_load_explicit(&s->state, memory_order_acquire) !=
                SLOT_ACKED) {
            continue;                   /* taken, or its thread's (M9) */
        }
        ack_read(s, &done[n].st, &done[n].dtype, &done[n].nd, done[n].shape);
        /* our own copy of what the slot was for, not the peer's */
        done[n].r = coll_posted_take_locked(MSG_ACK, o->gid[k], dst,
                                            o->seq[k], 0);
        n += done[n].r != NULL;
        __atomic_store_n(&o->handled[k], 1, __ATOMIC_RELAXED);
                                                /* freed in ring order */
    }
    ring_free_locked(o);
    ring_unlock(o);
    coll_unlock();
    for (int i = 0; i < n; i++) {
        coll_ack_complete(done[i].r, dst, done[i].st, done[i].dtype,
                              done[i].nd, done[i].shape);
    }
}

/* Can R go to world rank DST through its mailbox? Attaches it at the
 * first send after its offer. */
static out_t *
out_usable(const coll_req_t *r, int dst)
{
    out_t *o;
    int st;

    if (!M.on || dst == M.rank || dst < 0 || dst >= M.size ||
        r->nbytes > MBOX_BODY) {
        return NULL;
    }
    o = &M.out[dst];
    st = atomic_load_explicit(&o->st, memory_order_acquire);
    if (st == OUT_NONE || st == OUT_NO ||
        atomic_load_explicit(&o->tp_busy, memory_order_acquire) != 0 ||
        atomic_load_explicit(&o->dead, memory_order_relaxed)) {
        return NULL;
    }
    if (st == OUT_OFFERED) {
        pthread_mutex_lock(&o->lock);           /* syscalls: not coll_lock */
        if (atomic_load(&o->st) == OUT_OFFERED) {
            attach(dst, o);
        }
        pthread_mutex_unlock(&o->lock);
        if (atomic_load(&o->st) != OUT_ATTACHED) {
            return NULL;
        }
    }
    return o;
}

/* The next slot of O for a send (ring held): its index in *K, or 0
 * (a transport send unacked, M2; every slot pending or held, M3). */
static int
slot_reserve(out_t *o, int *k)
{
    ring_free_locked(o);
    *k = (int)(o->wr % MBOX_SLOTS);
    return atomic_load(&o->tp_busy) == 0 && o->npend < MBOX_SLOTS &&
           atomic_load_explicit(&o->mb->slot[*k].state,
                                memory_order_acquire) != SLOT_FULL;
}

/* Take the next ring position of O for R in slot K, reserved (ring
 * held). */
static uint32_t
slot_take(out_t *o, int k, const coll_req_t *r)
{
    uint32_t pos = o->wr;

    o->gid[k] = r->group_id;            /* our own copy of what it is for */
    o->seq[k] = r->seq;
    __atomic_store_n(&o->wr, pos + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&o->npend, o->npend + 1, __ATOMIC_RELAXED);
    return pos;
}

/* Write R into slot S at ring position POS (M1). All in one go: the
 * receiver polls this line, and a locked instruction between the first
 * store and the state would let it read the line back from under us (a
 * second transfer). */
static void
slot_write(slot_t *s, uint32_t pos, const coll_req_t *r, int fault)
{
    s->pos = pos;
    s->gid = r->group_id;
    s->digest = r->g->digest;
    s->seq = r->seq;
    s->tag = r->tag;
    s->dtype = r->dtype;
    s->ndim = r->ndim;
    s->nbytes = r->nbytes;
    memcpy(s->data, r->shape, 8 * (size_t)r->ndim);
    if (r->nbytes > 0) {
        memcpy(s->data + 8 * (size_t)r->ndim, r->buf, r->nbytes);
    }
    if (fault == TD_TRANSPORT_FAULT_CORRUPT) {
        s->ndim = 0xff;                 /* the receiver must reject it */
    }
    atomic_store_explicit(&s->state, SLOT_FULL, memory_order_release);
}

/* A message is in DST's inbox: poke its waiters if they sleep (M5: no
 * fence; never under coll_lock: a poke is a transport send). */
static void
slot_published(out_t *o, int dst)
{
    atomic_signal_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&o->hdr->sleepers, memory_order_relaxed) != 0) {
        send_poke(dst);
    }
}

/* coll_lock held: R, a send through DST's mailbox, posted (for its ack)
 * before the slot is published, since the ack may come at once. */
static void
post_locked(coll_req_t *r, int dst)
{
    /* relaxed: published to other threads by coll_lock */
    atomic_store_explicit(&r->done, 0, memory_order_relaxed);
    r->status = TD_OK;
    r->err[0] = '\0';
    r->peer = dst;
    r->cma_send = 0;
    atomic_store_explicit(&r->tp_counted, 0, memory_order_relaxed);
    atomic_store_explicit(&r->pending, 1, memory_order_relaxed);
    coll_posted_append_locked(r);
}

/* Post R to DST through its mailbox with TODIST_FAULT's verdict FAULT. */
static int
mbox_send(coll_req_t *r, int dst, out_t *o, int fault)
{
    slot_t *s;
    uint32_t pos;
    int k;

    coll_lock();
    ring_lock(o);
    if (!slot_reserve(o, &k)) {
        ring_unlock(o);
        coll_unlock();
        return 0;                       /* M2, M3: the transport, this time */
    }
    s = &o->mb->slot[k];
    /* Posted first (the ack may come at once), then the slot written in
     * one go: the receiver polls this line, and any locked instruction
     * between the first store and the state would let it read the line
     * back from under us (a second transfer). */
    post_locked(r, dst);
    if (fault == TD_TRANSPORT_FAULT_DROP) {
        ring_unlock(o);
        coll_unlock();                  /* lost: the send times out */
        return 1;
    }
    pos = slot_take(o, k, r);
    slot_write(s, pos, r, fault);
    ring_unlock(o);
    coll_unlock();
    slot_published(o, dst);
    return 1;
}

/* Send R (a p2p send, header fields in R) to world rank DST through its
 * mailbox: 1 when posted so (R in the posted list, completed by the ack),
 * 0: use the transport. */
int
coll_mbox_send(coll_req_t *r, int dst)
{
    out_t *o = out_usable(r, dst);

    return o != NULL && mbox_send(r, dst, o, fault_roll());
}

/* td_send's fast path (M9): R (a p2p send, its seq taken) to world rank
 * DST through its mailbox, this thread polling the slot for the ack.
 * 1: done, R's status and err set; 2: sent and posted (wait for R); 0:
 * not sent (the full path). G: R's group, checked while it spins. */
int
coll_mbox_send_fast(coll_req_t *r, int dst)
{
    out_t *o = out_usable(r, dst);
    slot_t *s;
    double t_first = 0;
    uint32_t pos;
    int fault, k;
    td_status_t st;
    uint8_t dtype, nd;
    int64_t shape[TD_MAX_DIMS];

    if (o == NULL) {
        return 0;
    }
    fault = fault_roll();          /* TODIST_FAULT "mbox" (tests) */
    if (fault != TD_TRANSPORT_FAULT_NONE) {
        return mbox_send(r, dst, o, fault) ? 2 : 0;
    }
    ring_lock(o);                       /* (no posted request: not coll_lock) */
    if (!slot_reserve(o, &k)) {
        ring_unlock(o);
        return 0;
    }
    __atomic_store_n(&o->lean[k], 1, __ATOMIC_RELAXED);
    pos = slot_take(o, k, r);
    ring_unlock(o);
    /* The slot is this thread's (lean) from here: written after the
     * unlock, so that no locked instruction waits for its line to move. */
    s = &o->mb->slot[k];
    slot_write(s, pos, r, 0);
    slot_published(o, dst);
    coll_mbox_fast_count(1);                 /* (whether acked in the spin or not) */
    for (unsigned i = 0; atomic_load_explicit(&s->state,
                                              memory_order_acquire) !=
                         SLOT_ACKED; i++) {
        if ((i & 63) == 63 && (coll_spin_over(&t_first, r->g) ||
                               atomic_load_explicit(&o->dead,
                                                    memory_order_relaxed))) {
            break;
        }
        td_cpu_relax();
    }
    if (atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_ACKED) {
        coll_lock();
        if (atomic_load_explicit(&s->state, memory_order_acquire) !=
                SLOT_ACKED) {
            /* M9: posted before the slot is let go, so its ack finds it */
            post_locked(r, dst);
            __atomic_store_n(&o->lean[k], 0, __ATOMIC_RELAXED);
            coll_unlock();
            return 2;
        }
        coll_unlock();
    }
    ack_read(s, &st, &dtype, &nd, shape);
    __atomic_store_n(&o->handled[k], 1, __ATOMIC_RELEASE);   /* M9 */
    r->status = TD_OK;
    if (st != TD_OK) {
        atomic_store(&r->pending, 1);
        coll_ack_complete(r, dst, st, dtype, nd, shape);
    }
    return 1;
}

/* A transport p2p send to DST begins / ends (M2). */
void
coll_mbox_tp_begin(int dst)
{
    if (M.on && dst >= 0 && dst < M.size) {
        atomic_fetch_add(&M.out[dst].tp_busy, 1);
    }
}

void
coll_mbox_tp_end(int dst)
{
    if (M.on && dst >= 0 && dst < M.size) {
        atomic_fetch_sub(&M.out[dst].tp_busy, 1);
    }
}

void
coll_mbox_peer_dead(int rank)
{
    if (M.on && rank >= 0 && rank < M.size) {
        atomic_store(&M.out[rank].dead, 1);
    }
}

/* ---- polling and sleeping ----------------------------------------------- */

/* Do messages from or to world rank RANK go through mailboxes? (We offer
 * our inbox to every sender, those on other hosts too: only one that
 * wrote into it is known to be on this host.) */
int
coll_mbox_local(int rank)
{
    return M.on && rank >= 0 && rank < M.size &&
           (__atomic_load_n(&M.in[rank].used, __ATOMIC_RELAXED) ||
            atomic_load_explicit(&M.out[rank].st, memory_order_relaxed) ==
                OUT_ATTACHED);
}

int
coll_mbox_active(void)
{
    return atomic_load_explicit(&M.active, memory_order_relaxed);
}

/* Drain our inbox's mailboxes (WHAT & MBOX_POLL_IN) and take the acks
 * of our mailbox sends (WHAT & MBOX_POLL_ACKS). */
void
coll_mbox_poll_some(int what)
{
    int n;

    if (!atomic_load_explicit(&M.active, memory_order_acquire)) {
        return;
    }
    n = (what & MBOX_POLL_ACKS) ?
        atomic_load_explicit(&M.n_out, memory_order_acquire) : 0;
    for (int i = 0; i < n; i++) {
        int dst = M.out_list[i];
        out_t *o = &M.out[dst];

        if (__atomic_load_n(&o->npend, __ATOMIC_RELAXED) > 0 &&
            acks_ready(o)) {
            acks(dst, o);
        }
    }
    n = (what & MBOX_POLL_IN) ?
        atomic_load_explicit(&M.n_in, memory_order_acquire) : 0;
    for (int i = 0; i < n; i++) {
        int src = M.in_list[i];
        slot_t *s;

        if (next_full(src, &s)) {
            drain(src);
        }
    }
}

void
coll_mbox_poll(void)
{
    coll_mbox_poll_some(MBOX_POLL_IN | MBOX_POLL_ACKS);
}

/* A waiter goes to sleep (M5): announced in our inbox and in every
 * mailbox we write. Returns what sleep_end takes back (the inbox and the
 * mailboxes attached so far: more may be attached meanwhile). */
int
coll_mbox_sleep_begin(void)
{
    int n, inbox;

    if (!atomic_load_explicit(&M.active, memory_order_acquire)) {
        return 0;
    }
    inbox = __atomic_load_n(&M.base, __ATOMIC_ACQUIRE) != NULL;
    if (inbox) {
        atomic_fetch_add(&((inbox_hdr_t *)M.base)->sleepers, 1);
    }
    n = atomic_load_explicit(&M.n_out, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        atomic_fetch_add(&M.out[M.out_list[i]].mb->s_sleep, 1);
    }
    atomic_thread_fence(memory_order_seq_cst);
    return n << 1 | inbox;
}

void
coll_mbox_sleep_end(int cookie)
{
    if (cookie & 1) {
        atomic_fetch_sub(&((inbox_hdr_t *)M.base)->sleepers, 1);
    }
    for (int i = 0; i < cookie >> 1; i++) {
        atomic_fetch_sub(&M.out[M.out_list[i]].mb->s_sleep, 1);
    }
}
