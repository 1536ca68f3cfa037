/* shm.c: all_reduce, broadcast, all_gather, reduce_scatter and barrier
 * through one shared-memory segment per group, for groups whose members
 * all run on one host (algorithm "shm"); and the segment of each host of
 * a group that spans hosts, for the hierarchical algorithms (hier.c H8,
 * S9 here).
 *
 * Why: on one node a collective is memory traffic plus synchronization.
 * Through the transport each step is a UCX message (a few hundred ns of
 * software each way, a wake-up when the receiver sleeps); through a
 * segment every member writes its data once, raises a flag, and reads the
 * others' directly, which is how Open MPI's shared-memory path gets its
 * 0.3 us. all_reduce: small vectors (<= SHM_SMALL, n x B <= SHM_SMALL_ALL)
 * take one round: every member reduces all slots itself. Larger ones go
 * in chunks of a slot, two rounds each: member r reduces sub-range r (its
 * own, in place, and every other slot's) and publishes it in its own
 * slot, then everyone copies the sub-ranges out (a reduce-scatter and an
 * all-gather through memory: each member copies (n-1)/n of the data in,
 * 1/n back and (n-1)/n out). The others take one round per slot's worth:
 * the root (broadcast) or every member writes, the others copy out;
 * reduce_scatter's member r reduces its block of every slot in rank order.
 *
 * The segment, made by group rank 0 at the group's first shm collective
 * (a three-message handshake inside that call): a memfd, which members
 * open through /proc/PID/fd/FD while rank 0 holds it open, so it has no
 * name and nothing outlives the processes that map it:
 *   header (magic, token, n, slot bytes; the futex word and sleepers)
 *   n control lines: `post` (round << 32 | call digest) and the
 *                    announced calls (seq + 1, description) of seq % 2
 *   2 data buffers x n slots of `slot` bytes
 *
 * Invariants (S1..S10):
 *  S1 The segment is used only when every member is on rank 0's host
 *     (same kernel boot id), mapped it and checked the token: the
 *     handshake ends with rank 0's decision sent to all, so either all
 *     members use it or none does (then the call runs the algorithm auto
 *     would have picked, and the group never tries again). Auto tries it
 *     on every group it does not run hierarchically (hier.c H1): one that
 *     spans hosts with one member on each pays the handshake once.
 *  S2 Rounds and data epochs are counters every member advances by the
 *     same amounts (a function of the call and the group), so the round a
 *     member waits for is the one its peers post for the same call.
 *  S3 A post carries the call's digest (seq and description); a member
 *     that sees a peer at its round with another digest fails the group
 *     as a mismatch (C5) naming both calls, from the peer's announcement.
 *     A peer already past the round passed this check against our post,
 *     so it made the same call.
 *  S4 Every call on a group with a segment is announced there (op_begin),
 *     so a member in a transport algorithm notices a peer waiting in the
 *     segment for a different call (coll_shm_check, from coll_wait: wait.h's group check).
 *  S5 Data buffers alternate by epoch: a member rewrites buffer b two
 *     epochs later, after a round that every member posts only once it has
 *     finished reading b (so no reader sees a half-overwritten slot).
 *  S6 A post is a release store followed by a plain read of the sleeper
 *     count, with no fence between (a fence would make the poster wait
 *     for its line to leave before it reads the others' posts); a sleeper
 *     raises the count (kept raised until its round is complete), re-
 *     checks the posts, and sleeps first for SHM_NAP_NS only: a post
 *     whose read of the count came before the raise is visible within
 *     nanoseconds, so the check after the nap sees it. Later sleeps are
 *     bounded at SHM_SLEEP_NS; a wake-up is never lost for longer.
 *     A waiter spins only SHM_SPIN_S before yielding its core: with two
 *     members on one core (the scheduler does that for a while now and
 *     then), a longer spin made every round cost it (1 MiB all_reduce on
 *     2 ranks: 460-560 us in about a third of the runs at 50 us of spin,
 *     none in 18 runs at 3 us; yielding with nothing else to run costs a
 *     system call).
 *  S7 A waiter never blocks unbounded: it polls the group's broken state
 *     (a dead member, an abort: C6) and the deadline, and times out
 *     naming the members that did not post, as the transport path does.
 *  S8 An all_reduce of at most SHM_INLINE bytes travels in the member's
 *     control line, next to its post, in the half of the epoch's parity
 *     (S5 holds as for the data buffers): a reader that sees the post has
 *     the data in the same cache line, one transfer instead of two.
 *  S9 A host's segment (hier.c H8) holds the members of one host of a
 *     group, which may span hosts: its handshake is S1's with the host's
 *     first member offering, and the decision taken for all hosts; its
 *     rounds are S2-S7's among those members (errors name their world
 *     ranks; no announcements: a mismatch names the member without its
 *     call). A waiter there yields its core after SHM_HOST_YIELD_S, not
 *     SHM_YIELD_S: the leader it waits for is often on the network for a
 *     chunk's time (~1 ms at 10 Gbit/s), and a member yielding that long
 *     takes the core from the leader and the transport's progress
 *     thread (2 hosts x 2 ranks on 2 cores, 64 MiB all_reduce, loaded:
 *     151-157 ms with 2 ms, 103-105 ms with 20 us; one try each).
 * S10 A member writes 1 + the core it posts from (sched_getcpu; 0
 *     unknown) beside its post, in the line the others poll; a waiter
 *     whose missing member last posted from the waiter's own core yields
 *     at once, without S6's spin: that member cannot post while the
 *     waiter holds the core. When the scheduler puts two members on one
 *     core, each round otherwise cost two spins and two switches (8 B
 *     all_reduce, 2 ranks on one core: 12.3 us a round with 3 us of
 *     spin, 9.2 us with 1 us, 27.7 us with 10 us; on two cores 0.14 us):
 *     the "11 us state" of the benchmarks. A stale core (the member
 *     moved) costs one yield, and is fresh after its next post. Waits
 *     that yielded at once are counted and logged at debug when the
 *     group goes (tests/coll/test_coll.sh reads the count).
 *
 * Thread safety: a group's segment belongs to the thread running its
 * current operation (work.c serializes them). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/syscall.h>

#include "runtime/coll/shm.h"
#include "runtime/coll/conf.h"
#include "runtime/coll/reduce.h"
#include "runtime/coll/tx.h"
#include "runtime/coll/wait.h"
#include "base/clock.h"
#include "base/cpu.h"
#include "base/log.h"

#define SHM_MAGIC      0x746f646973746d31ull   /* "todistm1" */
#define SHM_LINE       128                      /* against false sharing */
#define SHM_SMALL      (16u * 1024u)            /* one round up to here */
#define SHM_INLINE     24                       /* in the control line */
#define SHM_SMALL_ALL  (128u * 1024u)           /* ... and n x B to here */
#define SHM_SLOT_MAX   (1u << 20)
#define SHM_SLOT_MIN   (64u * 1024u)
#define SHM_BUDGET     (4u << 20)               /* n x slot, per buffer */
#define SHM_SPIN_S     3e-6                     /* pure spin this long */
#define SHM_YIELD_S    2e-3                     /* then yield this long */
#define SHM_HOST_YIELD_S 20e-6                  /* (a host's segment: S9) */
#define SHM_SLEEP_NS   1000000                  /* then futex sleeps */
#define SHM_NAP_NS     50000                    /* the first of them (S6) */
#define SHM_LIVE_MAX   32                       /* segments per process */

/* Tags of the handshake (above every algorithm's step tags). */
#define TAG_OFFER  0xfff00001u
#define TAG_REPLY  0xfff00002u
#define TAG_DECIDE 0xfff00003u
#define TAG_HOFFER  0xfff00004u           /* a host's segment (hier.c) */
#define TAG_HREPLY  0xfff00005u
#define TAG_HDECIDE 0xfff00006u

typedef struct {
    uint64_t         magic, token;
    uint32_t         n, slot;
    uint64_t         size;
    char             pad0[SHM_LINE - 32];
    _Atomic uint32_t wake;              /* futex word */
    _Atomic uint32_t sleepers;
    char             pad1[SHM_LINE - 8];
} shm_hdr_t;

/* A member's control lines. The first cache line is the one the others
 * poll: the post and, for a vector of at most SHM_INLINE bytes, the data
 * itself (S8). The announcements, read only when a call looks wrong, are
 * in the second, so writing them does not take the polled line away. */
typedef struct {
    _Atomic uint64_t post;              /* round << 32 | call digest */
    uint8_t          small[2][SHM_INLINE];  /* by epoch parity (S5, S8) */
    _Atomic int32_t  cpu;               /* 1 + where it last posted, 0
                                         * unknown (S10) */
    char             pad0[64 - 8 - 4 - 2 * SHM_INLINE];
    _Atomic uint32_t ann_seq[2];        /* seq + 1 announced in ann[seq%2] */
    coll_desc_t      ann[2];
    char             pad[SHM_LINE - 64 - 8 - 2 * sizeof(coll_desc_t)];
} shm_ctl_t;

struct coll_shm {
    shm_hdr_t  *hdr;
    shm_ctl_t  *ctl;
    uint8_t    *data;                   /* 2 x n x slot */
    size_t      size, slot;
    uint32_t    round;                  /* S2 */
    uint32_t    epoch;
    int         n, me;                  /* its members, our index */
    int         cpu;                    /* 1 + where we last posted (S10) */
    uint64_t    yielded;                /* waits that yielded at once */
    int        *who;                    /* index -> group rank (a host's
                                         * segment); NULL: the same */
};

/* Group rank of member R of segment S. */
static int
grank(const coll_shm_t *s, int r)
{
    return s->who != NULL ? s->who[r] : r;
}

/* The offer rank 0 sends (host byte order: a member on another host,
 * which may differ, stops at BOOT). */
typedef struct {
    char     boot[40];          /* rank 0's kernel boot id: its host */
    uint32_t ok, slot;
    uint64_t token, size;
    int32_t  pid, fd;           /* open it as /proc/PID/fd/FD */
} shm_offer_t;

static int  shm_auto = 1;       /* TODIST_COLL_SHM: auto may pick shm */
static char shm_boot[40];       /* this host's boot id, "" unknown */
static int  shm_oversub;        /* more local ranks than cores */
static atomic_int shm_live;     /* segments mapped here (SHM_LIVE_MAX) */

static void wait_check(td_group_t *g);
static td_status_t round_trip(coll_op_t *op, coll_shm_t *s,
                              uint32_t digest);

void
coll_shm_setup(const td_world_t *w)
{
    const char *s = getenv("TODIST_COLL_SHM");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    shm_auto = !(s != NULL && strcmp(s, "0") == 0);
    shm_boot[0] = '\0';
    if (f != NULL) {
        if (fgets(shm_boot, sizeof(shm_boot), f) == NULL) {
            shm_boot[0] = '\0';
        }
        shm_boot[strcspn(shm_boot, "\n")] = '\0';
        fclose(f);
    }
    shm_oversub = cpus > 0 && w->local_world_size > cpus;
    coll_wait_set_group_check(wait_check);      /* S4 while waiting */
}

const char *
coll_shm_boot_id(void)
{
    return shm_boot;
}

int
coll_shm_eligible(const td_group_t *g)
{
    return shm_auto && g->n > 1 && g->shm_state != SHM_OFF;
}

static size_t
shm_slot_for(int n)
{
    size_t s = SHM_BUDGET / (size_t)n;

    s = s > SHM_SLOT_MAX ? SHM_SLOT_MAX : s < SHM_SLOT_MIN ? SHM_SLOT_MIN : s;
    return s & ~(size_t)4095;
}

static size_t
shm_size_for(int n, size_t slot)
{
    size_t head = sizeof(shm_hdr_t) + (size_t)n * sizeof(shm_ctl_t);

    head = (head + 4095) & ~(size_t)4095;
    return head + 2 * (size_t)n * slot;
}

static void
shm_layout(coll_shm_t *s, void *base, int n)
{
    size_t head = sizeof(shm_hdr_t) + (size_t)n * sizeof(shm_ctl_t);

    s->hdr = base;
    s->ctl = (shm_ctl_t *)((uint8_t *)base + sizeof(shm_hdr_t));
    s->data = (uint8_t *)base + ((head + 4095) & ~(size_t)4095);
}

static uint8_t *
slot_of(const coll_shm_t *s, uint32_t epoch, int n, int r)
{
    return s->data + ((size_t)(epoch & 1) * (size_t)n + (size_t)r) * s->slot;
}

/* Where member R's vector of BYTES for EPOCH is: its control line when
 * it fits there (S8), else its slot. */
static uint8_t *
small_of(const coll_shm_t *s, uint32_t epoch, int n, int r, size_t bytes)
{
    return bytes <= SHM_INLINE ? s->ctl[r].small[epoch & 1]
                               : slot_of(s, epoch, n, r);
}

static void
shm_free(coll_shm_t *s)
{
    if (s != NULL) {
        atomic_fetch_sub(&shm_live, 1);
        munmap(s->hdr, s->size);
        free(s->who);
        free(s);
    }
}

void
coll_shm_detach(td_group_t *g)
{
    uint64_t y = (g->shm != NULL ? g->shm->yielded : 0) +
                 (g->hshm != NULL ? g->hshm->yielded : 0);

    if (g->shm != NULL || g->hshm != NULL) {
        td_log_debug("coll: group %u: %llu waits in a shared segment "
                     "yielded at once, the member waited for on this core "
                     "(S10)", g->id, (unsigned long long)y);
    }
    shm_free(g->shm);
    g->shm = NULL;
    shm_free(g->hshm);
    g->hshm = NULL;
}

/* ---- the handshake (S1) ----------------------------------------------------- */

/* Make a segment for N members of G and the offer of it, into O. */
static int
shm_create(td_group_t *g, int n, shm_offer_t *o, void **base_p)
{
    size_t slot = shm_slot_for(n), size = shm_size_for(n, slot);
    uint64_t rnd = 0;
    shm_hdr_t *h;
    void *base;
    int fd, err;

    if (atomic_load(&shm_live) >= SHM_LIVE_MAX) {
        /* each is up to 8 MiB of memory: many groups use the transport */
        td_log_debug("coll: group %u: %d shared segments mapped already; "
                     "its collectives go through the transport", g->id,
                     SHM_LIVE_MAX);
        return 0;
    }
    if (shm_boot[0] == '\0') {
        td_log_debug("coll: group %u: no boot id to tell hosts apart; its "
                     "collectives go through the transport", g->id);
        return 0;
    }
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        rnd = ((uint64_t)getpid() << 32) ^ (uint64_t)(td_now_s() * 1e9);
    }
    /* Nameless: nothing is left behind whatever happens to the job; the
     * members open it through /proc/PID/fd/FD while we hold it open. */
    fd = memfd_create("todist-coll", MFD_CLOEXEC);
    if (fd < 0) {
        td_log_debug("coll: memfd_create: %s: group %u runs collectives "
                     "through the transport", strerror(errno), g->id);
        return 0;
    }
    /* Reserve the pages now (ENOSPC here, not SIGBUS on a later touch). */
    err = posix_fallocate(fd, 0, (off_t)size);
    base = err == 0 ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED,
                           fd, 0) : MAP_FAILED;
    if (base == MAP_FAILED) {
        td_log_info("coll: group %u: no shared segment of %zu bytes (%s); "
                    "its collectives go through the transport", g->id, size,
                    strerror(err != 0 ? err : errno));
        close(fd);
        return 0;
    }
    h = base;
    h->n = (uint32_t)n;
    h->slot = (uint32_t)slot;
    h->size = size;
    h->token = rnd ^ 0x5bd1e9955bd1e995ull;
    h->magic = SHM_MAGIC;
    o->ok = 1;
    o->slot = (uint32_t)slot;
    o->token = h->token;
    o->size = size;
    memcpy(o->boot, shm_boot, sizeof(o->boot));
    o->pid = (int32_t)getpid();
    o->fd = fd;
    *base_p = base;
    return 1;
}

/* Map the segment of N members offered by world rank OWNER in O. */
static int
shm_map_offer(td_group_t *g, int n, int owner, const shm_offer_t *o,
              void **base_p)
{
    char path[64];
    struct stat st;
    shm_hdr_t *h;
    void *base;
    int fd;

    /* Another host first: opening /proc/PID/fd/FD there would reach an
     * unrelated process's file (a device, say). */
    if (shm_boot[0] == '\0' ||
        strncmp(o->boot, shm_boot, sizeof(shm_boot)) != 0) {
        td_log_debug("coll: group %u: rank %d's segment is on another host",
                      g->id, owner);
        return 0;
    }
    if (!o->ok || o->pid <= 0 || o->fd < 0 ||
        o->size != shm_size_for(n, o->slot) ||
        atomic_load(&shm_live) >= SHM_LIVE_MAX) {
        return 0;
    }
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)o->pid, (int)o->fd);
    fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        td_log_debug("coll: group %u: cannot open rank %d's segment (%s: "
                     "%s; another node or pid namespace?)", g->id,
                     owner, path, strerror(errno));
        return 0;
    }
    /* (opened non-blocking, a regular file only: a damaged offer must
     * not open someone's FIFO or device and wait on it) */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size != o->size) {
        close(fd);
        return 0;
    }
    base = mmap(NULL, o->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        return 0;
    }
    h = base;
    /* The same pid and fd in another process (another node, another pid
     * namespace): not rank 0's segment. */
    if (h->magic != SHM_MAGIC || h->token != o->token ||
        h->n != (uint32_t)n || h->slot != o->slot) {
        munmap(base, o->size);
        return 0;
    }
    *base_p = base;
    return 1;
}

static uint64_t
mix64(uint64_t h)
{
    h ^= h >> 31;
    h *= 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    return h;
}

/* The call's digest (S3): every field of its description and its seq,
 * mixed a word at a time (a byte-wise hash cost 155 instructions a call,
 * a tenth of an 8 B all_reduce's). */
static uint32_t
call_digest(uint32_t seq, const coll_desc_t *d)
{
    uint64_t h = (uint64_t)seq << 32 | (uint64_t)d->kind << 24 |
                 (uint64_t)d->dtype << 16 | (uint64_t)d->op << 8 | d->algo;

    h = mix64(h);
    h = mix64(h ^ d->count);
    h = mix64(h ^ (uint32_t)d->root);
    return (uint32_t)(h ^ h >> 32);
}

void
coll_shm_announce(td_group_t *g, uint32_t seq, const coll_desc_t *d)
{
    shm_ctl_t *c;
    int k = (int)(seq & 1);

    if (g->shm == NULL) {
        return;
    }
    c = &g->shm->ctl[g->me];
    atomic_store_explicit(&c->ann_seq[k], 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    c->ann[k] = *d;
    atomic_store_explicit(&c->ann_seq[k], seq + 1, memory_order_release);
}

/* Group rank R's announced call at SEQ (a seqlock read); 0: none. */
static int
announced(const coll_shm_t *s, int r, uint32_t seq, coll_desc_t *out)
{
    shm_ctl_t *c = &s->ctl[r];
    int k = (int)(seq & 1);
    uint32_t v1 = atomic_load_explicit(&c->ann_seq[k], memory_order_acquire);

    if (v1 != seq + 1) {
        return 0;
    }
    memcpy(out, (const void *)&c->ann[k], sizeof(*out));
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&c->ann_seq[k], memory_order_relaxed) == v1;
}

static td_status_t
fail_mismatch(coll_op_t *op, int r, const coll_desc_t *theirs)
{
    char msg[COLL_ERR_MAX];

    if (theirs != NULL) {
        coll_mismatch_text(msg, sizeof(msg), op->g->id, op->seq,
                           op->g->ranks[r], coll_world_rank(), theirs,
                           &op->desc);
    } else {
        snprintf(msg, sizeof(msg), "coll: mismatched collectives in group %u "
                 "at call #%u: rank %d made another call than rank %d's %s",
                 op->g->id, op->seq, op->g->ranks[r], coll_world_rank(),
                 coll_kind_name(op->desc.kind));
    }
    coll_group_fail(op->g, TD_ERR_INVALID, 1, op->seq, msg);
    return td_error(TD_ERR_INVALID, "%s", msg);
}

td_status_t
coll_shm_check(td_group_t *g, uint32_t seq, const coll_desc_t *mine)
{
    coll_desc_t d;

    if (g->shm == NULL || g->me < 0) {
        return TD_OK;
    }
    for (int r = 0; r < g->n; r++) {
        if (r != g->me && announced(g->shm, r, seq, &d) &&
            memcmp(&d, mine, sizeof(d)) != 0) {
            coll_op_t op = { .g = g, .desc = *mine, .seq = seq };

            return fail_mismatch(&op, r, &d);
        }
    }
    return TD_OK;
}

/* The wait's check of a running call (wait.h): S4. */
static void
wait_check(td_group_t *g)
{
    (void)coll_shm_check(g, g->cur_seq, &g->cur_desc);
}

/* A handshake's members and tags (S1, S9): member i is group rank
 * WHO[i] (WHO NULL: i itself), member 0 the head that offers. */
typedef struct {
    const int  *who;
    int         n;
    uint32_t    offer, reply, decide;
    const char *oom;                /* the others' error if we cannot */
} handshake_t;

static int
hs_rank(const handshake_t *h, int i)
{
    return h->who != NULL ? h->who[i] : i;
}

/* The head's side: a segment for H's members if TRY (into OFFER,
 * *BASE_P; *HAVE_P), offered to every member, their answers in;
 * *DECISION: HAVE and every answer yes, through AGREE where given, sent
 * to every member. Every step posted is waited for. */
static td_status_t
handshake_head(coll_op_t *op, const handshake_t *h, int try,
               shm_offer_t *offer, void **base_p, int *have_p,
               coll_shm_agree_fn agree, void *arg, uint32_t *decision)
{
    td_group_t *g = op->g;
    int n = h->n, have;
    coll_req_t *rq = calloc((size_t)(2 * n), sizeof(coll_req_t));
    coll_req_t **wait = calloc((size_t)(2 * n), sizeof(coll_req_t *));
    uint32_t *answers = calloc((size_t)n, sizeof(uint32_t));
    td_status_t st = TD_OK, w;

    if (rq == NULL || wait == NULL || answers == NULL) {
        free(rq);
        free(wait);
        free(answers);
        /* the others wait for our offer: tell them (C6) */
        coll_group_fail(g, TD_ERR_NO_MEMORY, 1, op->seq, h->oom);
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    have = try && shm_create(g, n, offer, base_p);
    *have_p = have;
    for (int i = 1; i < n && st == TD_OK; i++) {
        st = coll_irecv(op, &rq[2 * i], hs_rank(h, i), h->reply, &answers[i],
                        4);
        wait[2 * i] = st == TD_OK ? &rq[2 * i] : NULL;
        if (st == TD_OK) {
            st = coll_isend(op, &rq[2 * i + 1], hs_rank(h, i), h->offer,
                            offer, sizeof(*offer));
            wait[2 * i + 1] = st == TD_OK ? &rq[2 * i + 1] : NULL;
        }
    }
    w = coll_step_wait(op, wait, 2 * n);
    st = st != TD_OK ? st : w;
    if (have) {
        close(offer->fd);            /* every member mapped it, or won't */
    }
    *decision = (uint32_t)have;
    for (int i = 1; i < n; i++) {
        *decision &= answers[i] == 1;
    }
    if (st == TD_OK && agree != NULL) {
        st = agree(op, arg, decision);
    }
    memset(wait, 0, sizeof(coll_req_t *) * (size_t)(2 * n));
    for (int i = 1; i < n && st == TD_OK; i++) {
        st = coll_isend(op, &rq[2 * i], hs_rank(h, i), h->decide, decision,
                        4);
        wait[2 * i] = st == TD_OK ? &rq[2 * i] : NULL;
    }
    w = coll_step_wait(op, wait, 2 * n);
    st = st != TD_OK ? st : w;
    free(rq);
    free(wait);
    free(answers);
    return st;
}

/* A member's side: the head's offer in, mapped if TRY (*BASE_P;
 * *HAVE_P), the answer out and the decision in. */
static td_status_t
handshake_member(coll_op_t *op, const handshake_t *h, int try,
                 shm_offer_t *offer, void **base_p, int *have_p,
                 uint32_t *decision)
{
    td_group_t *g = op->g;
    int head = hs_rank(h, 0);
    uint32_t mine;
    coll_req_t rq[2];
    coll_req_t *w[2] = { &rq[0], &rq[1] };
    td_status_t st, w_st;

    st = coll_sendrecv(op, -1, NULL, 0, head, offer, sizeof(*offer),
                       h->offer);
    if (st != TD_OK) {
        return st;
    }
    *have_p = try && shm_map_offer(g, h->n, g->ranks[head], offer, base_p);
    mine = (uint32_t)*have_p;
    st = coll_irecv(op, &rq[0], head, h->decide, decision, 4);
    if (st != TD_OK) {
        return st;
    }
    st = coll_isend(op, &rq[1], head, h->reply, &mine, 4);
    if (st != TD_OK) {
        w[1] = NULL;
    }
    w_st = coll_step_wait(op, w, 2);
    return st != TD_OK ? st : w_st;
}

/* The handshake inside OP, the group's first shm call; *USABLE: 1 when
 * the segment is mapped by every member. Rank 0 offers, every member
 * answers whether it mapped it, rank 0 decides for all (S1). */
td_status_t
coll_shm_attach(coll_op_t *op, int *usable)
{
    td_group_t *g = op->g;
    void *base = NULL;
    shm_offer_t offer;
    handshake_t hs = { NULL, g->n, TAG_OFFER, TAG_REPLY, TAG_DECIDE,
                       "coll: out of memory offering the group's shared "
                       "segment" };
    uint32_t decision = 1;
    td_status_t st;
    int have = 0;

    *usable = g->shm_state == SHM_ON;
    if (g->shm_state != SHM_UNTRIED) {
        return TD_OK;
    }
    memset(&offer, 0, sizeof(offer));
    if (g->me == 0) {
        st = handshake_head(op, &hs, 1, &offer, &base, &have, NULL, NULL,
                            &decision);
    } else {
        st = handshake_member(op, &hs, 1, &offer, &base, &have, &decision);
    }
    if (st == TD_OK && decision == 1 && have) {
        coll_shm_t *s = calloc(1, sizeof(*s));

        if (s != NULL) {
            atomic_fetch_add(&shm_live, 1);
            shm_layout(s, base, g->n);
            s->size = offer.size;
            s->slot = offer.slot;
            s->n = g->n;
            s->me = g->me;
            g->shm = s;
            g->shm_state = SHM_ON;
            coll_shm_announce(g, op->seq, &op->desc);
            *usable = 1;
            td_log_debug("coll: group %u: collectives through shared memory "
                         "(%zu bytes, slots of %zu)", g->id, s->size, s->slot);
            return TD_OK;
        }
        /* cannot happen in practice; the others would use it: fail loudly */
        munmap(base, offer.size);
        coll_group_fail(g, TD_ERR_NO_MEMORY, 1, op->seq, "coll: out of "
                        "memory attaching the group's shared segment");
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    if (have) {
        munmap(base, offer.size);
    }
    if (st == TD_OK) {
        g->shm_state = SHM_OFF;
        td_log_debug("coll: group %u: no shared segment on every member; "
                     "collectives go through the transport", g->id);
    }
    return st;
}

/* ---- a host's segment (hier.c H8) ------------------------------------------- */

size_t
coll_shm_slot_for(int n)
{
    return shm_slot_for(n);
}

/* The host's handshake: WHO[0] (the head) offers, the others answer,
 * AGREE turns the head's answer into the decision for all hosts, the
 * head tells its members; every member maps it or none does (S1). */
td_status_t
coll_shm_host_attach(coll_op_t *op, const int *who, int L, int idx,
                     coll_shm_agree_fn agree, void *arg, int *on,
                     coll_shm_t **seg_p)
{
    td_group_t *g = op->g;
    void *base = NULL;
    shm_offer_t offer;
    handshake_t hs = { who, L, TAG_HOFFER, TAG_HREPLY, TAG_HDECIDE,
                       "coll: out of memory offering a host's shared "
                       "segment" };
    uint32_t decision = 0;
    td_status_t st;
    int have = 0;

    *on = 0;
    *seg_p = NULL;
    memset(&offer, 0, sizeof(offer));
    if (idx == 0) {
        st = handshake_head(op, &hs, shm_auto, &offer, &base, &have, agree,
                            arg, &decision);
    } else {
        st = handshake_member(op, &hs, shm_auto, &offer, &base, &have,
                              &decision);
    }
    if (st == TD_OK && decision == 1 && have) {
        coll_shm_t *s = calloc(1, sizeof(*s));
        int *w = malloc(sizeof(int) * (size_t)L);

        if (s != NULL && w != NULL) {
            atomic_fetch_add(&shm_live, 1);
            memcpy(w, who, sizeof(int) * (size_t)L);
            shm_layout(s, base, L);
            s->size = offer.size;
            s->slot = offer.slot;
            s->n = L;
            s->me = idx;
            s->who = w;
            *seg_p = s;
            *on = 1;
            td_log_debug("coll: group %u: the %d members of this host meet in "
                         "a shared segment (%zu bytes, slots of %zu)", g->id,
                         L, s->size, s->slot);
            return TD_OK;
        }
        free(s);
        free(w);
        munmap(base, offer.size);
        coll_group_fail(g, TD_ERR_NO_MEMORY, 1, op->seq, "coll: out of "
                        "memory attaching a host's shared segment");
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    if (have) {
        munmap(base, offer.size);
    }
    *on = st == TD_OK && decision == 1;      /* (a host of one: no map) */
    return st;
}

/* ---- rounds of a host's segment (hier.c) ------------------------------------ */

uint8_t *
coll_shm_fill(coll_shm_t *s, int r)
{
    return slot_of(s, s->epoch, s->n, r);
}

const uint8_t *
coll_shm_read(const coll_shm_t *s, int r)
{
    return slot_of(s, s->epoch - 1, s->n, r);
}

size_t
coll_shm_slot_bytes(const coll_shm_t *s)
{
    return s->slot;
}

td_status_t
coll_shm_host_round(coll_op_t *op, coll_shm_t *s)
{
    td_status_t st = round_trip(op, s, call_digest(op->seq, &op->desc));

    s->epoch++;                   /* one epoch a round (S5) */
    return st;
}

/* ---- rounds ------------------------------------------------------------------ */

static long
futex(_Atomic uint32_t *addr, int cmd, uint32_t val,
      const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, cmd, val, ts, NULL, 0);
}

static void
post(coll_shm_t *s, int me, uint32_t round, uint32_t digest)
{
    /* S10: our core, in the line the others poll anyway */
    s->cpu = sched_getcpu() + 1;                /* (-1: unknown, 0) */
    atomic_store_explicit(&s->ctl[me].cpu, s->cpu, memory_order_relaxed);
    /* S6: a release store and a plain read of the sleepers, no fence:
     * the poller's read of the posts need not wait for ours to leave */
    atomic_store_explicit(&s->ctl[me].post, (uint64_t)round << 32 | digest,
                          memory_order_release);
    atomic_signal_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&s->hdr->sleepers, memory_order_relaxed) != 0) {
        atomic_fetch_add(&s->hdr->wake, 1);
        futex(&s->hdr->wake, FUTEX_WAKE, INT_MAX, NULL);
    }
}

/* Which members have not posted ROUND: -1 when all have; -2 - r when
 * member r posted it for another call (S3). */
static int
first_missing(const coll_shm_t *s, int n, int me, uint32_t round,
              uint32_t digest)
{
    int missing = -1;

    for (int r = 0; r < n; r++) {
        uint64_t v;

        if (r == me) {
            continue;
        }
        v = atomic_load_explicit(&s->ctl[r].post, memory_order_acquire);
        if ((int32_t)((uint32_t)(v >> 32) - round) < 0) {
            missing = missing < 0 ? r : missing;
        } else if ((uint32_t)(v >> 32) == round && (uint32_t)v != digest) {
            /* (a member past ROUND saw our post with its own digest) */
            return -2 - r;
        }
    }
    return missing;
}

/* Wait for everyone's post of ROUND (S6, S7); *ASLEEP: we raised the
 * sleepers count (kept raised until the caller lowers it). */
static td_status_t
round_wait(coll_op_t *op, coll_shm_t *s, uint32_t digest, uint32_t round,
           int *asleep)
{
    td_group_t *g = op->g;
    double t0 = 0, now;
    unsigned spins = 0;
    int m, shared = 0;

    for (;;) {
        m = first_missing(s, s->n, s->me, round, digest);
        if (m == -1) {
            return TD_OK;
        }
        if (m <= -2) {
            coll_desc_t d;
            int r = -2 - m;

            /* (a host's segment carries no announcements: S4) */
            return fail_mismatch(op, grank(s, r),
                                 s->who == NULL && announced(s, r, op->seq, &d)
                                 ? &d : NULL);
        }
        if (__atomic_load_n(&g->broken, __ATOMIC_ACQUIRE) != TD_OK) {
            return coll_group_check(g);
        }
        /* S10: a member that last posted from our core cannot post
         * while we spin here */
        if (!shared && m >= 0 && s->cpu > 0 &&
            atomic_load_explicit(&s->ctl[m].cpu, memory_order_relaxed) ==
            s->cpu) {
            shared = 1;
            s->yielded++;
        }
        if ((++spins & 63) != 0 && !shm_oversub && !shared) {
            td_cpu_relax();
            continue;
        }
        now = td_now_s();
        if (t0 == 0) {
            t0 = now;
            if (op->deadline == 0) {
                op->deadline = now + coll_timeout();    /* (coll_op_begin) */
            }
        }
        if (coll_stopped()) {
            return td_error(TD_ERR_CANCELED, "coll: the runtime shut down "
                            "with this operation pending");
        }
        if (now > op->deadline) {
            char who[160], msg[COLL_ERR_MAX];
            size_t k = 0;

            who[0] = '\0';
            for (int r = 0; r < s->n && k < sizeof(who); r++) {
                uint64_t v = atomic_load(&s->ctl[r].post);

                if (r != s->me &&
                    (int32_t)((uint32_t)(v >> 32) - round) < 0) {
                    int w = snprintf(who + k, sizeof(who) - k, "%s%d",
                                     k ? ", " : "", g->ranks[grank(s, r)]);

                    k += w > 0 ? (size_t)w : 0;
                }
            }
            snprintf(msg, sizeof(msg), "coll: %s timed out after %.1f s on "
                     "rank %d waiting for rank(s) %s",
                     coll_kind_name(op->desc.kind), coll_timeout(),
                     coll_world_rank(), who);
            coll_group_fail(g, TD_ERR_TIMEOUT, 1, op->seq, msg);
            return td_error(TD_ERR_TIMEOUT, "%s", msg);
        }
        if (now - t0 < SHM_SPIN_S && !shm_oversub && !shared) {
            continue;
        }
        if (now - t0 < (s->who != NULL ? SHM_HOST_YIELD_S : SHM_YIELD_S)) {
            sched_yield();
            continue;
        }
        /* Long wait: sleep on the futex word (bounded, S6/S7). The first
         * sleep after raising the count is a nap: a post that read the
         * count just before (no fence, S6) is seen after it. */
        {
            uint32_t w = atomic_load(&s->hdr->wake);
            struct timespec ts = { 0, *asleep ? SHM_SLEEP_NS : SHM_NAP_NS };

            if (!*asleep) {
                atomic_fetch_add(&s->hdr->sleepers, 1);
                *asleep = 1;
            }
            if (first_missing(s, s->n, s->me, round, digest) >= 0) {
                futex(&s->hdr->wake, FUTEX_WAIT, w, &ts);
            }
        }
    }
}

/* Post our round and wait for everyone's (S6, S7). */
static td_status_t
round_trip(coll_op_t *op, coll_shm_t *s, uint32_t digest)
{
    uint32_t round = ++s->round;
    int asleep = 0;
    td_status_t st;

    post(s, s->me, round, digest);
    st = round_wait(op, s, digest, round, &asleep);
    if (asleep) {
        atomic_fetch_sub(&s->hdr->sleepers, 1);
    }
    return st;
}

/* ---- the collectives ------------------------------------------------------------- */

td_status_t
coll_barrier_shm(coll_op_t *op)
{
    return round_trip(op, op->g->shm, call_digest(op->seq, &op->desc));
}

td_status_t
coll_all_reduce_shm(coll_op_t *op, void *buf, size_t count)
{
    td_group_t *g = op->g;
    coll_shm_t *s = g->shm;
    int n = g->n, me = g->me;
    size_t es = op->esize, bytes = count * es;
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    uint32_t digest = call_digest(op->seq, &op->desc);
    td_status_t st;

    if (bytes <= SHM_SMALL && bytes * (size_t)n <= SHM_SMALL_ALL) {
        /* One round: every member reduces every slot, in rank order, so
         * all get the same bits (n x B read by each: only while small). */
        uint32_t e = s->epoch++;

        memcpy(small_of(s, e, n, me, bytes), buf, bytes);
        if ((st = round_trip(op, s, digest)) != TD_OK) {
            return st;
        }
        if (me != 0) {
            memcpy(buf, small_of(s, e, n, 0, bytes), bytes);
        }
        for (int r = 1; r < n; r++) {
            coll_reduce_into(buf, small_of(s, e, n, r, bytes), count, dt,
                             rop);
        }
        if (rop == TD_REDUCE_AVG) {
            coll_divide(buf, count, dt, n);
        }
        return TD_OK;
    }
    for (size_t off = 0, ce = s->slot / es; off < count; off += ce) {
        size_t c = count - off < ce ? count - off : ce;
        size_t lo = c * (size_t)me / (size_t)n;
        size_t hi = c * (size_t)(me + 1) / (size_t)n;
        uint8_t *mine = (uint8_t *)buf + (off + lo) * es;
        uint32_t e = s->epoch++;

        /* The sub-ranges the others reduce; ours stays in BUF. */
        memcpy(slot_of(s, e, n, me), (uint8_t *)buf + off * es, lo * es);
        memcpy(slot_of(s, e, n, me) + hi * es, (uint8_t *)buf + (off + hi) * es,
               (c - hi) * es);
        if ((st = round_trip(op, s, digest)) != TD_OK) {
            return st;
        }
        /* Sub-range ME: ours, then the others' in rank order (one member
         * reduces each sub-range, so all get the same bits), published in
         * our slot. */
        for (int r = 0; r < n; r++) {
            if (r != me) {
                coll_reduce_into(mine, slot_of(s, e, n, r) + lo * es,
                                 hi - lo, dt, rop);
            }
        }
        if (rop == TD_REDUCE_AVG) {
            coll_divide(mine, hi - lo, dt, n);
        }
        memcpy(slot_of(s, e, n, me) + lo * es, mine, (hi - lo) * es);
        if ((st = round_trip(op, s, digest)) != TD_OK) {
            return st;
        }
        for (int r = 0; r < n; r++) {
            size_t rlo = c * (size_t)r / (size_t)n;
            size_t rhi = c * (size_t)(r + 1) / (size_t)n;

            if (r != me) {
                memcpy((uint8_t *)buf + (off + rlo) * es,
                       slot_of(s, e, n, r) + rlo * es, (rhi - rlo) * es);
            }
        }
    }
    return TD_OK;
}

/* The root writes a slot's worth, one round, the others copy it out (S5:
 * the root rewrites that buffer two epochs on, after a round every reader
 * posts only once it has copied). */
td_status_t
coll_broadcast_shm(coll_op_t *op, void *buf, size_t nbytes)
{
    td_group_t *g = op->g;
    coll_shm_t *s = g->shm;
    int n = g->n, me = g->me, root = op->desc.root;
    uint32_t digest = call_digest(op->seq, &op->desc);
    size_t off = 0;
    td_status_t st;

    do {
        size_t c = nbytes - off < s->slot ? nbytes - off : s->slot;
        uint32_t e = s->epoch++;

        if (me == root) {
            memcpy(slot_of(s, e, n, root), (uint8_t *)buf + off, c);
        }
        if ((st = round_trip(op, s, digest)) != TD_OK) {
            return st;
        }
        if (me != root) {
            memcpy((uint8_t *)buf + off, slot_of(s, e, n, root), c);
        }
        off += c;
    } while (off < nbytes);
    return TD_OK;
}

/* Every member writes a slot's worth of its block, one round, everyone
 * copies the others' out. */
td_status_t
coll_all_gather_shm(coll_op_t *op, void *out, const void *in, size_t nbytes)
{
    td_group_t *g = op->g;
    coll_shm_t *s = g->shm;
    int n = g->n, me = g->me;
    uint32_t digest = call_digest(op->seq, &op->desc);
    uint8_t *o = out;
    size_t off = 0;
    td_status_t st;

    if (nbytes > 0) {
        memmove(o + (size_t)me * nbytes, in, nbytes);
    }
    do {
        size_t c = nbytes - off < s->slot ? nbytes - off : s->slot;
        uint32_t e = s->epoch++;

        memcpy(slot_of(s, e, n, me), o + (size_t)me * nbytes + off, c);
        if ((st = round_trip(op, s, digest)) != TD_OK) {
            return st;
        }
        for (int r = 0; r < n; r++) {
            if (r != me) {
                memcpy(o + (size_t)r * nbytes + off, slot_of(s, e, n, r), c);
            }
        }
        off += c;
    } while (off < nbytes);
    return TD_OK;
}

/* Every member writes the same stretch of each of its n blocks, one
 * round, member r reduces stretch r of every slot in rank order into its
 * output. */
td_status_t
coll_reduce_scatter_shm(coll_op_t *op, void *out, const void *in,
                        size_t count)
{
    td_group_t *g = op->g;
    coll_shm_t *s = g->shm;
    int n = g->n, me = g->me;
    size_t es = op->esize, ce = s->slot / ((size_t)n * es), off = 0;
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    uint32_t digest = call_digest(op->seq, &op->desc);
    const uint8_t *src = in;
    uint8_t *o = out;
    td_status_t st;

    if (ce == 0) {                 /* cannot happen: slots >= 64 KiB */
        return td_error(TD_ERR_INVALID, "coll: reduce_scatter: %d members "
                        "do not fit the shared slots", n);
    }
    do {
        size_t c = count - off < ce ? count - off : ce;
        uint32_t e = s->epoch++;
        uint8_t *mine = slot_of(s, e, n, me);

        for (int b = 0; b < n; b++) {
            memcpy(mine + (size_t)b * c * es,
                   src + ((size_t)b * count + off) * es, c * es);
        }
        if ((st = round_trip(op, s, digest)) != TD_OK) {
            return st;
        }
        memcpy(o + off * es, slot_of(s, e, n, 0) + (size_t)me * c * es,
               c * es);
        for (int r = 1; r < n; r++) {
            coll_reduce_into(o + off * es,
                             slot_of(s, e, n, r) + (size_t)me * c * es, c,
                             dt, rop);
        }
        if (rop == TD_REDUCE_AVG) {
            coll_divide(o + off * es, c, dt, n);
        }
        off += c;
    } while (off < count);
    return TD_OK;
}
