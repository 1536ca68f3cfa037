/* gather.c: the all-to-all family: all_gather (direct: every member sends
 * its block to every other at once, or ring: n-1 steps, each block
 * received straight into place), reduce_scatter (direct, or ring with
 * the reduction done where each block lands, segment by segment), both
 * rings on ring.c's step (segments, paced across hosts: R1, R2),
 * all_to_all (pairwise: every receive posted, then every send) and the
 * dissemination barrier.
 *
 * Run by the thread running the group's operation (work.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/coll/gather.h"
#include "runtime/coll/reduce.h"
#include "runtime/coll/ring.h"

/* Post receives of block i from every i != me into RBASE + i * RLEN and
 * sends of SBASE + i * SLEN (or SBASE when SLEN is 0 and SAME) to every
 * i != me; wait for all. */
static td_status_t
exchange_all(coll_op_t *op, char *rbase, size_t rlen, const char *sbase,
             size_t sstride, size_t slen)
{
    td_group_t *g = op->g;
    int n = g->n, me = g->me;
    coll_req_t *reqs = calloc(2 * (size_t)n, sizeof(*reqs));
    coll_req_t **p = calloc(2 * (size_t)n, sizeof(*p));
    td_status_t st = TD_OK, s2;

    if (reqs == NULL || p == NULL) {
        free(reqs);
        free(p);
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    for (int i = 0; i < n && st == TD_OK; i++) {
        if (i != me) {
            st = coll_irecv(op, &reqs[i], i, 0, rbase + (size_t)i * rlen,
                            rlen);
            p[i] = &reqs[i];
        }
    }
    /* Start with the next rank up, so members do not all hit rank 0. */
    for (int k = 1; k < n && st == TD_OK; k++) {
        int i = (me + k) % n;

        st = coll_isend(op, &reqs[n + i], i, 0, sbase + (size_t)i * sstride,
                        slen);
        if (st == TD_OK) {
            p[n + i] = &reqs[n + i];
        }
    }
    s2 = coll_step_wait(op, p, 2 * n);
    free(reqs);
    free(p);
    return st != TD_OK ? st : s2;
}

td_status_t
coll_all_gather_run(coll_op_t *op, void *out, const void *in, size_t nbytes)
{
    td_group_t *g = op->g;
    int n = g->n, me = g->me;
    size_t es = op->esize;
    char *o = out, *mine = o + (size_t)me * nbytes;
    /* IN apart from OUT: the ring sends it as it is and copies it in
     * between arrivals (ring.c R3) */
    int apart = (const char *)in >= o + (size_t)n * nbytes ||
                (const char *)in + nbytes <= o;

    if (n > 1 && op->algo == ALGO_RING && es > 0 && nbytes % es == 0) {
        /* step s: block me - s to the right, me - s - 1 from the left,
         * straight into place (ring.c: segments, R1, R2) */
        size_t count = nbytes / es;
        coll_ring_t r;
        td_status_t st;

        if (!apart && nbytes > 0) {
            memmove(mine, in, nbytes);
        }
        st = coll_ring_init(&r, op, count, 0);
        if (apart && st == TD_OK) {
            coll_ring_side_copy(&r, mine, in, nbytes);
        }
        for (int s = 0; s < n - 1 && st == TD_OK; s++) {
            int sb = (me - s + n) % n, rb = (me - s - 1 + n) % n;

            st = coll_ring_step(&r, (uint32_t)s << 16,
                                s == 0 && apart ? (const char *)in
                                                : o + (size_t)sb * nbytes,
                                count, o + (size_t)rb * nbytes, count, 0,
                                NULL);
        }
        coll_ring_free(&r);
        return st;
    }
    if (nbytes > 0) {
        memmove(mine, in, nbytes);
    }
    if (n == 1) {
        return TD_OK;
    }
    return exchange_all(op, o, nbytes, o + (size_t)me * nbytes, 0, nbytes);
}

td_status_t
coll_reduce_scatter_run(coll_op_t *op, void *out, const void *in,
                        size_t count)
{
    td_group_t *g = op->g;
    int n = g->n, me = g->me;
    size_t bytes = count * op->esize;
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    const char *src = in;
    char *scratch;
    td_status_t st = TD_OK;

    if (n == 1) {
        if (bytes > 0) {
            memmove(out, in, bytes);
        }
        if (rop == TD_REDUCE_AVG) {
            coll_divide(out, count, dt, 1);
        }
        return TD_OK;
    }
    if (op->algo == ALGO_RING) {
        /* step s: block me - s - 1 to the right (at step 0 this rank's
         * input, after it the partial sum it received), block me - s - 2
         * from the left, received in place and this rank's input reduced
         * into it segment by segment (ring.c). The last step's block is
         * this rank's: it lands in OUT, unless OUT overlaps IN (the last
         * block is then copied out at the end). */
        int alias = bytes > 0 && (char *)out < src + (size_t)n * bytes &&
                    src < (char *)out + bytes;
        coll_ring_t r;

        scratch = NULL;
        if (n > 2 || alias) {
            scratch = coll_scratch(g, (size_t)n * bytes + 1);
            if (scratch == NULL) {
                return TD_ERR_NO_MEMORY;
            }
        }
        st = coll_ring_init(&r, op, count, 0);
        for (int s = 0; s < n - 1 && st == TD_OK; s++) {
            int sb = (me - s - 1 + 2 * n) % n, rb = (me - s - 2 + 2 * n) % n;
            const char *sbuf = s == 0 ? src + (size_t)sb * bytes
                                      : scratch + (size_t)sb * bytes;
            char *rbuf = s == n - 2 && !alias ? (char *)out
                                              : scratch + (size_t)rb * bytes;

            st = coll_ring_step(&r, (uint32_t)s << 16, sbuf, count, rbuf,
                                count, 1, src + (size_t)rb * bytes);
        }
        coll_ring_free(&r);
        if (st == TD_OK && alias) {
            memmove(out, scratch + (size_t)me * bytes, bytes);
        }
    } else {
        /* direct: block j of every member goes to member j. */
        scratch = coll_scratch(g, (size_t)n * bytes + 1);
        if (scratch == NULL) {
            return TD_ERR_NO_MEMORY;
        }
        st = exchange_all(op, scratch, bytes, src, bytes, bytes);
        if (st == TD_OK) {
            if (bytes > 0) {
                memmove(out, src + (size_t)me * bytes, bytes);
            }
            for (int i = 0; i < n; i++) {
                if (i != me) {
                    coll_reduce_into(out, scratch + (size_t)i * bytes, count,
                                     dt, rop);
                }
            }
        }
    }
    if (st == TD_OK && rop == TD_REDUCE_AVG) {
        coll_divide(out, count, dt, n);
    }
    return st;
}

td_status_t
coll_all_to_all_run(coll_op_t *op, void *out, const void *in,
                    size_t block_bytes)
{
    td_group_t *g = op->g;
    int me = g->me;

    if (block_bytes > 0) {
        memcpy((char *)out + (size_t)me * block_bytes,
               (const char *)in + (size_t)me * block_bytes, block_bytes);
    }
    if (g->n == 1) {
        return TD_OK;
    }
    return exchange_all(op, out, block_bytes, in, block_bytes, block_bytes);
}

td_status_t
coll_barrier_run(coll_op_t *op)
{
    td_group_t *g = op->g;
    int n = g->n, me = g->me;

    for (int k = 1, round = 0; k < n; k <<= 1, round++) {
        td_status_t st = coll_sendrecv(op, (me + k) % n, NULL, 0,
                                       (me - k + n) % n, NULL, 0,
                                       (uint32_t)round);
        if (st != TD_OK) {
            return st;
        }
    }
    return TD_OK;
}
