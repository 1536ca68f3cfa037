/* bench/mlp_step: forward + backward + SGD step of the 784-256-10 MLP at
 * batch 256 on one thread, median of many steps, side by side with the
 * same step in PyTorch (bench/mlp_step_torch.py) when /usr/bin/python3 has
 * torch. Last line: `mlp_step: todist X ms, torch Y ms, ratio X/Y`.
 * Usage: mlp_step [STEPS] (default 400); the two sides run interleaved in
 * blocks of 20 steps so both see the same machine load. Pin BLAS threads on both sides:
 * OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 (set here if unset). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <todist/todist.h>

/* OpenBLAS's own thread control; weak, so a build against another CBLAS
 * still links (threads are then that library's business) */
extern void openblas_set_num_threads(int num_threads) __attribute__((weak));

static double
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static void
check(td_status_t st, const char *what)
{
    if (st != TD_OK) {
        fprintf(stderr, "mlp_step: %s: %s\n", what, td_last_error());
        exit(1);
    }
}

/* The torch side as a child speaking bench/mlp_step_torch.py's protocol. */
typedef struct {
    pid_t pid;
    FILE *to, *from;
} torch_child_t;

static int
torch_start(torch_child_t *tc, const char *srcdir)
{
    int in[2], out[2];
    char script[4096], line[64];

    snprintf(script, sizeof(script), "%s/bench/mlp_step_torch.py",
             srcdir ? srcdir : ".");
    if (access("/usr/bin/python3", X_OK) != 0 || pipe(in) != 0 ||
        pipe(out) != 0) {
        return 0;
    }
    tc->pid = fork();
    if (tc->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        if (freopen("/dev/null", "w", stderr) == NULL) {
            _exit(127);
        }
        execl("/usr/bin/python3", "python3", script, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    tc->to = fdopen(in[1], "w");
    tc->from = fdopen(out[0], "r");
    if (fgets(line, sizeof(line), tc->from) == NULL ||
        strncmp(line, "ready", 5) != 0) {
        fclose(tc->to);
        fclose(tc->from);
        waitpid(tc->pid, NULL, 0);
        return 0;   /* no torch: the child exited */
    }
    return 1;
}

/* N torch steps; their times appended at T */
static int
torch_steps(torch_child_t *tc, int n, double *t)
{
    static char line[1 << 16];
    char *p = line, *end;

    fprintf(tc->to, "%d\n", n);
    fflush(tc->to);
    if (fgets(line, sizeof(line), tc->from) == NULL) {
        return 0;
    }
    for (int i = 0; i < n; i++) {
        t[i] = strtod(p, &end);
        if (end == p) {
            return 0;
        }
        p = end;
    }
    return 1;
}

static void
stats(double *t, int n, double *med, double *lo, double *hi)
{
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    *med = t[n / 2];
    *lo = t[0];
    *hi = t[n - 1];
}

int
main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 400, block = 20;
    int64_t sizes[3] = {784, 256, 10}, xs[2] = {256, 784}, ys[1] = {256};
    td_tensor_t *x, *y, *logits, *loss;
    td_sgd_opts_t so = {0.01, 0, 0, 0, 0};
    td_mlp_t *mlp;
    td_optim_t *opt;
    double *t, *tt, med, lo, hi, tmed, tlo, thi;
    torch_child_t tc;
    int have_torch, done = 0;

    if (steps < block) {
        steps = block;
    }
    steps -= steps % block;
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    setenv("OMP_NUM_THREADS", "1", 0);
    if (openblas_set_num_threads != NULL) {
        openblas_set_num_threads(1);
    }
    t = calloc((size_t)steps, sizeof(double));
    tt = calloc((size_t)steps, sizeof(double));
    check(td_mlp_create(sizes, 3, TD_FLOAT32, 0, &mlp), "model");
    check(td_optim_sgd(td_mlp_params(mlp), 4, &so, &opt), "sgd");
    check(td_tensor_empty(xs, 2, TD_FLOAT32, TD_CPU, &x), "x");
    check(td_tensor_normal_(x, 0, 1, 42), "x");
    check(td_tensor_empty(ys, 1, TD_INT64, TD_CPU, &y), "y");
    for (int i = 0; i < 256; i++) {
        ((int64_t *)td_tensor_data(y))[i] = (i * 7) % 10;
    }
    have_torch = torch_start(&tc, getenv("TD_BENCH_SRCDIR"));
    /* interleave blocks of todist and torch steps so both see the same
     * load on a shared machine; 20 warm-up steps first */
    for (int i = -20; i < steps; i++) {
        double t0 = now_ms();
        check(td_optim_zero_grad(opt), "zero_grad");
        check(td_mlp_forward(mlp, x, &logits), "forward");
        check(td_cross_entropy(logits, y, TD_REDUCTION_MEAN, &loss), "loss");
        check(td_backward(&loss, NULL, 1, 0, 0), "backward");
        check(td_optim_step(opt), "step");
        td_tensor_release(logits);
        td_tensor_release(loss);
        if (i >= 0) {
            t[i] = now_ms() - t0;
            if ((i + 1) % block == 0 && have_torch) {
                have_torch = torch_steps(&tc, block, tt + done);
                done += block;
            }
        }
    }
    stats(t, steps, &med, &lo, &hi);
    printf("todist %.4f ms median (min %.4f, max %.4f) over %d steps\n", med,
           lo, hi, steps);
    if (have_torch) {
        stats(tt, steps, &tmed, &tlo, &thi);
        printf("torch  %.4f ms median (min %.4f, max %.4f) over %d steps, "
               "interleaved in blocks of %d\n", tmed, tlo, thi, steps, block);
        printf("ratio of minima %.2f\n", lo / tlo);
        printf("mlp_step: todist %.3f ms, torch %.3f ms, ratio %.2f\n", med,
               tmed, med / tmed);
        fclose(tc.to);
        fclose(tc.from);
        waitpid(tc.pid, NULL, 0);
    } else {
        printf("mlp_step: todist %.3f ms, torch n/a ms (torch not "
               "installed), ratio n/a\n", med);
    }
    td_tensor_release(x);
    td_tensor_release(y);
    td_optim_free(opt);
    td_mlp_free(mlp);
    free(t);
    free(tt);
    return 0;
}
