/* tree.c: the rooted collectives: broadcast and reduce (binomial tree, or
 * linear: the root talks to every member), gather and scatter (linear:
 * the root posts every receive at once, so all members' bodies move in
 * parallel straight into place).
 *
 * T1 A binomial broadcast's link that crosses hosts (op->tree_far, both
 *    its ends alike: run.c) carries the buffer in pieces of
 *    TD_TRANSPORT_FAR_SEG_BYTES (at most 0xffff, larger if need be),
 *    tagged TAG_PIECE | b << 16 | piece for the link 2^b away: each
 *    arrives in one UCX TCP segment and is delivered from it, not
 *    reassembled by UCX first (transport.c S3, as ring.c R2), and a
 *    member sends a piece on to its children as soon as the bytes it
 *    covers have arrived (a pipeline down the tree), every receive
 *    posted before. A link inside a host carries the whole buffer under
 *    tag 2^b, as where no link crosses: sent once it has all arrived.
 *    64 MiB between 2 hosts over 10 Gbit/s: bench/RESULTS.md.
 *
 * Run by the thread running the group's operation (work.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/coll/tree.h"
#include "runtime/coll/reduce.h"
#include "ucx_transport/transport.h"

#define TAG_PIECE 0x80000000u          /* T1: a piece of a far link */

/* Wait for REQS[0..N) and return the first error. */
static td_status_t
wait_all(coll_op_t *op, coll_req_t *reqs, int n)
{
    coll_req_t *stackp[16], **p = n <= 16 ? stackp : calloc((size_t)n,
                                                            sizeof(*p));
    td_status_t st;

    if (p == NULL) {
        /* Cannot return before they are done (C4): one at a time. */
        st = TD_OK;
        for (int i = 0; i < n; i++) {
            coll_req_t *one = &reqs[i];
            td_status_t s = coll_step_wait(op, &one, 1);

            st = st != TD_OK ? st : s;
        }
        return st;
    }
    for (int i = 0; i < n; i++) {
        p[i] = (reqs[i].type == REQ_RECV_COLL || reqs[i].type ==
                REQ_SEND_COLL) && reqs[i].g != NULL ? &reqs[i] : NULL;
    }
    st = coll_step_wait(op, p, n);
    if (p != stackp) {
        free(p);
    }
    return st;
}

/* T1: link 2^B's piece, bytes: the whole buffer inside a host. */
static size_t
link_piece(const coll_op_t *op, int b, size_t nbytes)
{
    size_t seg = nbytes > 0 ? nbytes : 1;

    if (op->tree_far >> b & 1) {
        seg = TD_TRANSPORT_FAR_SEG_BYTES;
        (void)coll_segs(nbytes, &seg);
    }
    return seg;
}

/* Post the pieces of link 2^B to group rank PEER (SEND) or from it into
 * R[*k..], those whose bytes end at or before HAVE, from piece *DONE of
 * NP (PIECE bytes each). */
static td_status_t
link_post(coll_op_t *op, coll_req_t *r, size_t *k, int send, int peer, int b,
          char *buf, size_t nbytes, size_t piece, size_t np, size_t *done,
          size_t have)
{
    int far = (int)(op->tree_far >> b & 1);

    while (*done < np) {
        size_t off = *done * piece, len = nbytes - off < piece ? nbytes - off
                                                               : piece;
        uint32_t tag = far ? TAG_PIECE | (uint32_t)b << 16 | (uint32_t)*done
                           : 1u << b;
        td_status_t st;

        if (off + len > have) {
            break;
        }
        st = send ? coll_isend(op, &r[*k], peer, tag, buf + off, len)
                  : coll_irecv(op, &r[*k], peer, tag, buf + off, len);
        if (st != TD_OK) {
            return st;
        }
        if (send && far) {
            op->g->tree_pieces++;         /* (said when the group goes) */
            op->g->tree_piece_bytes = piece;
        }
        (*k)++;
        (*done)++;
    }
    return TD_OK;
}

/* T1: the binomial broadcast where some link of this member crosses
 * hosts. PB: the parent's link (-1 at the root); KB[0..NK): the
 * children's, farthest subtree first. */
static td_status_t
bc_pipe(coll_op_t *op, char *buf, size_t nbytes, int pb, const int *kb,
        int nk)
{
    int n = op->g->n, root = op->desc.root;
    int vr = (op->g->me - root + n) % n;
    size_t rp = 0, nr = 0, kp[32], kn[32], ks[32], all = 0, k = 0, nrd = 0;
    size_t have = pb < 0 ? nbytes : 0, got;
    coll_req_t *req;
    td_status_t st = TD_OK;

    if (pb >= 0) {
        rp = link_piece(op, pb, nbytes);
        nr = coll_segs(nbytes, &rp);
    }
    for (int i = 0; i < nk; i++) {
        kp[i] = link_piece(op, kb[i], nbytes);
        kn[i] = coll_segs(nbytes, &kp[i]);
        ks[i] = 0;
        all += kn[i];
    }
    req = calloc(nr + all + 1, sizeof(*req));
    if (req == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: broadcast: out of memory "
                        "for %zu pieces", nr + all);
    }
    if (pb >= 0) {
        st = link_post(op, req, &k, 0, ((vr ^ 1 << pb) + root) % n, pb, buf,
                       nbytes, rp, nr, &nrd, nbytes);
    }
    for (got = 0;; got++) {
        for (int i = 0; i < nk && st == TD_OK; i++) {
            st = link_post(op, req, &k, 1, ((vr ^ 1 << kb[i]) + root) % n,
                           kb[i], buf, nbytes, kp[i], kn[i], &ks[i], have);
        }
        if (got >= nrd || st != TD_OK) {
            break;
        }
        {
            coll_req_t *one = &req[got];

            st = coll_step_wait(op, &one, 1);
        }
        have = got + 1 == nr ? nbytes : (got + 1) * rp;
    }
    /* everything posted is waited for, also after a failure (C4) */
    {
        td_status_t s2 = wait_all(op, req + got, (int)(k - got));

        st = st != TD_OK ? st : s2;
    }
    free(req);
    return st;
}

td_status_t
coll_broadcast_run(coll_op_t *op, void *buf, size_t nbytes)
{
    td_group_t *g = op->g;
    int n = g->n, me = g->me, root = op->desc.root;
    int vr = (me - root + n) % n;
    td_status_t st = TD_OK;

    if (n == 1) {
        return TD_OK;
    }
    if (op->algo == ALGO_LINEAR) {
        coll_req_t *reqs;

        if (me != root) {
            return coll_sendrecv(op, -1, NULL, 0, root, buf, nbytes, 0);
        }
        reqs = calloc((size_t)n, sizeof(*reqs));
        if (reqs == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
        }
        for (int i = 0; i < n && st == TD_OK; i++) {
            if (i != root) {
                st = coll_isend(op, &reqs[i], i, 0, buf, nbytes);
            }
        }
        {
            td_status_t s2 = wait_all(op, reqs, n);

            st = st != TD_OK ? st : s2;
        }
        free(reqs);
        return st;
    }
    /* binomial: receive from the parent, then send to children, the
     * farthest subtree first (it has the most below it). */
    int mask = 1;

    if (op->tree_far != 0) {
        int pb = -1, kb[32], nk = 0, b = 0;

        while ((1 << b) < n && !(vr & 1 << b)) {
            b++;
        }
        if ((1 << b) < n) {
            pb = b;                         /* vr's lowest bit */
        }
        for (b--; b >= 0; b--) {
            if (vr + (1 << b) < n && nk < 32) {
                kb[nk++] = b;
            }
        }
        return bc_pipe(op, buf, nbytes, pb, kb, nk);
    }

    while (mask < n) {
        if (vr & mask) {
            int parent = ((vr - mask) + root) % n;

            st = coll_sendrecv(op, -1, NULL, 0, parent, buf, nbytes,
                               (uint32_t)mask);
            if (st != TD_OK) {
                return st;
            }
            break;
        }
        mask <<= 1;
    }
    {
        coll_req_t reqs[32];
        int k = 0;

        memset(reqs, 0, sizeof(reqs));
        for (mask >>= 1; mask > 0; mask >>= 1) {
            if (vr + mask < n) {
                st = coll_isend(op, &reqs[k++], (vr + mask + root) % n,
                                (uint32_t)mask, buf, nbytes);
                if (st != TD_OK) {
                    break;
                }
            }
        }
        {
            td_status_t s2 = wait_all(op, reqs, k);

            st = st != TD_OK ? st : s2;
        }
    }
    return st;
}

td_status_t
coll_reduce_run(coll_op_t *op, void *buf, size_t count)
{
    td_group_t *g = op->g;
    int n = g->n, me = g->me, root = op->desc.root;
    int vr = (me - root + n) % n;
    size_t bytes = count * op->esize;
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    char *acc, *tmp, *scratch;
    td_status_t st = TD_OK;

    if (n == 1) {
        if (rop == TD_REDUCE_AVG) {
            coll_divide(buf, count, dt, 1);
        }
        return TD_OK;
    }
    /* Only the root's tensor changes: others accumulate in scratch. */
    scratch = coll_scratch(g, 2 * bytes + 1);
    if (scratch == NULL) {
        return TD_ERR_NO_MEMORY;
    }
    acc = me == root ? buf : scratch;
    tmp = scratch + bytes;
    if (me != root && bytes > 0) {
        memcpy(acc, buf, bytes);
    }
    if (op->algo == ALGO_LINEAR) {
        if (me != root) {
            return coll_sendrecv(op, root, acc, bytes, -1, NULL, 0, 0);
        }
        for (int i = 0; i < n && st == TD_OK; i++) {
            if (i != root) {
                st = coll_sendrecv(op, -1, NULL, 0, i, tmp, bytes, 0);
                if (st == TD_OK) {
                    coll_reduce_into(acc, tmp, count, dt, rop);
                }
            }
        }
    } else {
        for (int mask = 1; mask < n && st == TD_OK; mask <<= 1) {
            if (vr & mask) {
                st = coll_sendrecv(op, ((vr - mask) + root) % n, acc, bytes,
                                   -1, NULL, 0, (uint32_t)mask);
                break;
            }
            if (vr + mask < n) {
                st = coll_sendrecv(op, -1, NULL, 0, (vr + mask + root) % n,
                                   tmp, bytes, (uint32_t)mask);
                if (st == TD_OK) {
                    coll_reduce_into(acc, tmp, count, dt, rop);
                }
            }
        }
    }
    if (st == TD_OK && me == root && rop == TD_REDUCE_AVG) {
        coll_divide(acc, count, dt, n);
    }
    return st;
}

td_status_t
coll_gather_run(coll_op_t *op, void *out, const void *in, size_t nbytes)
{
    td_group_t *g = op->g;
    int n = g->n, me = g->me, root = op->desc.root;
    coll_req_t *reqs;
    td_status_t st = TD_OK, s2;

    if (me != root) {
        return coll_sendrecv(op, root, in, nbytes, -1, NULL, 0, 0);
    }
    if (nbytes > 0) {
        memcpy((char *)out + (size_t)me * nbytes, in, nbytes);
    }
    reqs = calloc((size_t)n, sizeof(*reqs));
    if (reqs == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    for (int i = 0; i < n && st == TD_OK; i++) {
        if (i != me) {
            st = coll_irecv(op, &reqs[i], i, 0, (char *)out + (size_t)i *
                            nbytes, nbytes);
        }
    }
    s2 = wait_all(op, reqs, n);
    free(reqs);
    return st != TD_OK ? st : s2;
}

td_status_t
coll_scatter_run(coll_op_t *op, void *out, const void *in, size_t nbytes)
{
    td_group_t *g = op->g;
    int n = g->n, me = g->me, root = op->desc.root;
    coll_req_t *reqs;
    td_status_t st = TD_OK, s2;

    if (me != root) {
        return coll_sendrecv(op, -1, NULL, 0, root, out, nbytes, 0);
    }
    if (nbytes > 0) {
        memcpy(out, (const char *)in + (size_t)me * nbytes, nbytes);
    }
    reqs = calloc((size_t)n, sizeof(*reqs));
    if (reqs == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory");
    }
    for (int i = 0; i < n && st == TD_OK; i++) {
        if (i != me) {
            st = coll_isend(op, &reqs[i], i, 0, (const char *)in +
                            (size_t)i * nbytes, nbytes);
        }
    }
    s2 = wait_all(op, reqs, n);
    free(reqs);
    return st != TD_OK ? st : s2;
}
