/* bench/bench.h: the timing helpers every benchmark program shares (the
 * monotonic clock, the median of repeated measurements). Header-only, so
 * programs built outside libtodist (bench/mpi_allreduce with mpicc) can use
 * it too. */
#ifndef TD_BENCH_BENCH_H
#define TD_BENCH_BENCH_H

#include <stdlib.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
static inline double
bench_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int
bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of V[N] (sorts V in place). */
static inline double
bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
    return v[n / 2];
}

#endif /* TD_BENCH_BENCH_H */
