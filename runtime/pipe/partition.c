/* runtime/pipe/partition.c: a chain of layers into contiguous stages of
 * balanced cost (td_pipe_partition, todist/pipe.h): GPipe's and
 * PipeDream's partitioner for a chain, exact by dynamic programming. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include <todist/pipe.h>

/* Largest n_layers^2 x n_stages the search takes (about a second). */
#define PARTITION_WORK_MAX 1e9

td_status_t
td_pipe_partition(const double *cost, int n_layers, int n_stages, int *first)
{
    size_t n, s_;
    double *pre = NULL, *best = NULL;
    int *cut = NULL;
    td_status_t st = TD_OK;

    if (cost == NULL || first == NULL) {
        return td_error(TD_ERR_INVALID, "pipe: partition: cost or first is "
                        "NULL");
    }
    if (n_stages < 1 || n_layers < n_stages) {
        return td_error(TD_ERR_INVALID, "pipe: partition: %d layers cannot "
                        "give each of %d stages one", n_layers, n_stages);
    }
    if ((double)n_layers * n_layers * n_stages > PARTITION_WORK_MAX) {
        return td_error(TD_ERR_INVALID, "pipe: partition: %d layers x %d "
                        "stages is too large (n_layers^2 x n_stages above "
                        "%.0e)", n_layers, n_stages, PARTITION_WORK_MAX);
    }
    for (int l = 0; l < n_layers; l++) {
        if (!(cost[l] >= 0) || isinf(cost[l])) {
            return td_error(TD_ERR_INVALID, "pipe: partition: cost[%d] = %g "
                            "is not a finite cost >= 0", l, cost[l]);
        }
    }
    n = (size_t)n_layers;
    s_ = (size_t)n_stages;
    pre = malloc(sizeof(double) * (n + 1));
    best = malloc(sizeof(double) * (n + 1) * s_);
    cut = malloc(sizeof(int) * (n + 1) * s_);
    if (pre == NULL || best == NULL || cut == NULL) {
        st = td_error(TD_ERR_NO_MEMORY, "pipe: partition: out of memory for "
                      "%d layers x %d stages", n_layers, n_stages);
        goto out;
    }
    pre[0] = 0;
    for (size_t l = 0; l < n; l++) {
        pre[l + 1] = pre[l] + cost[l];
    }
    /* best[k][i]: the least largest stage of layers 0..i-1 in k+1 stages;
     * cut[k][i]: where its last stage begins, the first j that reaches
     * the least (equal costs: later stages get the extra layers, as
     * stage s from s*n/S does), so equal costs give one split. */
    for (size_t i = 1; i <= n; i++) {
        best[i] = pre[i];
        cut[i] = 0;
    }
    for (size_t k = 1; k < s_; k++) {
        double *b = best + k * (n + 1), *prev = b - (n + 1);
        int *c = cut + k * (n + 1);
        for (size_t i = k + 1; i <= n; i++) {
            b[i] = INFINITY;
            c[i] = (int)k;
            for (size_t j = k; j < i; j++) {
                double v = fmax(prev[j], pre[i] - pre[j]);
                if (v < b[i]) {
                    b[i] = v;
                    c[i] = (int)j;
                }
            }
        }
    }
    first[n_stages] = n_layers;
    for (size_t k = s_, i = n; k-- > 0;) {
        i = (size_t)cut[k * (n + 1) + i];
        first[k] = (int)i;
    }
out:
    free(pre);
    free(best);
    free(cut);
    return st;
}
