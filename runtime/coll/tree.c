/* tree.c: the rooted collectives: broadcast and reduce (binomial tree, or
 * linear: the root talks to every member), gather and scatter (linear:
 * the root posts every receive at once, so all members' bodies move in
 * parallel straight into place).
 *
 * Run by the thread running the group's operation (work.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/coll/tree.h"
#include "runtime/coll/reduce.h"

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
