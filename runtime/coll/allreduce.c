/* allreduce.c: all_reduce's two algorithm families.
 *
 * rd (recursive doubling, latency-bound): log2(p) exchanges of the whole
 * vector with partner rank ^ mask; a group that is not a power of two
 * first folds its first 2*(n-p) ranks pairwise (odd ones keep the sum, even
 * ones sit out and get the result at the end), MPICH's way.
 *
 * ring (bandwidth-optimal): reduce-scatter then all-gather around the ring,
 * each of the n chunks cut in segments of SEG_BYTES (1 MiB). A step posts
 * every segment's receive before sending (so bodies land where they belong, not
 * in the unexpected list), then reduces each segment as it arrives while
 * later ones are still moving; the all-gather receives straight into the
 * caller's tensor. Each rank sends and receives 2(n-1)/n of the data.
 *
 * Both are run by the thread running the group's operation (work.c). */
#include "config.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/coll/allreduce.h"
#include "runtime/coll/reduce.h"

/* One offer / read / answer per segment: 1 MiB (this VM's L2, still read
 * hot by the reduction) took 64 MiB on 2 ranks from 20 ms to 11-13 ms and
 * on 4 ranks from 61-69 ms to 35-40 ms against 256 KiB (interleaved). */
#define SEG_BYTES   (1024u * 1024u)
#define SMALL_STACK 256

/* Group rank of the rd partner NEWDST (in folded numbering). */
static int
rd_real(int newdst, int rem)
{
    return newdst < rem ? newdst * 2 + 1 : newdst + rem;
}

td_status_t
coll_all_reduce_rd(coll_op_t *op, void *buf, size_t count)
{
    td_group_t *g = op->g;
    int n = g->n, me = g->me, p = 1, rem, newrank;
    size_t bytes = count * op->esize;
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    _Alignas(16) unsigned char small[SMALL_STACK];
    void *tmp = bytes <= sizeof(small) ? small : coll_scratch(g, bytes);
    td_status_t st;

    if (tmp == NULL) {
        return TD_ERR_NO_MEMORY;
    }
    while (p * 2 <= n) {
        p *= 2;
    }
    rem = n - p;
    if (me < 2 * rem) {
        if (me % 2 == 0) {
            st = coll_sendrecv(op, me + 1, buf, bytes, -1, NULL, 0, 1u << 20);
            newrank = -1;
        } else {
            st = coll_sendrecv(op, -1, NULL, 0, me - 1, tmp, bytes, 1u << 20);
            coll_reduce_into(buf, tmp, count, dt, rop);
            newrank = me / 2;
        }
        if (st != TD_OK) {
            return st;
        }
    } else {
        newrank = me - rem;
    }
    if (newrank >= 0) {
        for (int mask = 1, step = 0; mask < p; mask <<= 1, step++) {
            int dst = rd_real(newrank ^ mask, rem);

            st = coll_sendrecv(op, dst, buf, bytes, dst, tmp, bytes,
                               (uint32_t)step);
            if (st != TD_OK) {
                return st;
            }
            coll_reduce_into(buf, tmp, count, dt, rop);
        }
        if (rop == TD_REDUCE_AVG) {
            coll_divide(buf, count, dt, n);
        }
    }
    if (me < 2 * rem) {
        if (me % 2 == 1) {
            st = coll_sendrecv(op, me - 1, buf, bytes, -1, NULL, 0,
                               2u << 20);
        } else {
            st = coll_sendrecv(op, -1, NULL, 0, me + 1, buf, bytes, 2u << 20);
        }
        if (st != TD_OK) {
            return st;
        }
    }
    return TD_OK;
}

static atomic_ulong pair_calls;        /* coll_all_reduce_pair_count */

unsigned long
coll_all_reduce_pair_count(void)
{
    return atomic_load_explicit(&pair_calls, memory_order_relaxed);
}

td_status_t
coll_all_reduce_pair(coll_op_t *op, void *buf, size_t count,
                     void (*announce)(td_group_t *g, uint32_t seq,
                                      const coll_desc_t *d))
{
    td_group_t *g = op->g;
    int peer = 1 - g->me;
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    _Alignas(16) unsigned char tmp[COLL_PAIR_MAX];
    coll_req_t rr, sr;
    coll_req_t *reqs[2] = { &rr, &sr };
    size_t bytes = count * td_dtype_size(dt);
    td_status_t st;

    /* rd's one exchange at n = 2 (step 0, tag 0: the same messages) */
    st = coll_op_begin_irecv(op, announce, &rr, peer, 0, tmp, bytes);
    if (st != TD_OK) {
        return st;
    }
    st = coll_isend(op, &sr, peer, 0, buf, bytes);
    if (st != TD_OK) {
        coll_step_wait(op, reqs, 1);
        return st;
    }
    st = coll_step_wait(op, reqs, 2);
    if (st != TD_OK) {
        return st;
    }
    coll_reduce_into(buf, tmp, count, dt, rop);
    if (rop == TD_REDUCE_AVG) {
        coll_divide(buf, count, dt, 2);
    }
    /* (one thread a group: a lost increment is only a test's count) */
    atomic_store_explicit(&pair_calls, atomic_load_explicit(&pair_calls,
                          memory_order_relaxed) + 1, memory_order_relaxed);
    return TD_OK;
}

/* Chunk C of COUNT elements cut in N: [*start, *start + *len). */
static void
chunk(size_t count, int n, int c, size_t *start, size_t *len)
{
    size_t a = count * (size_t)c / (size_t)n;
    size_t b = count * (size_t)(c + 1) / (size_t)n;

    *start = a;
    *len = b - a;
}

td_status_t
coll_all_reduce_ring(coll_op_t *op, void *buf, size_t count)
{
    td_group_t *g = op->g;
    int n = g->n, me = g->me, right = (me + 1) % n, left = (me - 1 + n) % n;
    size_t es = op->esize, seg = SEG_BYTES / es, max_chunk = 0, max_segs;
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    char *b = buf, *tmp;
    coll_req_t *rr = NULL, *sr = NULL, **ptr = NULL;
    td_status_t st = TD_OK;

    if (n == 1) {
        return TD_OK;
    }
    for (int c = 0; c < n; c++) {
        size_t s0, l;

        chunk(count, n, c, &s0, &l);
        max_chunk = l > max_chunk ? l : max_chunk;
    }
    max_segs = (max_chunk + seg - 1) / seg;
    if (max_segs == 0) {
        max_segs = 1;
    }
    if (max_segs > 0xffff) {               /* tags hold 16 bits of segment */
        seg = (max_chunk + 0xfffe) / 0xffff;
        max_segs = (max_chunk + seg - 1) / seg;
    }
    /* the chunk's landing area, then one segment of hot buffer: a body
     * read in place (cma.h C9) lands there and is reduced at once, from
     * cache, instead of through the chunk-sized area */
    tmp = coll_scratch(g, max_chunk * es + 64 + seg * es);
    rr = calloc(max_segs, sizeof(*rr));
    sr = calloc(max_segs, sizeof(*sr));
    ptr = calloc(max_segs, sizeof(*ptr));
    if ((tmp == NULL && max_chunk > 0) || rr == NULL || sr == NULL ||
        ptr == NULL) {
        st = td_error(TD_ERR_NO_MEMORY, "coll: all_reduce: out of memory for "
                      "%zu segments", max_segs);
        goto out;
    }
    for (int phase = 0; phase < 2 && st == TD_OK; phase++) {
        for (int s = 0; s < n - 1; s++) {
            /* reduce-scatter: send chunk me-s, get me-s-1 and reduce it;
             * all-gather: send me+1-s (complete), get me-s in place. */
            int sc = phase == 0 ? (me - s + 2 * n) % n
                                : (me + 1 - s + 2 * n) % n;
            int rc = phase == 0 ? (me - s - 1 + 2 * n) % n
                                : (me - s + 2 * n) % n;
            size_t s0, sl, r0, rl, ns, nr;
            uint32_t tag0 = (uint32_t)(phase << 30 | s << 16);

            chunk(count, n, sc, &s0, &sl);
            chunk(count, n, rc, &r0, &rl);
            ns = (sl + seg - 1) / seg;
            nr = (rl + seg - 1) / seg;
            for (size_t i = 0; i < nr && st == TD_OK; i++) {
                size_t off = i * seg, len = rl - off < seg ? rl - off : seg;
                void *dst = phase == 0 ? tmp + off * es
                                       : b + (r0 + off) * es;

                st = coll_irecv(op, &rr[i], left, tag0 | (uint32_t)i, dst,
                                len * es);
                if (phase == 0 && tmp != NULL) {
                    /* read only by this thread's wait below (C9), one
                     * segment at a time, each reduced before the next */
                    rr[i].cma_dst = tmp + ((max_chunk * es + 63) & ~(size_t)63);
                }
            }
            for (size_t i = 0; i < ns && st == TD_OK; i++) {
                size_t off = i * seg, len = sl - off < seg ? sl - off : seg;

                st = coll_isend(op, &sr[i], right, tag0 | (uint32_t)i,
                                b + (s0 + off) * es, len * es);
                if (st != TD_OK) {
                    ns = i;
                }
            }
            if (st != TD_OK) {
                for (size_t i = 0; i < nr; i++) {
                    ptr[i] = &rr[i];
                }
                coll_step_wait(op, ptr, (int)nr);
                for (size_t i = 0; i < ns; i++) {
                    ptr[i] = &sr[i];
                }
                coll_step_wait(op, ptr, (int)ns);
                break;
            }
            for (size_t i = 0; i < nr; i++) {
                coll_req_t *one = &rr[i];
                td_status_t s2 = coll_step_wait(op, &one, 1);

                if (s2 != TD_OK) {
                    st = s2;
                    for (size_t j = i + 1; j < nr; j++) {
                        one = &rr[j];
                        coll_step_wait(op, &one, 1);
                    }
                    break;
                }
                if (phase == 0) {
                    size_t off = i * seg, len = rl - off < seg ? rl - off
                                                               : seg;

                    coll_reduce_into(b + (r0 + off) * es,
                                     rr[i].cma_landed ? rr[i].cma_dst
                                                      : tmp + off * es,
                                     len, dt, rop);
                }
            }
            for (size_t i = 0; i < ns; i++) {
                ptr[i] = &sr[i];
            }
            {
                td_status_t s3 = coll_step_wait(op, ptr, (int)ns);

                if (st == TD_OK) {
                    st = s3;
                }
            }
            if (st != TD_OK) {
                break;
            }
        }
        if (phase == 0 && st == TD_OK && rop == TD_REDUCE_AVG) {
            size_t s0, l;

            chunk(count, n, (me + 1) % n, &s0, &l);
            coll_divide(b + s0 * es, l, dt, n);
        }
    }
out:
    free(rr);
    free(sr);
    free(ptr);
    return st;
}
