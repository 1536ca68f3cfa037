/* ucx_transport/shm_mbox.h: mailboxes in shared memory between ranks of
 * one host, the ring under the collectives' point-to-point channel
 * (runtime/coll/mbox.c) and RPC's small messages. Internal, not installed.
 *
 * A td__mbox_t is one set of mailboxes: our inbox (a memfd holding a
 * mailbox per world rank that may write to us) and our mailbox in each
 * peer's inbox we attached. A mailbox is a ring of TD__MBOX_SLOTS slots;
 * a slot carries a message (a few words the user names, a length, and up
 * to TD__MBOX_DATA bytes) one way and an ack (a status, two bytes and
 * TD__MBOX_EXT words) back. This module owns the memory, the offer and its
 * checks, the ring positions and the sleep announcements; what a message
 * means, who waits for it and which lock orders it against other traffic
 * are the user's (coll: match.h's coll_lock, M4).
 *
 * Invariants (B1..B8; a user's own invariants build on them):
 *  B1 A slot is the sender's when FREE or ACKED, the receiver's when FULL.
 *     The owner writes the fields, then the state (release); the other
 *     side reads the state (acquire), then copies the fields once and
 *     checks them before use (a peer's memory is not trusted).
 *  B2 Slots are written and consumed in ring order: the receiver takes
 *     slot pos % TD__MBOX_SLOTS only when its pos is the next one (rd), so
 *     a reused slot is never read twice; a sender whose next slot is still
 *     held uses another channel (td__mbox_slot_reserve says no).
 *  B3 A sender's ring (wr, npend, handled, lean, what each slot is for) is
 *     under that mailbox's spinlock (td__mbox_ring_lock); a receiver's
 *     position (rd) under whatever lock its user serializes draining with.
 *  B4 A slot is freed (its position given back) only once its ack was
 *     taken (handled), oldest first; a freed slot keeps its ACKED state
 *     (B1: the sender's), so freeing writes nothing the receiver polls.
 *  B5 Only a mailbox the receiver offered is written: the offer (pid, fd,
 *     a random token, the boot id's hash, the inbox's size) reaches the
 *     sender through a channel only members of the job can write (the
 *     transport's job tag); the sender maps /proc/PID/fd/FD only on its
 *     own boot id, only a regular file of the offered size whose header
 *     holds the offered token, and only when every slot of its mailbox is
 *     FREE. A process outside the job cannot learn the token, so it can
 *     neither be offered nor write a slot the receiver polls (the memfd
 *     is reachable only through the receiver's /proc entry, which needs
 *     its user's ptrace rights).
 *  B6 Sleepers are announced (td__mbox_sleep_begin) before a waiter's
 *     last poll; a writer reads the announcement after its write, with no
 *     fence, and wakes a sleeper through its own channel. A store is seen
 *     within nanoseconds; the waiter's bounded first nap covers the rest.
 *  B7 Mappings live until the next td__mbox_setup of the same set (a
 *     progress thread may still look at a mailbox after shutdown); a dead
 *     peer's mailboxes are skipped (dead), never unmapped under a poller.
 *  B8 Bounded: TD__MBOX_SLOTS slots per ordered pair, TD__MBOX_DATA bytes
 *     per message, worlds of at most TD__MBOX_WORLD_MAX ranks (larger
 *     ones get no mailboxes).
 *
 * Thread safety: every function is thread-safe unless it says which lock
 * its caller holds. */
#ifndef TD_UCX_TRANSPORT_SHM_MBOX_H
#define TD_UCX_TRANSPORT_SHM_MBOX_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <todist/status.h>
#include "base/cpu.h"

#define TD__MBOX_SLOTS       8
#define TD__MBOX_WORLD_MAX   4096
#define TD__MBOX_DATA        (64 + 4096)   /* bytes a message carries */
#define TD__MBOX_EXT         8             /* int64 words an ack carries */
#define TD__MBOX_OFFER_BYTES 32

enum { TD__MBOX_FREE = 0, TD__MBOX_FULL = 1, TD__MBOX_ACKED = 2 };

/* One slot. A small message is one cache line: the control fields, then
 * the first bytes of its data. */
typedef struct {
    _Atomic uint32_t state;            /* B1 */
    uint32_t pos;                      /* ring position (B2) */
    uint32_t w[4];                     /* the sender's words */
    uint64_t len;                      /* the sender's length */
    uint8_t  b[2];                     /* the sender's bytes */
    uint8_t  ack_b[2];                 /* the receiver's bytes */
    int32_t  ack_status;
    uint8_t  data[TD__MBOX_DATA];
    int64_t  ack_ext[TD__MBOX_EXT];    /* the receiver's words */
} __attribute__((aligned(64))) td__mbox_slot_t;

typedef struct {
    _Atomic uint32_t s_sleep;          /* the sender's waiters asleep (B6) */
    uint8_t  pad[60];
    td__mbox_slot_t slot[TD__MBOX_SLOTS];
} __attribute__((aligned(64))) td__mbox_ring_t;

typedef struct {
    uint64_t magic, token;
    uint32_t nworld, mbox_bytes;
    _Atomic uint32_t sleepers;         /* the receiver's waiters asleep */
} td__mbox_inbox_hdr_t;

/* A sender's mailbox in our inbox. */
typedef struct {
    int      offered;                  /* polled (in in_list) */
    int      used;                     /* it wrote to us: on this host */
    uint32_t rd;                       /* next ring position (B3) */
} td__mbox_in_t;

enum { TD__MBOX_OUT_NONE = 0, TD__MBOX_OUT_OFFERED, TD__MBOX_OUT_ATTACHED,
       TD__MBOX_OUT_NO };

/* Our mailbox in a receiver's inbox. */
typedef struct {
    pthread_mutex_t lock;              /* the offer and attaching */
    _Atomic int     st;                /* TD__MBOX_OUT_* */
    int32_t         pid, fd;           /* the offer */
    uint64_t        token, size;
    td__mbox_inbox_hdr_t *hdr;         /* mapped: the inbox's first page */
    td__mbox_ring_t *mb;               /* mapped: our mailbox in it */
    size_t          mb_map;            /* its mapping's length ... */
    size_t          mb_skew;           /* ... and where mb sits in it */
    /* under ring (B3) */
    atomic_int      ring;              /* a spinlock: a few stores inside */
    uint32_t        wr;                /* next ring position */
    int             npend;             /* slots FULL or ACKED (ours) */
    uint8_t         handled[TD__MBOX_SLOTS];  /* its ack was taken */
    uint8_t         lean[TD__MBOX_SLOTS];     /* its sender polls it */
    uint32_t        id[TD__MBOX_SLOTS][2];    /* what each is for (ours) */
    atomic_int      tp_busy;           /* the user's other channel busy */
    _Atomic int     dead;              /* B7 */
} td__mbox_out_t;

/* One set of mailboxes (zero-initialize, then td__mbox_setup). */
typedef struct {
    pthread_mutex_t lock;              /* setup, poll lists */
    int             lock_made;
    const char     *name;              /* for logs and the memfd ... */
    const char     *what;              /* ... and what it carries */
    int             on;
    int             rank, size;
    uint64_t        boot_hash;
    int             fd;                /* our inbox, -1 none, -2 failed */
    uint8_t        *base;
    size_t          len, mbox_bytes, page;
    uint64_t        token;
    td__mbox_in_t  *in;                /* per world rank */
    td__mbox_out_t *out;               /* per world rank */
    int            *in_list, *out_list;
    atomic_int      n_in, n_out;       /* entries published (append-only) */
    atomic_int      active;            /* anything to poll */
} td__mbox_t;

/* (Re)start set MB for RANK of SIZE on the host BOOT_ID ("" unknown: no
 * mailboxes); ON 0 turns it off. Frees the last setup's memory (B7).
 * NAME ("coll") and WHAT ("point-to-point") name it in logs. */
td_status_t td__mbox_setup(td__mbox_t *mb, const char *name,
                           const char *what, int on, int rank, int size,
                           const char *boot_id);
/* No more use (memory kept until the next setup, B7). Its user's lock
 * held, if it has one. */
void        td__mbox_stop(td__mbox_t *mb);
/* Unmap and free everything now: no thread may look at MB any more. */
void        td__mbox_release(td__mbox_t *mb);
/* Our inbox exists (a user thread: it makes a memfd). 1 if it does. */
int         td__mbox_inbox_ensure(td__mbox_t *mb);
/* The offer of our inbox to world rank DST into T (TD__MBOX_OFFER_BYTES):
 * its length, or 0 (no inbox, or offered before). From then on DST's
 * mailbox is polled (in_list). */
size_t      td__mbox_offer(td__mbox_t *mb, int dst, uint8_t *t);
/* SRC offered its inbox (T: TD__MBOX_OFFER_BYTES; recorded only, mapped
 * at td__mbox_out_usable). */
void        td__mbox_offered(td__mbox_t *mb, int src, const uint8_t *t);
/* Our attached mailbox to DST, attaching it at the first use after its
 * offer (a user thread: syscalls), or NULL: it is off, DST offered
 * nothing usable, the other channel is busy or DST is dead. */
td__mbox_out_t *td__mbox_out_usable(td__mbox_t *mb, int dst);

/* The receiver: SRC's slot K in our inbox. */
static inline td__mbox_slot_t *
td__mbox_in_slot(const td__mbox_t *mb, int src, int k)
{
    return &((td__mbox_ring_t *)(mb->base + mb->page + mb->mbox_bytes *
                                 (size_t)src))->slot[k];
}

static inline td__mbox_ring_t *
td__mbox_in_ring(const td__mbox_t *mb, int src)
{
    return (td__mbox_ring_t *)(mb->base + mb->page +
                               mb->mbox_bytes * (size_t)src);
}

/* Is SRC's mailbox in our inbox polled (offered to SRC, inbox made)? */
static inline int
td__mbox_in_polled(const td__mbox_t *mb, int src)
{
    return mb->on && src >= 0 && src < mb->size &&
           __atomic_load_n(&mb->in[src].offered, __ATOMIC_ACQUIRE) &&
           __atomic_load_n(&mb->base, __ATOMIC_ACQUIRE) != NULL;
}

/* Is SRC's next message there? Its slot into *S_P. (A hint: take it
 * under the receiver's lock, B3, after checking again.) */
static inline int
td__mbox_next_full(const td__mbox_t *mb, int src, td__mbox_slot_t **s_p)
{
    td__mbox_in_t *in = &mb->in[src];
    uint32_t rd = __atomic_load_n(&in->rd, __ATOMIC_RELAXED);
    td__mbox_slot_t *s = td__mbox_in_slot(mb, src, (int)(rd %
                                                         TD__MBOX_SLOTS));

    *s_p = s;
    if (atomic_load_explicit(&s->state, memory_order_acquire) !=
            TD__MBOX_FULL || s->pos != rd) {
        return 0;
    }
    __builtin_prefetch(s, 1);   /* the ack goes here: own the line early */
    return 1;
}

/* SRC's next message was taken (B2; the receiver's lock held). */
static inline void
td__mbox_in_advance(td__mbox_t *mb, int src)
{
    td__mbox_in_t *in = &mb->in[src];

    __atomic_store_n(&in->rd, in->rd + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&in->used, 1, __ATOMIC_RELAXED);
}

/* Write the ack of SRC's slot K (B1): STATUS, the bytes B0 and B1 and
 * N_EXT (<= TD__MBOX_EXT) words of EXT. Returns 1 when CHECK and the
 * sender has waiters asleep (B6: wake one through the user's channel). */
int         td__mbox_ack(td__mbox_t *mb, int src, int k, td_status_t status,
                         uint8_t b0, uint8_t b1, const int64_t *ext,
                         int n_ext, int check);
/* Does SRC's sender have waiters asleep? (B6, after a drain) */
static inline int
td__mbox_in_sender_sleeps(const td__mbox_t *mb, int src)
{
    atomic_signal_fence(memory_order_seq_cst);          /* B6: no fence */
    return atomic_load_explicit(&td__mbox_in_ring(mb, src)->s_sleep,
                                memory_order_relaxed) != 0;
}

/* Has SRC written into our inbox (so it is on this host)? */
int         td__mbox_from(const td__mbox_t *mb, int src);
/* Do messages from or to RANK go through mailboxes? */
int         td__mbox_local(const td__mbox_t *mb, int rank);

/* The sender: the ring's spinlock (B3). */
static inline void
td__mbox_ring_lock(td__mbox_out_t *o)
{
    while (atomic_exchange_explicit(&o->ring, 1, memory_order_acquire)) {
        while (atomic_load_explicit(&o->ring, memory_order_relaxed)) {
            td_cpu_relax();
        }
    }
}

static inline void
td__mbox_ring_unlock(td__mbox_out_t *o)
{
    atomic_store_explicit(&o->ring, 0, memory_order_release);
}

/* Free the slots whose acks were taken, oldest first (B4; ring held). */
void        td__mbox_ring_free_locked(td__mbox_out_t *o);
/* For a user whose acks carry nothing (one-way messages): take every ack
 * that came back, oldest first, and free those slots (ring held). */
void        td__mbox_reclaim_locked(td__mbox_out_t *o);
/* The next slot of O for a send (ring held): its index in *K, or 0 (the
 * other channel busy, or every slot pending or held: B2). */
int         td__mbox_slot_reserve(td__mbox_out_t *o, int *k);
/* Take the next ring position for slot K, reserved, for the message the
 * user knows as (ID0, ID1) (ring held). */
static inline uint32_t
td__mbox_slot_take(td__mbox_out_t *o, int k, uint32_t id0, uint32_t id1)
{
    uint32_t pos = o->wr;

    o->id[k][0] = id0;
    o->id[k][1] = id1;
    __atomic_store_n(&o->wr, pos + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&o->npend, o->npend + 1, __ATOMIC_RELAXED);
    return pos;
}

/* A message was published in O's receiver's inbox: 1 if a waiter there
 * sleeps (B6: the caller wakes it through its own channel). */
static inline int
td__mbox_receiver_sleeps(const td__mbox_out_t *o)
{
    atomic_signal_fence(memory_order_seq_cst);          /* B6: no fence */
    return atomic_load_explicit(&o->hdr->sleepers, memory_order_relaxed) != 0;
}

/* Has an ack come back into O that was not taken yet? (a hint, without
 * the lock) */
int         td__mbox_acks_ready(const td__mbox_out_t *o);

/* The user's other channel to DST begins / ends a message that must not
 * be overtaken (td__mbox_slot_reserve refuses meanwhile). */
void        td__mbox_tp_begin(td__mbox_t *mb, int dst);
void        td__mbox_tp_end(td__mbox_t *mb, int dst);
void        td__mbox_peer_dead(td__mbox_t *mb, int rank);
static inline int
td__mbox_active(const td__mbox_t *mb)
{
    return atomic_load_explicit(&mb->active, memory_order_relaxed);
}

/* A waiter goes to sleep / woke (B6): announced in our inbox and in every
 * mailbox we write; the cookie says what to undo. */
int         td__mbox_sleep_begin(td__mbox_t *mb);
void        td__mbox_sleep_end(td__mbox_t *mb, int cookie);

#endif /* TD_UCX_TRANSPORT_SHM_MBOX_H */
