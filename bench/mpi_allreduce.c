/* mpi_allreduce.c: the Open MPI baseline of bench/collectives.sh. Built
 * there with mpicc (not by make: MPI is optional) and run under mpirun -n N.
 * Prints, on rank 0, lines in bench/collectives's format:
 *   allreduce ranks=N size=BYTES median_us=T busbw_MBps=B
 *   # spread min_us=.. max_us=.. mean_us=.. iters=..
 * for MPI_Allreduce (MPI_FLOAT, MPI_SUM, in place) of the sizes given
 * (default 8 4096 1048576 67108864), each the median of repeated calls
 * after a barrier, every call timed on its own, with the same repetitions
 * as bench/collectives. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
    size_t sizes[8] = { 8, 4096, 1u << 20, 64u << 20 };
    int n_sizes = 4, rank, n;
    const char *s = getenv("ITERS_SCALE");
    double scale = s != NULL && atof(s) > 0 ? atof(s) : 1;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc > 1) {
        n_sizes = 0;
        for (int i = 1; i < argc && n_sizes < 8; i++) {
            sizes[n_sizes++] = (size_t)atoll(argv[i]);
        }
    }
    for (int k = 0; k < n_sizes; k++) {
        size_t bytes = sizes[k];
        int count = (int)(bytes / 4);
        int iters = bytes <= 4096 ? 3000 : bytes <= (1u << 20) ? 200 : 12;
        float *buf = calloc((size_t)count + 1, sizeof(float));
        double *t, med, mean = 0;
        int warm;

        iters = (int)(iters * scale);
        iters = iters < 3 ? 3 : iters;
        warm = iters / 10 + 2;
        t = calloc((size_t)iters, sizeof(double));
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = -warm; i < iters; i++) {
            double t0 = MPI_Wtime();

            MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
            if (i >= 0) {
                t[i] = MPI_Wtime() - t0;
            }
        }
        for (int i = 0; i < iters; i++) {
            mean += t[i] / iters;
        }
        qsort(t, (size_t)iters, sizeof(double), cmp_d);
        med = t[iters / 2];
        if (rank == 0) {
            printf("allreduce ranks=%d size=%zu median_us=%.*f busbw_MBps=%.0f\n"
                   "# spread min_us=%.1f max_us=%.1f mean_us=%.*f iters=%d\n",
                   n, bytes, med < 10e-6 ? 2 : 1, med * 1e6,
                   (double)bytes / med * 2.0 * (n - 1) / n / 1e6, t[0] * 1e6,
                   t[iters - 1] * 1e6, mean < 10e-6 ? 2 : 1, mean * 1e6,
                   iters);
            fflush(stdout);
        }
        free(buf);
        free(t);
    }
    MPI_Finalize();
    return 0;
}
