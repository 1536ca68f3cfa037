/* ring.c: one step of a ring (ring.h): a block cut in segments of
 * SEG_BYTES (1 MiB) to the right neighbour while one comes from the
 * left. A step posts every segment's receive before sending (so bodies
 * land where they belong, not in the unexpected list), then takes each
 * segment as it arrives (reduced, or already in place) while later ones
 * are still moving.
 *
 *  R1 Where the right neighbour is on another host, a step's sends are
 *     paced by its arrivals: RING_AHEAD_FAR bytes of segments (at least
 *     RING_WIN_MIN) go at once, then one more after each segment received
 *     (and reduced). A send over TCP pushes its bytes through the kernel
 *     from the posting thread, about at the link's rate, so posting a
 *     whole chunk (32 x 1 MiB at 64 MiB, 2 ranks) took the thread away
 *     from receiving for up to 23 ms: the peer's sends stalled on a full
 *     socket and the two directions took turns (64 MiB all_reduce over
 *     10 Gbit/s: 60-77 ms, 56-57 ms paced, Open MPI 60-62,
 *     bench/RESULTS.md). A rank's sends are its left neighbour's
 *     receives, so each step's arrivals keep coming: every rank posts its
 *     window of sends before its first wait. Inside a host sends are
 *     offers (cma.h) and go at once.
 *  R2 Between ranks of two hosts, segments are TD_TRANSPORT_FAR_SEG_BYTES
 *     (63 KiB), not SEG_BYTES: each arrives in one UCX TCP segment and is
 *     copied once, not reassembled by UCX first (transport.c S3). 2-rank
 *     all_reduce of 1 MiB across emulated hosts: 631 us in 1 MiB
 *     segments, 440 us in 63 KiB ones, Open MPI 411 (bench/RESULTS.md).
 *     A rank cuts its sends for the link to its right neighbour and posts
 *     its receives as its left neighbour cuts for the link to it: in a
 *     ring of hosts 1,1,2 rank 0 sends 1 MiB segments to rank 1 and
 *     receives 63 KiB ones from rank 2. Which links cross hosts comes
 *     from the group's agreed host map (run.c A1, op->ring_far), not from
 *     each rank's own lookups: one that failed (a starved store) would
 *     have a sender and its receiver cut differently.
 *  R3 A copy the caller needs besides the ring (all_gather: its own
 *     block into the output) is made in slices of RING_SIDE_SLICE bytes,
 *     one after each arrival, while the link is busy, not before the
 *     first send: across 2 hosts a 64 MiB all_gather spent 5 ms copying
 *     its 32 MiB before the link carried a byte.
 *  R4 A segment a step reduces is reduced by the receive handler where
 *     its body comes with its message (eager: across hosts, R2's 63 KiB
 *     segments), from the transport's buffer, instead of copied into
 *     the landing block (or RBUF) and reduced from there by the step:
 *     one copy less of every byte reduced (rx.c, coll_irecv_reduce).
 *     It is the same reduction in the same operand order (RBUF op= body;
 *     with WITH, RBUF = body op WITH: coll_reduce_to, bit for bit a copy
 *     then coll_reduce_into), so the bits are the same; the step's wait
 *     sees red_done and goes on. The handler writes only that segment of
 *     RBUF, which the step neither reads nor sends until the segment's
 *     receive completed. WITH overlapping RBUF keeps the step's way.
 *
 * Run by the thread running the group's operation (work.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/coll/ring.h"
#include "runtime/coll/reduce.h"
#include "ucx_transport/transport.h"

/* One offer / read / answer per segment: 1 MiB (this VM's L2, still read
 * hot by the reduction) took 64 MiB on 2 ranks from 20 ms to 11-13 ms and
 * on 4 ranks from 61-69 ms to 35-40 ms against 256 KiB (interleaved). */
#define SEG_BYTES   (1024u * 1024u)
/* R1: bytes a ring rank sends ahead of what it received, where its
 * right neighbour is on another host: RING_AHEAD_FAR / segment segments
 * (at least 4: 1, 2 and 4 MiB segments did alike on the shaped bed). R2:
 * 16 x 63 KiB took 440 us at 1 MiB, 4 and 8 of them 496-575 us. */
#define RING_AHEAD_FAR (1024u * 1024u)
#define RING_WIN_MIN   4
/* R3: a slice of the side copy a segment received: at ~10 GB/s against
 * a link's ~1 GB/s, a step's arrivals pay for the copy many times over */
#define RING_SIDE_SLICE (256u * 1024u)

/* R2: the segment, in elements, of a ring link, FAR if it crosses
 * hosts: both its ends decide alike (op->ring_far), so the sender cuts
 * what the receiver posts. */
static size_t
ring_seg(int far, size_t es)
{
    size_t s = (far ? TD_TRANSPORT_FAR_SEG_BYTES : SEG_BYTES) / es;

    return s > 0 ? s : 1;
}

td_status_t
coll_ring_init(coll_ring_t *r, coll_op_t *op, size_t max, size_t land)
{
    td_group_t *g = op->g;
    size_t es = op->esize, max_sr, max_rr;

    r->op = op;
    r->right = (g->me + 1) % g->n;
    r->left = (g->me - 1 + g->n) % g->n;
    /* R2: what we send is cut for our right neighbour's link, what we
     * receive as our left neighbour cuts it for ours */
    r->seg = ring_seg(op->ring_far & COLL_RING_FAR_TX, es);
    r->rseg = ring_seg(op->ring_far & COLL_RING_FAR_RX, es);
    max_sr = coll_segs(max, &r->seg);
    max_rr = coll_segs(max, &r->rseg);
    r->win = 0;
    /* R1: paced where the right neighbour is on another host */
    if (op->ring_far & COLL_RING_FAR_TX) {
        r->win = RING_AHEAD_FAR / (r->seg * es);
        r->win = r->win < RING_WIN_MIN ? RING_WIN_MIN : r->win;
        g->ring_seg_far = r->seg * es;    /* (said when the group goes) */
    }
    r->land = r->hot = NULL;
    r->side_dst = NULL;
    r->side_src = NULL;
    r->side_len = r->side_done = 0;
    if (land > 0) {
        /* the landing block, then one segment of hot buffer: a body read
         * in place (cma.h C9) lands there and is reduced at once, from
         * cache, instead of through the block-sized area */
        r->land = coll_scratch(g, land * es + 64 + r->rseg * es);
        r->hot = r->land != NULL
                 ? r->land + ((land * es + 63) & ~(size_t)63) : NULL;
    }
    r->rr = calloc(max_rr, sizeof(*r->rr));
    r->sr = calloc(max_sr, sizeof(*r->sr));
    r->ptr = calloc(max_sr, sizeof(*r->ptr));
    if ((land > 0 && r->land == NULL) || r->rr == NULL || r->sr == NULL ||
        r->ptr == NULL) {
        coll_ring_free(r);
        return td_error(TD_ERR_NO_MEMORY, "coll: ring: out of memory for "
                        "%zu + %zu segments", max_sr, max_rr);
    }
    return TD_OK;
}

void
coll_ring_free(coll_ring_t *r)
{
    free(r->rr);
    free(r->sr);
    free(r->ptr);
    r->rr = r->sr = NULL;
    r->ptr = NULL;
}

void
coll_ring_side_copy(coll_ring_t *r, char *dst, const char *src, size_t len)
{
    r->side_dst = dst;
    r->side_src = src;
    r->side_len = len;
    r->side_done = 0;
}

/* R3: up to MAX more bytes of the side copy. */
static void
side_slice(coll_ring_t *r, size_t max)
{
    size_t l = r->side_len - r->side_done;

    l = l < max ? l : max;
    if (l > 0) {
        memcpy(r->side_dst + r->side_done, r->side_src + r->side_done, l);
        r->side_done += l;
    }
}

/* R1: post the sends of segments *POSTED.. of SL elements at SBUF, up
 * to UPTO of them (0: all NS). */
static td_status_t
ring_post(coll_ring_t *r, size_t *posted, size_t ns, size_t upto,
          uint32_t tag0, const char *sbuf, size_t sl)
{
    size_t es = r->op->esize, seg = r->seg;

    if (upto == 0 || upto > ns) {
        upto = ns;
    }
    while (*posted < upto) {
        size_t i = *posted, off = i * seg, l = sl - off < seg ? sl - off
                                                               : seg;
        td_status_t st = coll_isend(r->op, &r->sr[i], r->right,
                                    tag0 | (uint32_t)i, sbuf + off * es,
                                    l * es);

        if (st != TD_OK) {
            return st;
        }
        (*posted)++;
    }
    return TD_OK;
}

/* R4: whether LEN bytes at A and at B do not overlap. */
static int
apart(const char *a, const char *b, size_t len)
{
    return a + len <= b || b + len <= a;
}

td_status_t
coll_ring_step(coll_ring_t *r, uint32_t tag0, const char *sbuf, size_t sl,
               char *rbuf, size_t rl, int reduce, const char *with)
{
    coll_op_t *op = r->op;
    size_t es = op->esize, seg = r->seg, rseg = r->rseg;
    size_t ns = (sl + seg - 1) / seg, nr = (rl + rseg - 1) / rseg;
    size_t posted = 0, got = 0;
    int land = reduce && with == NULL;
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    td_status_t st = TD_OK, s2;

    for (size_t i = 0; i < nr; i++) {
        size_t off = i * rseg, len = rl - off < rseg ? rl - off : rseg;
        char *dst = land ? r->land + off * es : rbuf + off * es;

        /* R4: reduced by the receive handler where it can be */
        if (land || (reduce && apart(rbuf, with, rl * es))) {
            st = coll_irecv_reduce(op, &r->rr[i], r->left,
                                   tag0 | (uint32_t)i, dst, len * es,
                                   rbuf + off * es,
                                   land ? NULL : with + off * es);
        } else {
            st = coll_irecv(op, &r->rr[i], r->left, tag0 | (uint32_t)i, dst,
                            len * es);
        }
        if (st != TD_OK) {
            nr = i;                 /* not posted: not waited for */
            break;
        }
        if (land && r->hot != NULL) {
            /* read only by this thread's wait below (C9), one segment
             * at a time, each reduced before the next */
            r->rr[i].cma_dst = r->hot;
        }
    }
    if (st == TD_OK) {
        st = ring_post(r, &posted, ns, r->win, tag0, sbuf, sl);
    }
    /* R1: each arrival lets one more segment go (win ahead) */
    for (; got < nr; got++) {
        coll_req_t *one = &r->rr[got];
        size_t off = got * rseg, len = rl - off < rseg ? rl - off : rseg;

        if ((s2 = coll_step_wait(op, &one, 1)) != TD_OK) {
            st = st == TD_OK ? s2 : st;
            continue;               /* still waited for: each is ours */
        }
        side_slice(r, RING_SIDE_SLICE);            /* R3 */
        if (st != TD_OK) {
            continue;
        }
        if (one->red_done) {
            op->g->ring_rx_reduced++;           /* R4: done on arrival */
        } else if (land) {
            coll_reduce_into(rbuf + off * es,
                             one->cma_landed ? one->cma_dst
                                             : r->land + off * es,
                             len, dt, rop);
        } else if (reduce) {
            coll_reduce_into(rbuf + off * es, with + off * es, len, dt, rop);
        }
        if (r->win != 0 && posted < ns) {
            size_t before = posted;

            st = ring_post(r, &posted, ns, got + 1 + r->win, tag0, sbuf,
                           sl);
            op->g->ring_paced += posted - before;
        }
    }
    if (st == TD_OK) {
        st = ring_post(r, &posted, ns, 0, tag0, sbuf, sl);
    }
    for (size_t i = 0; i < posted; i++) {
        r->ptr[i] = &r->sr[i];
    }
    side_slice(r, r->side_len);                    /* R3: the rest */
    s2 = coll_step_wait(op, r->ptr, (int)posted);
    return st != TD_OK ? st : s2;
}
