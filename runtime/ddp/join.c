/* runtime/ddp/join.c: uneven inputs for DDP (todist/join.h): the join
 * count each iteration, the joined ranks' shadow reductions, the divisor,
 * and the final parameter broadcast from the last joiner.
 *
 * Invariants (J1-J5):
 *   J1 every counted iteration is one all_reduce(SUM) of an int64 pair
 *      [still training, joined before any iteration] on the DDP group:
 *      td_ddp_join_step contributes [1, 0], a shadowing rank [0, 0] (or
 *      [0, 1] when it never trained), so the counts pair up one to one.
 *   J2 a shadowing rank answers an iteration with one all_reduce(AVG) per
 *      DDP bucket, in bucket order, of a zero buffer of the bucket's size
 *      and dtype: the same sequence td_ddp_wait's buckets issue (DDP1).
 *   J3 the shadow loop ends exactly when the count is 0, which every rank
 *      sees in the same round (all have called td_ddp_join_end).
 *   J4 after the loop the parameters of the rank with the most iterations
 *      (lowest group rank among ties) are broadcast to all: two
 *      all_reduces (MAX of iterations, MIN of candidate ranks) and one
 *      broadcast per parameter, in registration order.
 *   J5 with divide_by_initial_world_size = 0 the averaged gradients are
 *      multiplied by size / active inside the wait, before anyone reads
 *      them (.grad, or the distributed autograd context of DDP9), so they
 *      are the sum over the active ranks divided by their number. */
#include "config.h"

#include <stdlib.h>

#include "runtime/ddp/ddp_internal.h"
#include <todist/join.h>

struct td_ddp_join {
    td_ddp_t   *ddp;
    td_group_t *group;
    int         divide_by_initial;
    int64_t     iterations;    /* join_step calls on this rank */
    int         active;        /* ranks training in the last count */
    int         last_joiner;
    int         ended;
};

td_status_t
td_ddp_join_begin(td_ddp_t *ddp, const td_ddp_join_opts_t *opts,
                  td_ddp_join_t **join_p)
{
    td_ddp_join_t *j;

    if (ddp == NULL) {
        return td_error(TD_ERR_INVALID, "join: the DDP object is NULL");
    }
    if (td_ddp_has_comm_hook(ddp)) {
        return td_error(TD_ERR_UNSUPPORTED, "join: the DDP object has a "
                        "comm_hook; Join shadows the default all_reduce "
                        "(average) only");
    }
    j = calloc(1, sizeof(*j));
    if (j == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "join: out of memory");
    }
    j->ddp = ddp;
    j->group = td_ddp_group(ddp);
    j->divide_by_initial = opts != NULL ? opts->divide_by_initial_world_size
                                        : 1;
    j->active = td_group_size(j->group);
    j->last_joiner = -1;
    *join_p = j;
    return TD_OK;
}

/* J1: one counted round; *ACTIVE_P the ranks still training. */
static td_status_t
count_round(td_ddp_join_t *j, int training, int *active_p)
{
    int64_t two = 2;
    td_tensor_t *t;
    int64_t *v;
    td_status_t status = td_tensor_empty(&two, 1, TD_INT64, TD_CPU, &t);

    if (status != TD_OK) {
        return status;
    }
    v = td_tensor_data(t);
    v[0] = training;
    v[1] = !training && j->iterations == 0;
    status = td_all_reduce(j->group, t, TD_REDUCE_SUM);
    if (status == TD_OK && v[1] > 0) {
        status = td_error(TD_ERR_UNSUPPORTED, "join: %lld rank(s) ran out of "
                          "batches before their first iteration (rank %d "
                          "has run %lld); every rank must train at least one "
                          "iteration, which rebuilds the DDP buckets",
                          (long long)v[1], td_group_rank(j->group),
                          (long long)j->iterations);
    }
    if (status == TD_OK && (v[0] < 0 || v[0] > td_group_size(j->group))) {
        status = td_error(TD_ERR_PROTOCOL, "join: the group counts %lld "
                          "ranks training of %d", (long long)v[0],
                          td_group_size(j->group));
    }
    if (status == TD_OK) {
        *active_p = (int)v[0];
    }
    td_tensor_release(t);
    return status;
}

td_status_t
td_ddp_join_step(td_ddp_join_t *j)
{
    td_status_t status;

    if (j->ended) {
        return td_error(TD_ERR_STATE, "join: td_ddp_join_step after "
                        "td_ddp_join_end on rank %d", td_group_rank(j->group));
    }
    status = count_round(j, 1, &j->active);
    if (status == TD_OK) {
        j->iterations++;
    }
    return status;
}

td_status_t
td_ddp_join_wait(td_ddp_join_t *j)
{
    int size = td_group_size(j->group);

    /* J5: from sum / size to sum / active, inside the wait: in a
     * distributed backward the averages go into the context there */
    return td__ddp_wait_scaled(j->ddp, j->divide_by_initial ||
                                       j->active == size
                                       ? 1.0 : (double)size / j->active);
}

/* J2: zeros through every bucket's reduction, in bucket order. */
static td_status_t
shadow_iteration(td_ddp_join_t *j)
{
    td_status_t status = TD_OK;

    for (int b = 0; status == TD_OK && b < td_ddp_num_buckets(j->ddp); b++) {
        td_tensor_t *flat = td_ddp_bucket_tensor(j->ddp, b), *z;
        int64_t n = td_tensor_numel(flat);

        status = td_tensor_zeros(&n, 1, td_tensor_dtype(flat), &z);
        if (status == TD_OK) {
            status = td_all_reduce(j->group, z, TD_REDUCE_AVG);
            td_tensor_release(z);
        }
    }
    return status;
}

/* J4: the rank that trained longest (lowest rank among ties). */
static td_status_t
sync_final_model(td_ddp_join_t *j)
{
    int64_t one = 1;
    td_tensor_t *t;
    int64_t *v;
    td_status_t status = td_tensor_empty(&one, 1, TD_INT64, TD_CPU, &t);

    if (status != TD_OK) {
        return status;
    }
    v = td_tensor_data(t);
    v[0] = j->iterations;
    status = td_all_reduce(j->group, t, TD_REDUCE_MAX);
    if (status == TD_OK) {
        v[0] = v[0] == j->iterations ? td_group_rank(j->group)
                                     : td_group_size(j->group);
        status = td_all_reduce(j->group, t, TD_REDUCE_MIN);
    }
    if (status == TD_OK && (v[0] < 0 || v[0] >= td_group_size(j->group))) {
        status = td_error(TD_ERR_PROTOCOL, "join: last joiner %lld is not a "
                          "rank of the group of %d", (long long)v[0],
                          td_group_size(j->group));
    }
    if (status == TD_OK) {
        j->last_joiner = (int)v[0];
    }
    td_tensor_release(t);
    for (int i = 0; status == TD_OK && i < td_ddp_num_params(j->ddp); i++) {
        status = td_broadcast(j->group, td_ddp_param(j->ddp, i),
                              j->last_joiner);
        if (status == TD_OK) {
            td_tensor_bump_version(td_ddp_param(j->ddp, i));
        }
    }
    return status;
}

td_status_t
td_ddp_join_end(td_ddp_join_t *j)
{
    td_status_t status;

    if (j->ended) {
        return td_error(TD_ERR_STATE, "join: td_ddp_join_end called twice on "
                        "rank %d", td_group_rank(j->group));
    }
    j->ended = 1;
    for (;;) {
        status = count_round(j, 0, &j->active);
        if (status != TD_OK || j->active == 0) {     /* J3 */
            break;
        }
        status = shadow_iteration(j);
        if (status != TD_OK) {
            break;
        }
    }
    if (status == TD_OK) {
        status = sync_final_model(j);
    }
    return status;
}

int
td_ddp_join_active(const td_ddp_join_t *j)
{
    return j->active;
}

int
td_ddp_join_last_joiner(const td_ddp_join_t *j)
{
    return j->last_joiner;
}

void
td_ddp_join_destroy(td_ddp_join_t *j)
{
    free(j);
}
