/* tests/kernels/test_blas_lazy.c: libtodist opens the BLAS at the first
 * matrix product (kernels/cpu/cpu_blas.c), never before: a process that
 * loads libtodist and multiplies nothing maps no BLAS and starts no BLAS
 * threads; the first td_matmul maps it and computes right; a
 * TODIST_BLAS_LIBRARY that does not open fails that td_matmul with
 * TD_ERR_UNSUPPORTED naming the variable (no crash, no other library). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/tap.h"
#include "todist/ops.h"
#include "todist/tensor.h"

/* 1 when a mapping of this process is a BLAS library (the program's own
 * name has "blas" in it too: match the library's) */
static int
blas_mapped(void)
{
    char line[1024];
    int found = 0;
    FILE *f = fopen("/proc/self/maps", "r");

    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, "blas.so") != NULL || strstr(line, "blasp") != NULL) {
            found = 1;
        }
    }
    fclose(f);
    return found;
}

static td_status_t
product(double *c)
{
    static const double a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    const int64_t shape[2] = {2, 2};
    td_tensor_t *ta = NULL, *tb = NULL, *tc = NULL;
    td_status_t st;

    st = td_tensor_from_data(a, shape, 2, TD_FLOAT64, &ta);
    if (st == TD_OK) {
        st = td_tensor_from_data(b, shape, 2, TD_FLOAT64, &tb);
    }
    if (st == TD_OK) {
        st = td_matmul(ta, tb, &tc);
    }
    if (st == TD_OK) {
        memcpy(c, td_tensor_data(tc), 4 * sizeof(double));
    }
    td_tensor_release(tc);
    td_tensor_release(tb);
    td_tensor_release(ta);
    return st;
}

int
main(int argc, char **argv)
{
    double c[4] = {0};
    td_status_t st;

    if (argc > 1 && strcmp(argv[1], "bad") == 0) {
        /* child: TODIST_BLAS_LIBRARY names nothing that opens */
        st = product(c);
        printf("%s|%s|%d\n", td_status_name(st), td_last_error(),
               blas_mapped());
        return 0;
    }
    plan(6);
    is_int(blas_mapped(), 0, "libtodist loaded, no product yet: no BLAS mapped");
    st = product(c);
    is_int(st, TD_OK, "the first td_matmul runs (%s)",
           st == TD_OK ? "ok" : td_last_error());
    ok(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50,
       "[[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]] (got %g %g %g %g)",
       c[0], c[1], c[2], c[3]);
    is_int(blas_mapped(), 1, "after it, the BLAS is mapped");

    /* a child with a TODIST_BLAS_LIBRARY that does not open */
    {
        int fd[2];
        char out[1024] = "";
        ssize_t n;
        pid_t pid;
        int status = 0;

        if (pipe(fd) != 0 || (pid = fork()) < 0) {
            ok(0, "pipe/fork");
            ok(0, "pipe/fork");
            return 1;
        }
        if (pid == 0) {
            dup2(fd[1], 1);
            close(fd[0]);
            setenv("TODIST_BLAS_LIBRARY", "/nonexistent/libnoblas.so", 1);
            execl("/proc/self/exe", argv[0], "bad", (char *)NULL);
            _exit(127);
        }
        close(fd[1]);
        n = read(fd[0], out, sizeof(out) - 1);
        out[n > 0 ? n : 0] = '\0';
        close(fd[0]);
        waitpid(pid, &status, 0);
        ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
           strncmp(out, "TD_ERR_UNSUPPORTED|", 19) == 0,
           "TODIST_BLAS_LIBRARY that does not open: td_matmul returns "
           "TD_ERR_UNSUPPORTED (%s)", out);
        ok(strstr(out, "TODIST_BLAS_LIBRARY=/nonexistent/libnoblas.so") !=
           NULL && strstr(out, "|0\n") != NULL,
           "the error names the variable and its value; no other BLAS was "
           "mapped");
    }
    return exit_status();
}
