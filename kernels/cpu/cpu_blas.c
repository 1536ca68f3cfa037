/* kernels/cpu/cpu_blas.c: the CPU matrix product through a CBLAS library
 * opened on first use (dlopen), not linked.
 *
 * Why not linked: a linked OpenBLAS is mapped, relocated and initialised
 * by every process that loads libtodist, and its constructor starts a
 * worker thread per spare core that spins (sched_yield) for its first
 * ~0.1 s. A rank that never multiplies matrices (collectives, RPC, the
 * launcher itself) paid for it: a world of one took 28 ms instead of
 * 18 ms, a third of its CPU in that spin (bench/RESULTS.md, 2026-11-26).
 * Opening it at the first gemm keeps every CPU-only rank free of it, as
 * the CUDA module does for device code (kernels/module.c).
 *
 * Where from, first that opens: TODIST_BLAS_LIBRARY (a path or soname);
 * the library configure linked against (TD_BLAS_DIR/libTD_BLAS_NAME.so,
 * then its usual sonames); libopenblas.so.0, libcblas.so.3, libblas.so.3
 * (Debian's BLAS alternatives carry the cblas_* symbols).
 *
 * B1. One attempt per process (pthread_once): a failure is remembered and
 *     every gemm returns it, naming the libraries tried and the variable.
 * B2. The handle is never closed: the library's threads outlive any call.
 */
#include "config.h"

#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "kernels/cpu/cpu.h"

#ifndef TD_BLAS_DIR
#define TD_BLAS_DIR ""
#endif
#ifndef TD_BLAS_NAME
#define TD_BLAS_NAME "openblas"
#endif

typedef void (*sgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE,
                         enum CBLAS_TRANSPOSE, int, int, int, float,
                         const float *, int, const float *, int, float,
                         float *, int);
typedef void (*dgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE,
                         enum CBLAS_TRANSPOSE, int, int, int, double,
                         const double *, int, const double *, int, double,
                         double *, int);

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static sgemm_fn       blas_sgemm;
static dgemm_fn       blas_dgemm;
static char           blas_why[512];    /* B1: why none opened */

static void
blas_try(const char *name, char *tried, size_t cap)
{
    void *h;
    size_t len = strlen(tried);

    if (blas_dgemm != NULL || name == NULL || name[0] == '\0' ||
        strstr(tried, name) != NULL) {
        return;             /* found, or this name failed already */
    }
    h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h != NULL) {
        blas_sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
        blas_dgemm = (dgemm_fn)dlsym(h, "cblas_dgemm");
        if (blas_sgemm != NULL && blas_dgemm != NULL) {
            td_log_debug("kernels: CBLAS from %s", name);
            return;         /* B2: kept open */
        }
        blas_sgemm = NULL;
        blas_dgemm = NULL;
        dlclose(h);
        snprintf(tried + len, cap - len, "%s%s (no cblas_dgemm)",
                 len > 0 ? ", " : "", name);
        return;
    }
    snprintf(tried + len, cap - len, "%s%s", len > 0 ? ", " : "", name);
}

static void
blas_open(void)
{
    char tried[400] = "", path[256];
    const char *env = getenv("TODIST_BLAS_LIBRARY");

    if (env != NULL && env[0] != '\0') {
        blas_try(env, tried, sizeof(tried));
        if (blas_dgemm == NULL) {
            snprintf(blas_why, sizeof(blas_why), "TODIST_BLAS_LIBRARY=%s "
                     "does not open as a CBLAS library (%s)", env, tried);
        }
        return;             /* the user's choice, or a clear no */
    }
    if (TD_BLAS_DIR[0] != '\0') {
        snprintf(path, sizeof(path), "%s/lib%s.so", TD_BLAS_DIR,
                 TD_BLAS_NAME);
        blas_try(path, tried, sizeof(tried));
    }
    snprintf(path, sizeof(path), "lib%s.so.0", TD_BLAS_NAME);
    blas_try(path, tried, sizeof(tried));
    snprintf(path, sizeof(path), "lib%s.so.3", TD_BLAS_NAME);
    blas_try(path, tried, sizeof(tried));
    blas_try("libopenblas.so.0", tried, sizeof(tried));
    blas_try("libcblas.so.3", tried, sizeof(tried));
    blas_try("libblas.so.3", tried, sizeof(tried));
    if (blas_dgemm == NULL) {
        snprintf(blas_why, sizeof(blas_why), "no CBLAS library opens (tried "
                 "%s); install OpenBLAS or set TODIST_BLAS_LIBRARY", tried);
    }
}

td_status_t
td__cpu_gemm(td_dtype_t dtype, int trans_a, int trans_b, int64_t m, int64_t n,
            int64_t k, double alpha, const void *a, int64_t lda,
            const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;

    (void)pthread_once(&blas_once, blas_open);
    if (blas_dgemm == NULL) {
        return td_error(TD_ERR_UNSUPPORTED, "kernels: matrix product: %s",
                        blas_why);
    }
    if (dtype == TD_FLOAT32) {
        blas_sgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k,
                   (float)alpha, a, (int)lda, b, (int)ldb, (float)beta, c,
                   (int)ldc);
    } else {
        blas_dgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, alpha, a,
                   (int)lda, b, (int)ldb, beta, c, (int)ldc);
    }
    return TD_OK;
}
