/* shm_mbox.c: mailboxes in shared memory between ranks of one host (see
 * shm_mbox.h, B1-B8): the inbox, its offer and the checks before a
 * sender maps it, the sender's ring and the sleep announcements.
 *
 * Setup: a rank makes its inbox (a memfd with a mailbox per world rank,
 * sparse: only the pages of senders that write are ever touched) when
 * its user first needs it, and offers it through a channel of the job
 * (pid, fd, token, boot id hash, size). At its next send the sender opens
 * /proc/PID/fd/FD if the boot id is its own, maps its own mailbox and
 * checks the token (B5); failing that its user keeps to the transport.
 *
 * Thread safety: see shm_mbox.h. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "ucx_transport/shm_mbox.h"
#include "base/byteorder.h"
#include "base/clock.h"
#include "base/log.h"

#define MBOX_MAGIC 0x746f6469737462ull      /* "todistb" */

static size_t
ring_bytes(size_t page)
{
    return (sizeof(td__mbox_ring_t) + page - 1) / page * page;
}

/* Unmap and free what the last setup of MB held. */
static void
mbox_free(td__mbox_t *mb)
{
    int n_out = mb->out != NULL ? atomic_load(&mb->n_out) : 0;

    atomic_store(&mb->active, 0);
    for (int i = 0; i < n_out; i++) {
        td__mbox_out_t *o = &mb->out[mb->out_list[i]];

        if (o->hdr != NULL) {
            munmap(o->hdr, mb->page);
        }
        if (o->mb != NULL) {
            munmap((uint8_t *)o->mb - o->mb_skew, o->mb_map);
        }
    }
    if (mb->base != NULL) {
        munmap(mb->base, mb->len);
    }
    if (mb->fd >= 0) {
        close(mb->fd);
    }
    if (mb->out != NULL) {
        for (int i = 0; i < mb->size; i++) {
            pthread_mutex_destroy(&mb->out[i].lock);
        }
    }
    free(mb->in);
    free(mb->out);
    free(mb->in_list);
    free(mb->out_list);
    mb->in = NULL;
    mb->out = NULL;
    mb->in_list = mb->out_list = NULL;
    mb->base = NULL;
    mb->fd = -1;
    mb->on = 0;
}

td_status_t
td__mbox_setup(td__mbox_t *mb, const char *name, const char *what, int on,
               int rank, int size, const char *boot_id)
{
    uint64_t h = 0xcbf29ce484222325ull;
    long page = sysconf(_SC_PAGESIZE);

    if (!mb->lock_made) {
        pthread_mutex_init(&mb->lock, NULL);
        mb->lock_made = 1;
        mb->fd = -1;
    }
    mbox_free(mb);                      /* the last setup's (B7) */
    mb->name = name;
    mb->what = what;
    mb->rank = rank;
    mb->size = size;
    mb->on = on && size <= TD__MBOX_WORLD_MAX && boot_id != NULL &&
             boot_id[0] != '\0';
    for (const char *p = boot_id != NULL ? boot_id : ""; *p; p++) {
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    }
    mb->boot_hash = h;
    mb->fd = -1;
    mb->base = NULL;
    atomic_store(&mb->n_in, 0);
    atomic_store(&mb->n_out, 0);
    atomic_store(&mb->active, 0);
    mb->page = page > 0 ? (size_t)page : 4096;
    mb->mbox_bytes = ring_bytes(mb->page);
    if (!mb->on) {
        return TD_OK;
    }
    mb->in = calloc((size_t)size, sizeof(*mb->in));
    mb->out = calloc((size_t)size, sizeof(*mb->out));
    mb->in_list = calloc((size_t)size, sizeof(int));
    mb->out_list = calloc((size_t)size, sizeof(int));
    if (mb->in == NULL || mb->out == NULL || mb->in_list == NULL ||
        mb->out_list == NULL) {
        mbox_free(mb);
        return td_error(TD_ERR_NO_MEMORY, "%s: out of memory for %d "
                        "mailboxes", name, size);
    }
    for (int i = 0; i < size; i++) {
        pthread_mutex_init(&mb->out[i].lock, NULL);
    }
    return TD_OK;
}

void
td__mbox_release(td__mbox_t *mb)
{
    if (mb->lock_made) {
        mbox_free(mb);
        pthread_mutex_destroy(&mb->lock);
        mb->lock_made = 0;
    }
}

void
td__mbox_stop(td__mbox_t *mb)
{
    mb->on = 0;
    atomic_store(&mb->active, 0);
}

/* Our inbox (a user thread: never in a callback, where a syscall would
 * hold the progress token). */
int
td__mbox_inbox_ensure(td__mbox_t *mb)
{
    td__mbox_inbox_hdr_t *h;
    char name[32];
    int fd;
    size_t len;

    if (!mb->on) {
        return 0;
    }
    if (__atomic_load_n(&mb->base, __ATOMIC_ACQUIRE) != NULL) {
        return 1;
    }
    pthread_mutex_lock(&mb->lock);
    if (mb->base != NULL || mb->fd == -2) {
        pthread_mutex_unlock(&mb->lock);
        return mb->base != NULL;
    }
    len = mb->page + mb->mbox_bytes * (size_t)mb->size;
    snprintf(name, sizeof(name), "todist-%s", mb->name);
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        td_log_debug("%s: no mailbox inbox (%s): the transport carries "
                     "every message", mb->name, strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        mb->fd = -2;                    /* do not try again */
        pthread_mutex_unlock(&mb->lock);
        return 0;
    }
    h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        close(fd);
        mb->fd = -2;
        pthread_mutex_unlock(&mb->lock);
        return 0;
    }
    mb->token = ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)h ^
                (uint64_t)(td_now_s() * 1e9);
    h->magic = MBOX_MAGIC;
    h->token = mb->token;
    h->nworld = (uint32_t)mb->size;
    h->mbox_bytes = (uint32_t)mb->mbox_bytes;
    mb->fd = fd;
    mb->len = len;
    __atomic_store_n(&mb->base, (uint8_t *)h, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mb->lock);
    return 1;
}

size_t
td__mbox_offer(td__mbox_t *mb, int dst, uint8_t *t)
{
    td__mbox_in_t *in;

    if (!mb->on || dst == mb->rank || dst < 0 || dst >= mb->size ||
        __atomic_load_n(&mb->base, __ATOMIC_ACQUIRE) == NULL) {
        return 0;
    }
    in = &mb->in[dst];
    pthread_mutex_lock(&mb->lock);
    if (in->offered) {
        pthread_mutex_unlock(&mb->lock);
        return 0;
    }
    __atomic_store_n(&in->offered, 1, __ATOMIC_RELEASE);
    mb->in_list[atomic_load(&mb->n_in)] = dst;
    atomic_fetch_add(&mb->n_in, 1);     /* publishes the entry */
    atomic_store(&mb->active, 1);
    pthread_mutex_unlock(&mb->lock);
    td_put_be32(t, (uint32_t)getpid());
    td_put_be32(t + 4, (uint32_t)mb->fd);
    td_put_be64(t + 8, mb->token);
    td_put_be64(t + 16, mb->boot_hash);
    td_put_be64(t + 24, (uint64_t)mb->len);
    return TD__MBOX_OFFER_BYTES;
}

void
td__mbox_offered(td__mbox_t *mb, int src, const uint8_t *t)
{
    td__mbox_out_t *o;

    if (!mb->on || src == mb->rank || src < 0 || src >= mb->size) {
        return;
    }
    o = &mb->out[src];
    pthread_mutex_lock(&o->lock);
    if (atomic_load(&o->st) == TD__MBOX_OUT_NONE) {
        o->pid = (int32_t)td_get_be32(t);
        o->fd = (int32_t)td_get_be32(t + 4);
        o->token = td_get_be64(t + 8);
        o->size = td_get_be64(t + 24);
        /* Another host: opening /proc/PID/fd/FD there would reach an
         * unrelated process's file. */
        atomic_store(&o->st, td_get_be64(t + 16) == mb->boot_hash &&
                     o->pid > 0 && o->fd >= 0 ? TD__MBOX_OUT_OFFERED :
                     TD__MBOX_OUT_NO);
        td_log_debug("%s: rank %d offered its inbox (%s)", mb->name, src,
                     atomic_load(&o->st) == TD__MBOX_OUT_OFFERED ?
                     "this host" : "another host: not used");
    }
    pthread_mutex_unlock(&o->lock);
}

/* Map our mailbox in DST's inbox (out lock held, user thread; B5). */
static void
attach(td__mbox_t *mb, int dst, td__mbox_out_t *o)
{
    size_t page = mb->page, off, skew;
    char path[64];
    struct stat sb;
    td__mbox_inbox_hdr_t *h = MAP_FAILED;
    void *m = MAP_FAILED;
    int fd;

    atomic_store(&o->st, TD__MBOX_OUT_NO);     /* unless all goes well */
    if (o->size != page + mb->mbox_bytes * (size_t)mb->size) {
        td_log_debug("%s: rank %d's inbox has %" PRIu64 " bytes, not %zu: "
                     "messages to it use the transport", mb->name, dst,
                     o->size, page + mb->mbox_bytes * (size_t)mb->size);
        return;
    }
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)o->pid, (int)o->fd);
    fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        td_log_debug("%s: cannot open rank %d's inbox (%s: %s): messages "
                     "to it use the transport", mb->name, dst, path,
                     strerror(errno));
        return;
    }
    off = page + mb->mbox_bytes * (size_t)mb->rank;
    skew = off % page;                   /* 0: mbox_bytes is whole pages */
    /* (non-blocking, and a regular file only: a damaged offer must not
     * open someone's FIFO or device and wait on it) */
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
        (uint64_t)sb.st_size != o->size) {
        goto out;
    }
    h = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    m = mmap(NULL, mb->mbox_bytes + skew, PROT_READ | PROT_WRITE, MAP_SHARED,
             fd, (off_t)(off - skew));
    if (h == MAP_FAILED || m == MAP_FAILED) {
        goto out;
    }
    /* The same pid and fd in another pid namespace: not DST's inbox. */
    if (h->magic != MBOX_MAGIC || h->token != o->token ||
        h->nworld != (uint32_t)mb->size ||
        h->mbox_bytes != (uint32_t)mb->mbox_bytes) {
        goto out;
    }
    o->hdr = h;
    o->mb = (td__mbox_ring_t *)((uint8_t *)m + skew);
    o->mb_map = mb->mbox_bytes + skew;
    o->mb_skew = skew;
    o->wr = 0;
    o->npend = 0;
    for (int i = 0; i < TD__MBOX_SLOTS; i++) {
        if (atomic_load_explicit(&o->mb->slot[i].state,
                                 memory_order_acquire) != TD__MBOX_FREE) {
            goto out_detach;            /* not fresh: not ours to use */
        }
    }
    close(fd);
    pthread_mutex_lock(&mb->lock);
    mb->out_list[atomic_load(&mb->n_out)] = dst;
    atomic_fetch_add(&mb->n_out, 1);
    atomic_store(&mb->active, 1);
    pthread_mutex_unlock(&mb->lock);
    atomic_store(&o->st, TD__MBOX_OUT_ATTACHED);
    td_log_debug("%s: %s mailbox to rank %d attached", mb->name, mb->what,
                 dst);
    return;
out_detach:
    o->hdr = NULL;
    o->mb = NULL;
out:
    td_log_debug("%s: rank %d's inbox (%s) is not one to use: messages to "
                 "it use the transport", mb->name, dst, path);
    if (m != MAP_FAILED) {
        munmap(m, mb->mbox_bytes + skew);
    }
    if (h != MAP_FAILED) {
        munmap(h, page);
    }
    close(fd);
}

td__mbox_out_t *
td__mbox_out_usable(td__mbox_t *mb, int dst)
{
    td__mbox_out_t *o;
    int st;

    if (!mb->on || dst == mb->rank || dst < 0 || dst >= mb->size) {
        return NULL;
    }
    o = &mb->out[dst];
    st = atomic_load_explicit(&o->st, memory_order_acquire);
    if (st == TD__MBOX_OUT_NONE || st == TD__MBOX_OUT_NO ||
        atomic_load_explicit(&o->tp_busy, memory_order_acquire) != 0 ||
        atomic_load_explicit(&o->dead, memory_order_relaxed)) {
        return NULL;
    }
    if (st == TD__MBOX_OUT_OFFERED) {
        pthread_mutex_lock(&o->lock);       /* syscalls: no user lock */
        if (atomic_load(&o->st) == TD__MBOX_OUT_OFFERED) {
            attach(mb, dst, o);
        }
        pthread_mutex_unlock(&o->lock);
        if (atomic_load(&o->st) != TD__MBOX_OUT_ATTACHED) {
            return NULL;
        }
    }
    return o;
}

/* ---- the receiver's side --------------------------------------------- */

int
td__mbox_ack(td__mbox_t *mb, int src, int k, td_status_t status, uint8_t b0,
             uint8_t b1, const int64_t *ext, int n_ext, int check)
{
    td__mbox_slot_t *s = td__mbox_in_slot(mb, src, k);

    s->ack_status = (int32_t)status;
    s->ack_b[0] = b0;
    s->ack_b[1] = b1;
    if (ext != NULL && n_ext > 0 && n_ext <= TD__MBOX_EXT) {
        memcpy(s->ack_ext, ext, 8 * (size_t)n_ext);
    }
    atomic_store_explicit(&s->state, TD__MBOX_ACKED, memory_order_release);
    return check && td__mbox_in_sender_sleeps(mb, src);
}

int
td__mbox_from(const td__mbox_t *mb, int src)
{
    return mb->on && src >= 0 && src < mb->size &&
           __atomic_load_n(&mb->in[src].used, __ATOMIC_RELAXED) &&
           __atomic_load_n(&mb->base, __ATOMIC_ACQUIRE) != NULL;
}

/* (We offer our inbox to every sender, those on other hosts too: only one
 * that wrote into it is known to be on this host.) */
int
td__mbox_local(const td__mbox_t *mb, int rank)
{
    return mb->on && rank >= 0 && rank < mb->size &&
           (__atomic_load_n(&mb->in[rank].used, __ATOMIC_RELAXED) ||
            atomic_load_explicit(&mb->out[rank].st, memory_order_relaxed) ==
                TD__MBOX_OUT_ATTACHED);
}

/* ---- the sender's side -------------------------------------------------- */

void
td__mbox_ring_free_locked(td__mbox_out_t *o)
{
    while (o->npend > 0) {
        int k = (int)((o->wr - (uint32_t)o->npend) % TD__MBOX_SLOTS);

        if (!__atomic_load_n(&o->handled[k], __ATOMIC_ACQUIRE)) {
            break;
        }
        __atomic_store_n(&o->handled[k], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&o->lean[k], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&o->npend, o->npend - 1, __ATOMIC_RELAXED);
    }
}

void
td__mbox_reclaim_locked(td__mbox_out_t *o)
{
    for (uint32_t p = o->wr - (uint32_t)o->npend; p != o->wr; p++) {
        int k = (int)(p % TD__MBOX_SLOTS);

        if (atomic_load_explicit(&o->mb->slot[k].state,
                                 memory_order_acquire) != TD__MBOX_ACKED) {
            break;
        }
        __atomic_store_n(&o->handled[k], 1, __ATOMIC_RELAXED);
    }
    td__mbox_ring_free_locked(o);
}

int
td__mbox_slot_reserve(td__mbox_out_t *o, int *k)
{
    td__mbox_ring_free_locked(o);
    *k = (int)(o->wr % TD__MBOX_SLOTS);
    return atomic_load(&o->tp_busy) == 0 && o->npend < TD__MBOX_SLOTS &&
           atomic_load_explicit(&o->mb->slot[*k].state,
                                memory_order_acquire) != TD__MBOX_FULL;
}

int
td__mbox_acks_ready(const td__mbox_out_t *o)
{
    uint32_t wr = __atomic_load_n(&o->wr, __ATOMIC_RELAXED);
    int n = __atomic_load_n(&o->npend, __ATOMIC_RELAXED);

    for (uint32_t p = wr - (uint32_t)n; p != wr; p++) {
        int k = (int)(p % TD__MBOX_SLOTS);

        if (atomic_load_explicit(&o->mb->slot[k].state,
                                 memory_order_relaxed) == TD__MBOX_ACKED &&
            !__atomic_load_n(&o->handled[k], __ATOMIC_RELAXED) &&
            !__atomic_load_n(&o->lean[k], __ATOMIC_RELAXED)) {
            return 1;
        }
    }
    return 0;
}

void
td__mbox_tp_begin(td__mbox_t *mb, int dst)
{
    if (mb->on && dst >= 0 && dst < mb->size) {
        atomic_fetch_add(&mb->out[dst].tp_busy, 1);
    }
}

void
td__mbox_tp_end(td__mbox_t *mb, int dst)
{
    if (mb->on && dst >= 0 && dst < mb->size) {
        atomic_fetch_sub(&mb->out[dst].tp_busy, 1);
    }
}

void
td__mbox_peer_dead(td__mbox_t *mb, int rank)
{
    if (mb->on && rank >= 0 && rank < mb->size) {
        atomic_store(&mb->out[rank].dead, 1);
    }
}

/* ---- sleeping ------------------------------------------------------------ */

int
td__mbox_sleep_begin(td__mbox_t *mb)
{
    int n, inbox;

    if (!atomic_load_explicit(&mb->active, memory_order_acquire)) {
        return 0;
    }
    inbox = __atomic_load_n(&mb->base, __ATOMIC_ACQUIRE) != NULL;
    if (inbox) {
        atomic_fetch_add(&((td__mbox_inbox_hdr_t *)mb->base)->sleepers, 1);
    }
    n = atomic_load_explicit(&mb->n_out, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        atomic_fetch_add(&mb->out[mb->out_list[i]].mb->s_sleep, 1);
    }
    atomic_thread_fence(memory_order_seq_cst);
    return n << 1 | inbox;
}

void
td__mbox_sleep_end(td__mbox_t *mb, int cookie)
{
    if (cookie & 1) {
        atomic_fetch_sub(&((td__mbox_inbox_hdr_t *)mb->base)->sleepers, 1);
    }
    for (int i = 0; i < cookie >> 1; i++) {
        atomic_fetch_sub(&mb->out[mb->out_list[i]].mb->s_sleep, 1);
    }
}
