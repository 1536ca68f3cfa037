/* api.c: the collective entry points of todist/coll.h: argument checks
 * (nothing is sent for a bad call), then the call is submitted to the
 * group's queue (work.c), which runs it (run.c).
 *
 * Thread safety: all entry points are thread-safe. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todist/coll.h"
#include "runtime/coll/work.h"
#include "runtime/coll/reduce.h"
#include "kernels/device.h"

/* ---- checks --------------------------------------------------------------- */

static td_status_t
check_group(const char *fn, td_group_t *g)
{
    if (g == NULL) {
        return td_error(TD_ERR_INVALID, "coll: %s: group is NULL", fn);
    }
    return coll_group_check(g);
}

static td_status_t
check_tensor(const char *fn, const char *name, td_tensor_t *t)
{
    td_device_t dev;

    if (t == NULL) {
        return td_error(TD_ERR_INVALID, "coll: %s: tensor '%s' is NULL", fn,
                        name);
    }
    dev = td_tensor_device(t);
    if (dev.type != TD_DEVICE_CPU &&
        td__device_check(dev) != TD_OK) {      /* routed in coll_run */
        char why[256];

        snprintf(why, sizeof(why), "%s", td_last_error());
        return td_error(TD_ERR_UNSUPPORTED, "coll: %s: tensor '%s' is on "
                        "cuda:%d: %s", fn, name, dev.index, why);
    }
    if ((unsigned)td_tensor_dtype(t) >= TD_NUM_DTYPES) {
        return td_error(TD_ERR_DTYPE, "coll: %s: tensor '%s' has an unknown "
                        "dtype", fn, name);
    }
    if (!td_tensor_is_contiguous(t)) {
        return td_error(TD_ERR_INVALID, "coll: %s: tensor '%s' is not "
                        "contiguous (make it so with td_tensor_contiguous "
                        "and copy the result back)", fn, name);
    }
    return TD_OK;
}

static td_status_t
check_root(const char *fn, td_group_t *g, int root)
{
    if (root < 0 || root >= g->n) {
        return td_error(TD_ERR_RANGE, "coll: %s: root %d is not in group %u "
                        "of %d", fn, root, g->id, g->n);
    }
    return TD_OK;
}

static td_status_t
check_op(const char *fn, td_reduce_op_t op, td_tensor_t *t)
{
    if (!coll_op_valid(op, td_tensor_dtype(t))) {
        return td_error(TD_ERR_INVALID, "coll: %s: reduce op %d (%s) is not "
                        "defined on %s", fn, (int)op, td_reduce_op_name(op),
                        td_dtype_name(td_tensor_dtype(t)));
    }
    return TD_OK;
}

static td_status_t
check_pair(const char *fn, td_tensor_t *big, const char *bn, td_tensor_t *one,
           const char *on, int64_t factor)
{
    if (td_tensor_dtype(big) != td_tensor_dtype(one)) {
        return td_error(TD_ERR_DTYPE, "coll: %s: '%s' is %s but '%s' is %s",
                        fn, bn, td_dtype_name(td_tensor_dtype(big)), on,
                        td_dtype_name(td_tensor_dtype(one)));
    }
    if (td_tensor_numel(big) != factor * td_tensor_numel(one)) {
        return td_error(TD_ERR_SHAPE, "coll: %s: '%s' has %lld elements, "
                        "needs %lld (the group size %lld x '%s''s %lld)", fn,
                        bn, (long long)td_tensor_numel(big),
                        (long long)(factor * td_tensor_numel(one)),
                        (long long)factor, on,
                        (long long)td_tensor_numel(one));
    }
    return TD_OK;
}

#define TRY(x) do { td_status_t st_ = (x); if (st_ != TD_OK) return st_; } \
    while (0)

/* ---- entry points ------------------------------------------------------------ */

static td_status_t
go(td_group_t *g, coll_args_t *a, td_work_t **work_p, int async,
   const char *fn)
{
    if (async && work_p == NULL) {
        return td_error(TD_ERR_INVALID, "coll: %s: work_p is NULL", fn);
    }
    return coll_submit(g, a, async ? work_p : NULL);
}

static td_status_t
all_reduce(td_group_t *g, td_tensor_t *t, td_reduce_op_t op, td_work_t **w,
           int async)
{
    const char *fn = async ? "td_all_reduce_async" : "td_all_reduce";
    coll_args_t a = { .kind = COLL_ALL_REDUCE, .t = t, .op = op };

    TRY(check_group(fn, g));
    TRY(check_tensor(fn, "t", t));
    TRY(check_op(fn, op, t));
    return go(g, &a, w, async, fn);
}

td_status_t
td_all_reduce(td_group_t *g, td_tensor_t *t, td_reduce_op_t op)
{
    return all_reduce(g, t, op, NULL, 0);
}

td_status_t
td_all_reduce_async(td_group_t *g, td_tensor_t *t, td_reduce_op_t op,
                    td_work_t **work_p)
{
    return all_reduce(g, t, op, work_p, 1);
}

static td_status_t
broadcast(td_group_t *g, td_tensor_t *t, int root, td_work_t **w, int async)
{
    const char *fn = async ? "td_broadcast_async" : "td_broadcast";
    coll_args_t a = { .kind = COLL_BROADCAST, .t = t, .root = root };

    TRY(check_group(fn, g));
    TRY(check_tensor(fn, "t", t));
    TRY(check_root(fn, g, root));
    return go(g, &a, w, async, fn);
}

td_status_t
td_broadcast(td_group_t *g, td_tensor_t *t, int root)
{
    return broadcast(g, t, root, NULL, 0);
}

td_status_t
td_broadcast_async(td_group_t *g, td_tensor_t *t, int root,
                   td_work_t **work_p)
{
    return broadcast(g, t, root, work_p, 1);
}

static td_status_t
reduce(td_group_t *g, td_tensor_t *t, int root, td_reduce_op_t op,
       td_work_t **w, int async)
{
    const char *fn = async ? "td_reduce_async" : "td_reduce";
    coll_args_t a = { .kind = COLL_REDUCE, .t = t, .root = root, .op = op };

    TRY(check_group(fn, g));
    TRY(check_tensor(fn, "t", t));
    TRY(check_root(fn, g, root));
    TRY(check_op(fn, op, t));
    return go(g, &a, w, async, fn);
}

td_status_t
td_reduce(td_group_t *g, td_tensor_t *t, int root, td_reduce_op_t op)
{
    return reduce(g, t, root, op, NULL, 0);
}

td_status_t
td_reduce_async(td_group_t *g, td_tensor_t *t, int root, td_reduce_op_t op,
                td_work_t **work_p)
{
    return reduce(g, t, root, op, work_p, 1);
}

static td_status_t
all_gather(td_group_t *g, td_tensor_t *out, td_tensor_t *in, td_work_t **w,
           int async)
{
    const char *fn = async ? "td_all_gather_async" : "td_all_gather";
    coll_args_t a = { .kind = COLL_ALL_GATHER, .t = out, .in = in };

    TRY(check_group(fn, g));
    TRY(check_tensor(fn, "out", out));
    TRY(check_tensor(fn, "in", in));
    TRY(check_pair(fn, out, "out", in, "in", g->n));
    return go(g, &a, w, async, fn);
}

td_status_t
td_all_gather(td_group_t *g, td_tensor_t *out, td_tensor_t *in)
{
    return all_gather(g, out, in, NULL, 0);
}

td_status_t
td_all_gather_async(td_group_t *g, td_tensor_t *out, td_tensor_t *in,
                    td_work_t **work_p)
{
    return all_gather(g, out, in, work_p, 1);
}

td_status_t
td_all_gather_list(td_group_t *g, td_tensor_t **outs, td_tensor_t *in)
{
    const char *fn = "td_all_gather_list";
    coll_args_t a = { .kind = COLL_ALL_GATHER, .in = in, .outs = outs };

    TRY(check_group(fn, g));
    TRY(check_tensor(fn, "in", in));
    if (outs == NULL) {
        return td_error(TD_ERR_INVALID, "coll: %s: outs is NULL", fn);
    }
    for (int i = 0; i < g->n; i++) {
        char name[32];

        snprintf(name, sizeof(name), "outs[%d]", i);
        TRY(check_tensor(fn, name, outs[i]));
        TRY(check_pair(fn, outs[i], name, in, "in", 1));
    }
    a.n_outs = g->n;
    return go(g, &a, NULL, 0, fn);
}

static td_status_t
gather(td_group_t *g, td_tensor_t *out, td_tensor_t *in, int root,
       td_work_t **w, int async)
{
    const char *fn = async ? "td_gather_async" : "td_gather";
    coll_args_t a = { .kind = COLL_GATHER, .t = out, .in = in, .root = root };

    TRY(check_group(fn, g));
    TRY(check_tensor(fn, "in", in));
    TRY(check_root(fn, g, root));
    if (g->me == root) {
        TRY(check_tensor(fn, "out", out));
        TRY(check_pair(fn, out, "out", in, "in", g->n));
    } else {
        a.t = NULL;              /* only the root's is written */
    }
    return go(g, &a, w, async, fn);
}

td_status_t
td_gather(td_group_t *g, td_tensor_t *out, td_tensor_t *in, int root)
{
    return gather(g, out, in, root, NULL, 0);
}

td_status_t
td_gather_async(td_group_t *g, td_tensor_t *out, td_tensor_t *in, int root,
                td_work_t **work_p)
{
    return gather(g, out, in, root, work_p, 1);
}

static td_status_t
scatter(td_group_t *g, td_tensor_t *out, td_tensor_t *in, int root,
        td_work_t **w, int async)
{
    const char *fn = async ? "td_scatter_async" : "td_scatter";
    coll_args_t a = { .kind = COLL_SCATTER, .t = out, .in = in, .root = root };

    TRY(check_group(fn, g));
    TRY(check_tensor(fn, "out", out));
    TRY(check_root(fn, g, root));
    if (g->me == root) {
        TRY(check_tensor(fn, "in", in));
        TRY(check_pair(fn, in, "in", out, "out", g->n));
    } else {
        a.in = NULL;             /* only the root's is read */
    }
    return go(g, &a, w, async, fn);
}

td_status_t
td_scatter(td_group_t *g, td_tensor_t *out, td_tensor_t *in, int root)
{
    return scatter(g, out, in, root, NULL, 0);
}

td_status_t
td_scatter_async(td_group_t *g, td_tensor_t *out, td_tensor_t *in, int root,
                 td_work_t **work_p)
{
    return scatter(g, out, in, root, work_p, 1);
}

static td_status_t
reduce_scatter(td_group_t *g, td_tensor_t *out, td_tensor_t *in,
               td_reduce_op_t op, td_work_t **w, int async)
{
    const char *fn = async ? "td_reduce_scatter_async" : "td_reduce_scatter";
    coll_args_t a = { .kind = COLL_REDUCE_SCATTER, .t = out, .in = in,
                      .op = op };

    TRY(check_group(fn, g));
    TRY(check_tensor(fn, "out", out));
    TRY(check_tensor(fn, "in", in));
    TRY(check_pair(fn, in, "in", out, "out", g->n));
    TRY(check_op(fn, op, out));
    return go(g, &a, w, async, fn);
}

td_status_t
td_reduce_scatter(td_group_t *g, td_tensor_t *out, td_tensor_t *in,
                  td_reduce_op_t op)
{
    return reduce_scatter(g, out, in, op, NULL, 0);
}

td_status_t
td_reduce_scatter_async(td_group_t *g, td_tensor_t *out, td_tensor_t *in,
                        td_reduce_op_t op, td_work_t **work_p)
{
    return reduce_scatter(g, out, in, op, work_p, 1);
}

static td_status_t
all_to_all(td_group_t *g, td_tensor_t *out, td_tensor_t *in, td_work_t **w,
           int async)
{
    const char *fn = async ? "td_all_to_all_async" : "td_all_to_all";
    coll_args_t a = { .kind = COLL_ALL_TO_ALL, .t = out, .in = in };

    TRY(check_group(fn, g));
    TRY(check_tensor(fn, "out", out));
    TRY(check_tensor(fn, "in", in));
    TRY(check_pair(fn, out, "out", in, "in", 1));
    if (td_tensor_numel(in) % g->n != 0) {
        return td_error(TD_ERR_SHAPE, "coll: %s: 'in' has %lld elements, not "
                        "a multiple of the group size %d", fn,
                        (long long)td_tensor_numel(in), g->n);
    }
    if (out == in) {
        return td_error(TD_ERR_INVALID, "coll: %s: 'out' and 'in' are the "
                        "same tensor", fn);
    }
    return go(g, &a, w, async, fn);
}

td_status_t
td_all_to_all(td_group_t *g, td_tensor_t *out, td_tensor_t *in)
{
    return all_to_all(g, out, in, NULL, 0);
}

td_status_t
td_all_to_all_async(td_group_t *g, td_tensor_t *out, td_tensor_t *in,
                    td_work_t **work_p)
{
    return all_to_all(g, out, in, work_p, 1);
}

td_status_t
td_group_barrier(td_group_t *g)
{
    coll_args_t a = { .kind = COLL_BARRIER };

    TRY(check_group("td_group_barrier", g));
    return go(g, &a, NULL, 0, "td_group_barrier");
}

td_status_t
td_group_barrier_async(td_group_t *g, td_work_t **work_p)
{
    coll_args_t a = { .kind = COLL_BARRIER };

    TRY(check_group("td_group_barrier_async", g));
    return go(g, &a, work_p, 1, "td_group_barrier_async");
}
