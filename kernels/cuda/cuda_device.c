/* kernels/cuda/cuda_device.c: CUDA devices, streams, the caching allocator
 * and copies (see cuda_device.h and kernels/device.h). */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda_runtime_api.h>
#include <cublas_v2.h>

#include "base/log.h"
#include "kernels/device.h"
#include "kernels/cuda/cuda_device.h"

#define MAX_DEVICES 64
/* Freed device memory kept for reuse per device; 0 turns caching off
 * (TODIST_CUDA_CACHE_MB). */
#define DEFAULT_CACHE_MB 4096

/* Slots of a device's bounce ring (G4): host-to-device copies in flight
 * at once before the next one waits for the oldest. */
#define CUDA_BOUNCE_SLOTS 4

typedef struct {
    td_status_t        status;
    char               error[256];
    cudaStream_t       stream;
    cublasHandle_t     blas;
    td_block_cache_t  *cache;
    size_t             small_max;       /* G4's bound; 0: ring off */
    /* G4: the bounce ring, under ring_lock */
    pthread_mutex_t    ring_lock;
    void              *ring;            /* CUDA_BOUNCE_SLOTS slots, pinned */
    cudaEvent_t        ring_done[CUDA_BOUNCE_SLOTS];
    int                ring_next;
    /* td_device_copy_counts_t, under count_lock */
    pthread_mutex_t    count_lock;
    td_device_copy_counts_t counts;
} device_t;

static pthread_once_t count_once = PTHREAD_ONCE_INIT;
static int n_devices;
static char count_error[256];
static device_t devices[MAX_DEVICES];
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static char launch_error[256];
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;

static void
count_devices(void)
{
    cudaError_t e = cudaGetDeviceCount(&n_devices);

    if (e != cudaSuccess || n_devices <= 0) {
        snprintf(count_error, sizeof(count_error), "%s",
                 e != cudaSuccess ? cudaGetErrorString(e)
                                  : "cudaGetDeviceCount found 0");
        n_devices = 0;
        (void)cudaGetLastError();      /* clear the sticky error */
    }
    if (n_devices > MAX_DEVICES) {
        n_devices = MAX_DEVICES;
    }
}

td_status_t
td__cuda_count(int *n_p)
{
    pthread_once(&count_once, count_devices);
    if (n_devices == 0) {
        return td_error(TD_ERR_UNSUPPORTED, "no CUDA device (%s)",
                        count_error);
    }
    *n_p = n_devices;
    return TD_OK;
}

static td_status_t
raw_alloc(void *ctx, size_t nbytes, void **ptr_p)
{
    int index = (int)(intptr_t)ctx;
    cudaError_t e;

    cudaSetDevice(index);
    e = cudaMalloc(ptr_p, nbytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return td_error(TD_ERR_NO_MEMORY, "cuda:%d: cudaMalloc(%zu): %s",
                        index, nbytes, cudaGetErrorString(e));
    }
    return TD_OK;
}

static void
raw_free(void *ctx, void *ptr)
{
    cudaSetDevice((int)(intptr_t)ctx);
    cudaFree(ptr);
}

static size_t
cache_limit(void)
{
    const char *s = getenv("TODIST_CUDA_CACHE_MB");
    char *end;
    long mb;

    if (s == NULL || *s == '\0') {
        return (size_t)DEFAULT_CACHE_MB << 20;
    }
    mb = strtol(s, &end, 10);
    if (*end != '\0' || mb < 0) {
        td_log_warn("TODIST_CUDA_CACHE_MB=%s is not a number of MiB; using "
                    "%d", s, DEFAULT_CACHE_MB);
        return (size_t)DEFAULT_CACHE_MB << 20;
    }
    return (size_t)mb << 20;
}

/* G4's bound: TODIST_CUDA_BOUNCE=0 turns the bounce ring off (small
 * copies through pageable memory, synchronous both ways, as before it;
 * for comparisons), 1 or unset keeps it. */
static size_t
small_limit(void)
{
    const char *s = getenv("TODIST_CUDA_BOUNCE");

    if (s == NULL || *s == '\0' || strcmp(s, "1") == 0) {
        return TD_CUDA_SMALL_COPY;
    }
    if (strcmp(s, "0") != 0) {
        td_log_warn("TODIST_CUDA_BOUNCE=%s is neither 0 nor 1; using 1", s);
        return TD_CUDA_SMALL_COPY;
    }
    return 0;
}

/* Make device INDEX's stream, cuBLAS handle and cache (once). */
static td_status_t
device_init(int index)
{
    device_t *d = &devices[index];
    char name[32];
    cudaError_t e;

    pthread_mutex_lock(&init_lock);
    if (d->cache != NULL || d->status != TD_OK) {
        pthread_mutex_unlock(&init_lock);
        return d->status;
    }
    pthread_mutex_init(&d->ring_lock, NULL);
    pthread_mutex_init(&d->count_lock, NULL);
    d->small_max = small_limit();
    e = cudaSetDevice(index);
    if (e == cudaSuccess) {
        e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking);
    }
    if (e != cudaSuccess) {
        snprintf(d->error, sizeof(d->error), "cuda:%d: %s", index,
                 cudaGetErrorString(e));
        d->status = TD_ERR_UNSUPPORTED;
        goto out;
    }
    if (cublasCreate(&d->blas) != CUBLAS_STATUS_SUCCESS) {
        snprintf(d->error, sizeof(d->error), "cuda:%d: cublasCreate failed",
                 index);
        d->status = TD_ERR_UNSUPPORTED;
        goto out;
    }
    cublasSetStream(d->blas, d->stream);
    snprintf(name, sizeof(name), "cuda:%d", index);
    d->status = td__block_cache_create(&(td_block_cache_params_t){
                    .name = name, .raw_alloc = raw_alloc,
                    .raw_free = raw_free, .ctx = (void *)(intptr_t)index,
                    .max_cached = cache_limit() }, &d->cache);
    if (d->status != TD_OK) {
        snprintf(d->error, sizeof(d->error), "%s", td_last_error());
    }
out:
    pthread_mutex_unlock(&init_lock);
    return d->status;
}

static td_status_t
device_get(int index, device_t **d_p)
{
    int n;
    td_status_t status = td__cuda_count(&n);

    if (status != TD_OK) {
        return status;
    }
    if (index < 0 || index >= n) {
        return td_error(TD_ERR_RANGE, "cuda:%d is not below the CUDA device "
                        "count %d", index, n);
    }
    status = device_init(index);
    if (status != TD_OK) {
        return td_error(status, "%s", devices[index].error);
    }
    *d_p = &devices[index];
    return TD_OK;
}

static void
count(device_t *d, int copies, int bounced, int syncs)
{
    pthread_mutex_lock(&d->count_lock);
    d->counts.copies += (unsigned long long)copies;
    d->counts.bounced += (unsigned long long)bounced;
    d->counts.syncs += (unsigned long long)syncs;
    pthread_mutex_unlock(&d->count_lock);
}

td_status_t
td__cuda_stream(int index, void **stream_p)
{
    device_t *d = NULL;
    td_status_t status = device_get(index, &d);

    if (status == TD_OK) {
        *stream_p = d->stream;
    }
    return status;
}

td_status_t
td__cuda_blas(int index, void **handle_p)
{
    device_t *d = NULL;
    td_status_t status = device_get(index, &d);

    if (status == TD_OK) {
        *handle_p = d->blas;
    }
    return status;
}

td_status_t
td__cuda_enter(int index, void **stream_p)
{
    device_t *d = NULL;
    td_status_t status = device_get(index, &d);

    if (status != TD_OK) {
        return status;
    }
    cudaSetDevice(index);
    *stream_p = d->stream;
    return TD_OK;
}

int
td__cuda_device_of(const void *ptr)
{
    struct cudaPointerAttributes a;

    if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess ||
        a.type != cudaMemoryTypeDevice) {
        (void)cudaGetLastError();
        return -1;
    }
    return a.device;
}

/* Pinned host memory as page-aligned malloc memory registered with
 * cudaHostRegister, not cudaHostAlloc: the driver maps cudaHostAlloc's
 * pages as device-file memory, which another process cannot read with
 * process_vm_readv (the staging engine's in-place chunks, staging.h S8);
 * registered pages stay ordinary anonymous memory and copy as fast. */
td_status_t
td__cuda_host_alloc(size_t nbytes, void **ptr_p)
{
    int n;
    td_status_t status = td__cuda_count(&n);
    size_t len = (nbytes ? nbytes : 1), align;
    void *p;
    cudaError_t e;

    if (status != TD_OK) {
        return status;
    }
    /* from 4 MiB on huge pages: another process's process_vm_readv
     * reads them at memcpy speed, 4 KiB pages at about half (the
     * collectives' measurement in bench/RESULTS.md) */
    align = len >= ((size_t)4 << 20) ? (size_t)2 << 20 : 4096;
    len = (len + align - 1) & ~(align - 1);
    p = aligned_alloc(align, len);
#ifdef MADV_HUGEPAGE
    if (p != NULL && align > 4096) {
        (void)madvise(p, len, MADV_HUGEPAGE);   /* advice only */
    }
#endif
    if (p == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "cuda: cannot allocate a %zu byte "
                        "host buffer", nbytes);
    }
    e = cudaHostRegister(p, len, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(p);
        return td_error(TD_ERR_NO_MEMORY, "cudaHostRegister(%zu): %s", len,
                        cudaGetErrorString(e));
    }
    *ptr_p = p;
    return TD_OK;
}

void
td__cuda_host_free(void *ptr)
{
    if (ptr != NULL) {
        cudaHostUnregister(ptr);
        (void)cudaGetLastError();
        free(ptr);
    }
}

td_status_t
td__cuda_copy_async(int index, void *dst, const void *src, size_t nbytes)
{
    void *stream;
    td_status_t status = td__cuda_enter(index, &stream);
    cudaError_t e;

    if (status != TD_OK) {
        return status;
    }
    e = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault,
                        (cudaStream_t)stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return td_error(TD_ERR_IO, "cuda:%d: cudaMemcpyAsync of %zu bytes: "
                        "%s", index, nbytes, cudaGetErrorString(e));
    }
    return TD_OK;
}

td_status_t
td__cuda_sync(int index)
{
    void *stream;
    td_status_t status = td__cuda_enter(index, &stream);
    cudaError_t e;

    if (status != TD_OK) {
        return status;
    }
    e = cudaStreamSynchronize((cudaStream_t)stream);
    count(&devices[index], 0, 0, 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return td_error(TD_ERR_IO, "cuda:%d: cudaStreamSynchronize: %s",
                        index, cudaGetErrorString(e));
    }
    return TD_OK;
}

static td_status_t
cuda_copy_counts(int index, td_device_copy_counts_t *c_p)
{
    device_t *d = NULL;
    td_status_t status = device_get(index, &d);

    if (status == TD_OK) {
        pthread_mutex_lock(&d->count_lock);
        *c_p = d->counts;
        pthread_mutex_unlock(&d->count_lock);
    }
    return status;
}

td_status_t
td__cuda_cache_stats(int index, td_block_cache_stats_t *stats_p)
{
    device_t *d = NULL;
    td_status_t status = device_get(index, &d);

    if (status == TD_OK) {
        td__block_cache_stats(d->cache, stats_p);
    }
    return status;
}

void
td__cuda_launch_failed(const char *kernel, const char *why)
{
    pthread_mutex_lock(&launch_lock);
    snprintf(launch_error, sizeof(launch_error), "%s: %s", kernel, why);
    pthread_mutex_unlock(&launch_lock);
    td_log_error("cuda: kernel %s failed: %s", kernel, why);
}

const char *
td__cuda_last_launch_error(void)
{
    return launch_error;
}

/* ---- the kernels/device.h row ---------------------------------------- */

static td_status_t
cuda_alloc(int index, size_t nbytes, void **ptr_p)
{
    device_t *d = NULL;
    td_status_t status = device_get(index, &d);

    if (status != TD_OK) {
        return status;
    }
    return td__block_cache_alloc(d->cache, nbytes, ptr_p);
}

static void
cuda_free(int index, void *ptr)
{
    if (index >= 0 && index < MAX_DEVICES && devices[index].cache != NULL) {
        td__block_cache_free(devices[index].cache, ptr);
    }
}

/* Make device D's bounce ring (G4), under its ring_lock. */
static cudaError_t
ring_make_locked(device_t *d)
{
    cudaError_t e;
    int made = 0;

    if (d->ring != NULL) {
        return cudaSuccess;
    }
    e = cudaHostAlloc(&d->ring, CUDA_BOUNCE_SLOTS * TD_CUDA_SMALL_COPY,
                      cudaHostAllocDefault);
    while (e == cudaSuccess && made < CUDA_BOUNCE_SLOTS) {
        e = cudaEventCreateWithFlags(&d->ring_done[made],
                                     cudaEventDisableTiming);
        made += e == cudaSuccess;
    }
    if (e != cudaSuccess) {
        while (made > 0) {
            cudaEventDestroy(d->ring_done[--made]);
        }
        if (d->ring != NULL) {
            cudaFreeHost(d->ring);
            d->ring = NULL;
        }
    }
    return e;
}

/* A copy of at most TD_CUDA_SMALL_COPY bytes between the host and device
 * INDEX through its bounce ring (G4); TO_DEV says which way. */
static td_status_t
small_copy(int index, cudaStream_t stream, void *dst, const void *src,
           size_t nbytes, int to_dev)
{
    device_t *d = &devices[index];
    char *slot;
    int k;
    cudaError_t e;

    pthread_mutex_lock(&d->ring_lock);
    e = ring_make_locked(d);
    if (e != cudaSuccess) {
        goto out;
    }
    k = d->ring_next;
    slot = (char *)d->ring + (size_t)k * TD_CUDA_SMALL_COPY;
    /* the slot's last host-to-device copy has read it (a fresh event
     * counts as fired) */
    e = cudaEventSynchronize(d->ring_done[k]);
    if (e != cudaSuccess) {
        goto out;
    }
    if (to_dev) {
        memcpy(slot, src, nbytes);
        e = cudaMemcpyAsync(dst, slot, nbytes, cudaMemcpyDefault,
                            stream);
        if (e == cudaSuccess) {
            e = cudaEventRecord(d->ring_done[k], stream);
        }
        d->ring_next = (k + 1) % CUDA_BOUNCE_SLOTS;
        count(d, 1, 1, 0);
    } else {
        e = cudaMemcpyAsync(slot, src, nbytes, cudaMemcpyDefault,
                            stream);
        if (e == cudaSuccess) {
            e = cudaStreamSynchronize(stream);
        }
        if (e == cudaSuccess) {
            memcpy(dst, slot, nbytes);
        }
        count(d, 1, 1, 1);
    }
out:
    pthread_mutex_unlock(&d->ring_lock);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return td_error(TD_ERR_IO, "cuda:%d: small copy of %zu bytes %s: %s",
                        index, nbytes, to_dev ? "to the device"
                                              : "from the device",
                        cudaGetErrorString(e));
    }
    return TD_OK;
}

static td_status_t
cuda_memcpy(void *dst, td_device_t ddev, const void *src, td_device_t sdev,
            size_t nbytes)
{
    int index = ddev.type == TD_DEVICE_CUDA ? ddev.index : sdev.index;
    int host_side = ddev.type == TD_DEVICE_CPU || sdev.type == TD_DEVICE_CPU;
    void *stream;
    td_status_t status = td__cuda_enter(index, &stream);
    cudaError_t e;

    if (status != TD_OK) {
        return status;
    }
    if (host_side && nbytes <= devices[index].small_max) {
        return small_copy(index, (cudaStream_t)stream, dst, src, nbytes,
                          ddev.type == TD_DEVICE_CUDA);
    }
    if (ddev.type == TD_DEVICE_CUDA && sdev.type == TD_DEVICE_CUDA &&
        ddev.index != sdev.index) {
        /* order after the source device's queued work, then peer copy */
        if ((status = td__cuda_sync(sdev.index)) != TD_OK) {
            return status;
        }
        e = cudaMemcpyPeerAsync(dst, ddev.index, src, sdev.index, nbytes,
                                (cudaStream_t)stream);
    } else {
        e = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault,
                            (cudaStream_t)stream);
    }
    if (e == cudaSuccess) {
        e = cudaStreamSynchronize((cudaStream_t)stream);
    }
    count(&devices[index], host_side, 0, 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return td_error(TD_ERR_IO, "cuda: copy of %zu bytes from %s:%d to "
                        "%s:%d: %s", nbytes,
                        sdev.type == TD_DEVICE_CUDA ? "cuda" : "cpu",
                        sdev.index,
                        ddev.type == TD_DEVICE_CUDA ? "cuda" : "cpu",
                        ddev.index, cudaGetErrorString(e));
    }
    return TD_OK;
}

static td_status_t
cuda_synchronize(int index)
{
    return td__cuda_sync(index);
}

const td_device_ops_t td_cuda_device_ops = {
    .name = "cuda",
    .count = td__cuda_count,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .memcpy = cuda_memcpy,
    .synchronize = cuda_synchronize,
    .host_alloc = td__cuda_host_alloc,
    .host_free = td__cuda_host_free,
    .copy_async = td__cuda_copy_async,
    .device_of = td__cuda_device_of,
    .cache_stats = td__cuda_cache_stats,
    .last_launch_error = td__cuda_last_launch_error,
    .copy_counts = cuda_copy_counts,
};
