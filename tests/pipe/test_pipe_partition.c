/* test_pipe_partition.c: td_pipe_partition (runtime/pipe/partition.c):
 * hand cases (the example's model, a heavy first layer, a heavy last
 * one), every split of small chains enumerated against its answer, and
 * bad arguments refused naming the value. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include <todist/pipe.h>
#include "tests/tap.h"

/* The largest stage of split FIRST. */
static double
max_stage(const double *cost, int S, const int *first)
{
    double worst = 0;

    for (int s = 0; s < S; s++) {
        double c = 0;
        for (int l = first[s]; l < first[s + 1]; l++) {
            c += cost[l];
        }
        worst = c > worst ? c : worst;
    }
    return worst;
}

/* The least largest stage over every split of N layers into S stages
 * (each split: S-1 cut points among 1..N-1, in order). */
static double
brute(const double *cost, int N, int S, int *first, int k, double sofar)
{
    double best = INFINITY;

    if (k == S) {
        first[S] = N;
        return fmax(sofar, max_stage(cost, S, first));
    }
    for (int c = first[k - 1] + 1; c <= N - (S - k); c++) {
        first[k] = c;
        best = fmin(best, brute(cost, N, S, first, k + 1, sofar));
    }
    return best;
}

static int
split_ok(const int *first, int N, int S)
{
    if (first[0] != 0 || first[S] != N) {
        return 0;
    }
    for (int s = 0; s < S; s++) {
        if (first[s + 1] <= first[s]) {
            return 0;
        }
    }
    return 1;
}

int
main(void)
{
    int first[10], tmp[10], bad = 0, worse = 0, cases = 0;
    unsigned seed = 12345;

    plan(13);

    /* examples/pipeline_mlp's model in units of one 784x784 product:
     * layer 0 has no input gradient (F + W = 2), layers 1-7 F + B + W =
     * 3, the 784x10 layer and the loss 0.05: over 2 stages the best
     * whole-layer split is 4 + 5 (11 against 12.05); 5 + 4 gives 14 */
    {
        double c[9] = {2, 3, 3, 3, 3, 3, 3, 3, 0.05};
        is_int(td_pipe_partition(c, 9, 2, first), TD_OK, "mlp model: ok");
        is_int(first[1], 4, "mlp model, 2 stages: layers 0-3 | 4-8");
        td_pipe_partition(c, 9, 4, first);
        is_double(max_stage(c, 4, first), 6.05, 1e-12,
                  "mlp model, 4 stages: largest stage 6.05 (2 | 2 | 2 | 3 "
                  "layers)");
    }
    /* a heavy first layer (784x512 before 512x512's: 1.53) */
    {
        double c[5] = {4.6, 1, 1, 1, 1};
        td_pipe_partition(c, 5, 2, first);
        is_int(first[1], 1, "a heavy first layer gets a stage of its own");
    }
    /* equal costs: the later stages take the extra layers */
    {
        double c[7] = {1, 1, 1, 1, 1, 1, 1};
        td_pipe_partition(c, 7, 3, first);
        ok(first[1] == 2 && first[2] == 4 && first[3] == 7,
           "7 equal layers over 3 stages: 2 | 2 | 3 (got %d | %d | %d)",
           first[1], first[2] - first[1], 7 - first[2]);
    }
    /* as many stages as layers: one each */
    {
        double c[3] = {5, 0, 1};
        td_pipe_partition(c, 3, 3, first);
        ok(first[0] == 0 && first[1] == 1 && first[2] == 2 && first[3] == 3,
           "3 layers, 3 stages: one each, a zero cost included");
    }
    /* every split of random chains of up to 9 layers over up to 4 stages */
    for (int N = 1; N <= 9; N++) {
        for (int S = 1; S <= 4 && S <= N; S++) {
            for (int r = 0; r < 20; r++) {
                double c[9];
                for (int l = 0; l < N; l++) {
                    seed = seed * 1103515245u + 12345u;
                    c[l] = (double)((seed >> 16) % 1000) / 100.0;
                }
                cases++;
                if (td_pipe_partition(c, N, S, first) != TD_OK ||
                    !split_ok(first, N, S)) {
                    bad++;
                    continue;
                }
                tmp[0] = 0;
                if (max_stage(c, S, first) > brute(c, N, S, tmp, 1, 0) +
                                                  1e-9) {
                    worse++;
                }
            }
        }
    }
    is_int(bad, 0, "%d random chains: every answer a split of every layer "
           "into S non-empty stages", cases);
    is_int(worse, 0, "%d random chains: no split has a smaller largest "
           "stage (all enumerated)", cases);

    /* bad arguments */
    {
        double c[3] = {1, 2, 3}, n[2] = {1, NAN}, neg[2] = {1, -1};
        is_int(td_pipe_partition(c, 2, 3, first), TD_ERR_INVALID,
               "more stages than layers: refused");
        like(td_last_error(), "2 layers cannot give each of 3 stages",
             "the error names both counts");
        is_int(td_pipe_partition(n, 2, 1, first), TD_ERR_INVALID,
               "a NaN cost: refused");
        like(td_last_error(), "cost\\[1\\] = -?nan", "the error names it");
        is_int(td_pipe_partition(neg, 2, 2, first), TD_ERR_INVALID,
               "a negative cost: refused");
    }
    return exit_status();
}
