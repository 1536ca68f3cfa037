/* bench_topology: how long loading a topology and planning take, the cost
 * TODIST_BIND=closest adds to every rank's td_init.
 * usage: bench_topology [FILE.xml|-] [LOCAL_RANKS] [ITERATIONS]
 * ("-": this machine). Prints the median and the spread (min-max) of each
 * step in milliseconds. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <todist/topology.h>

static double
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int
cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
    const char *path = argc > 1 && strcmp(argv[1], "-") != 0 ? argv[1] : NULL;
    int ranks = argc > 2 ? atoi(argv[2]) : 8;
    int iters = argc > 3 ? atoi(argv[3]) : 20;
    double *load, *plan;

    if (ranks < 1 || iters < 1) {
        fprintf(stderr, "usage: bench_topology [FILE.xml|-] [LOCAL_RANKS] [ITERATIONS]\n");
        return 2;
    }
    load = calloc(iters, sizeof(*load));
    plan = calloc(iters, sizeof(*plan));
    if (load == NULL || plan == NULL) {
        return 1;
    }
    for (int i = 0; i < iters; i++) {
        td_placement_opts_t o = { ranks, TD_PLACEMENT_CLOSEST, true, NULL, NULL };
        td_topology_t *t;
        td_placement_t p;
        double t0 = now_ms(), t1, t2;

        if (td_topology_load(path, &t) != TD_OK) {
            fprintf(stderr, "bench_topology: %s\n", td_last_error());
            return 1;
        }
        t1 = now_ms();
        if (td_placement_plan(t, &o, &p) != TD_OK) {
            fprintf(stderr, "bench_topology: %s\n", td_last_error());
            return 1;
        }
        t2 = now_ms();
        load[i] = t1 - t0;
        plan[i] = t2 - t1;
        td_placement_free(&p);
        td_topology_destroy(t);
    }
    qsort(load, iters, sizeof(*load), cmp);
    qsort(plan, iters, sizeof(*plan), cmp);
    printf("topology %s, %d local ranks, %d iterations\n",
           path ? path : "this machine", ranks, iters);
    printf("load: median %.2f ms (%.2f-%.2f)\n", load[iters / 2], load[0],
           load[iters - 1]);
    printf("plan: median %.3f ms (%.3f-%.3f)\n", plan[iters / 2], plan[0],
           plan[iters - 1]);
    free(load);
    free(plan);
    return 0;
}
