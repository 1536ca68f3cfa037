/* kernels/device.c: the per-device-type memory rows (see device.h). */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/device.h"
#include "kernels/kernels.h"
#include "kernels/module.h"

/* What a loaded module may call back (kernels/module.h). */
static const td_device_host_t host = {
    .abi = TD_DEVICE_MODULE_ABI,
    .error = td_error,
    .last_error = td_last_error,
    .log_print = td__log_print,
    .device_alloc = td__device_alloc,
    .device_free = td__device_free,
};

static const char *
type_name(td_device_type_t type)
{
    return type == TD_DEVICE_CPU ? "cpu" : type == TD_DEVICE_CUDA ? "cuda"
                                                                  : "?";
}

const td_device_ops_t *
td__device_ops(td_device_type_t type)
{
    if ((unsigned)type >= TD_NUM_DEVICE_TYPES || type == TD_DEVICE_CPU) {
        return NULL;
    }
    return td__device_module_row(type, &host);
}

int
td__device_count_loaded(td_device_type_t type)
{
    const td_device_ops_t *ops;
    int n = 0;

    if (type == TD_DEVICE_CPU) {
        return 1;
    }
    ops = td__device_module_peek(type);
    if (ops == NULL || ops->count(&n) != TD_OK) {
        td_error_clear();
        return 0;
    }
    return n;
}

td_status_t
td__device_count_of(td_device_type_t type, int *n_p)
{
    const td_device_ops_t *ops;

    if (type == TD_DEVICE_CPU) {
        *n_p = 1;
        return TD_OK;
    }
    if ((unsigned)type >= TD_NUM_DEVICE_TYPES) {
        return td_error(TD_ERR_INVALID, "device: no device type %d",
                        (int)type);
    }
    ops = td__device_ops(type);
    if (ops == NULL) {
        return TD_ERR_UNSUPPORTED;     /* the loader named what is missing */
    }
    return ops->count(n_p);
}

td_status_t
td__device_check(td_device_t dev)
{
    int n;
    td_status_t status;

    if (dev.type == TD_DEVICE_CPU) {
        return TD_OK;
    }
    status = td__device_count_of(dev.type, &n);
    if (status != TD_OK) {
        return status;
    }
    if (dev.index < 0 || dev.index >= n) {
        return td_error(TD_ERR_RANGE, "device: %s:%d is not below the "
                        "device count %d", type_name(dev.type), dev.index, n);
    }
    return TD_OK;
}

td_status_t
td__device_alloc(td_device_t dev, size_t nbytes, void **ptr_p)
{
    td_status_t status;
    void *p;

    if (dev.type == TD_DEVICE_CPU) {
        p = malloc(nbytes ? nbytes : 1);
        if (p == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "device: cannot allocate %zu "
                            "bytes on cpu", nbytes);
        }
        *ptr_p = p;
        return TD_OK;
    }
    status = td__device_check(dev);
    if (status != TD_OK) {
        return status;
    }
    return td__device_ops(dev.type)->alloc(dev.index, nbytes, ptr_p);
}

void
td__device_free(td_device_t dev, void *ptr)
{
    const td_device_ops_t *ops;

    if (dev.type == TD_DEVICE_CPU) {
        free(ptr);
        return;
    }
    ops = td__device_ops(dev.type);
    if (ops != NULL && ptr != NULL) {
        ops->free(dev.index, ptr);
    }
}

td_status_t
td__device_memcpy(void *dst, td_device_t ddev, const void *src,
                 td_device_t sdev, size_t nbytes)
{
    td_device_t dev = ddev.type != TD_DEVICE_CPU ? ddev : sdev;
    td_status_t status;

    if (nbytes == 0) {
        return TD_OK;
    }
    if (dev.type == TD_DEVICE_CPU) {
        memcpy(dst, src, nbytes);
        return TD_OK;
    }
    if (ddev.type != TD_DEVICE_CPU && sdev.type != TD_DEVICE_CPU &&
        ddev.type != sdev.type) {
        return td_error(TD_ERR_UNSUPPORTED, "device: no direct copy from "
                        "%s:%d to %s:%d", type_name(sdev.type), sdev.index,
                        type_name(ddev.type), ddev.index);
    }
    if ((status = td__device_check(ddev)) != TD_OK ||
        (status = td__device_check(sdev)) != TD_OK) {
        return status;
    }
    return td__device_ops(dev.type)->memcpy(dst, ddev, src, sdev, nbytes);
}

td_status_t
td__device_sync(td_device_t dev)
{
    td_status_t status;

    if (dev.type == TD_DEVICE_CPU) {
        return TD_OK;
    }
    if ((status = td__device_check(dev)) != TD_OK) {
        return status;
    }
    return td__device_ops(dev.type)->synchronize(dev.index);
}

td_status_t
td__device_copy_counts(td_device_t dev, td_device_copy_counts_t *c_p)
{
    const td_device_ops_t *ops;
    td_status_t status;

    if (dev.type == TD_DEVICE_CPU) {
        return td_error(TD_ERR_UNSUPPORTED, "device: the cpu counts no "
                        "device copies");
    }
    if ((status = td__device_check(dev)) != TD_OK) {
        return status;
    }
    ops = td__device_ops(dev.type);
    if (ops->copy_counts == NULL) {
        return td_error(TD_ERR_UNSUPPORTED, "device: %s counts no copies",
                        ops->name);
    }
    return ops->copy_counts(dev.index, c_p);
}

/* ---- the test backend (D4) ---------------------------------------------- */

static int test_n;
static long test_live[TD_DEVICE_TEST_MAX];
static long test_allocs[TD_DEVICE_TEST_MAX];
static td_device_copy_counts_t test_counts[TD_DEVICE_TEST_MAX];
static pthread_mutex_t test_lock = PTHREAD_MUTEX_INITIALIZER;

static td_status_t
test_count(int *n_p)
{
    *n_p = test_n;
    return TD_OK;
}

/* Host memory for the test backend: 64-byte aligned (like cudaMalloc's
 * 256, enough for every dtype); from 4 MiB on 2 MiB boundaries with
 * transparent huge pages asked for, as cpu tensors' storage is
 * (runtime/tensor/tensor.c): every staged or direct receive allocates
 * afresh, and on 4 KiB pages first touch costs ~25 ms per 64 MiB, which
 * the bench would otherwise report as the device path's (bench/RESULTS.md). */
static void *
test_memory(size_t nbytes)
{
    size_t n = (nbytes + 63) / 64 * 64 + 64;
    void *p;

    if (n < ((size_t)4 << 20)) {
        return aligned_alloc(64, n);
    }
    n = (n + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
    p = aligned_alloc((size_t)2 << 20, n);
#ifdef MADV_HUGEPAGE
    if (p != NULL) {
        (void)madvise(p, n, MADV_HUGEPAGE);   /* advice only */
    }
#endif
    return p;
}

static td_status_t
test_alloc(int index, size_t nbytes, void **ptr_p)
{
    void *p = test_memory(nbytes);

    if (p == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "device: cannot allocate %zu "
                        "bytes on test device %d", nbytes, index);
    }
    pthread_mutex_lock(&test_lock);
    test_live[index]++;
    test_allocs[index]++;
    pthread_mutex_unlock(&test_lock);
    *ptr_p = p;
    return TD_OK;
}

static void
test_free(int index, void *ptr)
{
    pthread_mutex_lock(&test_lock);
    test_live[index]--;
    pthread_mutex_unlock(&test_lock);
    free(ptr);
}

static td_status_t
test_memcpy(void *dst, td_device_t ddev, const void *src, td_device_t sdev,
            size_t nbytes)
{
    int index = ddev.type == TD_DEVICE_CUDA ? ddev.index : sdev.index;

    memcpy(dst, src, nbytes);
    if (ddev.type != sdev.type) {      /* host<->device, as CUDA counts */
        pthread_mutex_lock(&test_lock);
        test_counts[index].copies++;
        pthread_mutex_unlock(&test_lock);
    }
    return TD_OK;
}

static td_status_t
test_synchronize(int index)
{
    pthread_mutex_lock(&test_lock);
    test_counts[index].syncs++;
    pthread_mutex_unlock(&test_lock);
    return TD_OK;
}

static td_status_t
test_copy_counts(int index, td_device_copy_counts_t *c_p)
{
    pthread_mutex_lock(&test_lock);
    *c_p = test_counts[index];
    pthread_mutex_unlock(&test_lock);
    return TD_OK;
}

static td_status_t
test_host_alloc(size_t nbytes, void **ptr_p)
{
    *ptr_p = test_memory(nbytes);
    return *ptr_p != NULL ? TD_OK
                          : td_error(TD_ERR_NO_MEMORY, "device: cannot "
                                     "allocate a %zu byte host buffer",
                                     nbytes);
}

static td_status_t
test_copy_async(int index, void *dst, const void *src, size_t nbytes)
{
    (void)index;
    memcpy(dst, src, nbytes);
    return TD_OK;
}

static int
test_device_of(const void *ptr)
{
    (void)ptr;
    return 0;
}

static const td_device_ops_t test_ops = {
    .name = "cuda(test)", .count = test_count, .alloc = test_alloc,
    .free = test_free, .memcpy = test_memcpy,
    .synchronize = test_synchronize, .host_memory = 1,
    .host_alloc = test_host_alloc, .host_free = free,
    .copy_async = test_copy_async, .device_of = test_device_of,
    .copy_counts = test_copy_counts,
};

/* The test backend as a module descriptor: it is installed the way a
 * loaded module is (kernels/module.h M2). Host memory: the CPU loops are
 * its kernels. */
static const td_device_module_t test_module = {
    .abi = TD_DEVICE_MODULE_ABI, .type = TD_DEVICE_CUDA,
    .kernels = &td_cpu_kernels, .device = &test_ops, .nccl = NULL,
};

td_status_t
td__device_test_backend_install(int n_devices)
{
    if (n_devices < 1 || n_devices > TD_DEVICE_TEST_MAX) {
        return td_error(TD_ERR_RANGE, "device: test backend of %d devices "
                        "(1..%d)", n_devices, TD_DEVICE_TEST_MAX);
    }
    test_n = n_devices;
    return td__device_module_install(&test_module);
}

int
td__device_test_backend(void)
{
    return td__device_module_peek(TD_DEVICE_CUDA) == &test_ops;
}

long
td__device_test_live(int index)
{
    long n;

    if (index < 0 || index >= test_n) {
        return -1;
    }
    pthread_mutex_lock(&test_lock);
    n = test_live[index];
    pthread_mutex_unlock(&test_lock);
    return n;
}

long
td__device_test_allocs(int index)
{
    long n;

    if (index < 0 || index >= test_n) {
        return -1;
    }
    pthread_mutex_lock(&test_lock);
    n = test_allocs[index];
    pthread_mutex_unlock(&test_lock);
    return n;
}
