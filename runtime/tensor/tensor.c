/* runtime/tensor/tensor.c: tensors, storage, views, copies, seeded random
 * fill. See include/todist/tensor.h. Views and joins record autograd nodes
 * here; arithmetic lives in runtime/tensor/ops_*.c, and this file calls
 * none of it (expand, whose backward is a sum, and index_select live with
 * their ops), so tensor.c sits below the ops and autograd. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "runtime/tensor/tensor_internal.h"
#include "kernels/device.h"
#include "todist/device.h"

size_t
td_dtype_size(td_dtype_t dtype)
{
    return td__dtype_bytes(dtype);
}

const char *
td_dtype_name(td_dtype_t dtype)
{
    switch (dtype) {
    case TD_FLOAT32: return "float32";
    case TD_FLOAT64: return "float64";
    case TD_INT64: return "int64";
    case TD_INT32: return "int32";
    case TD_UINT8: return "uint8";
    default: return "unknown";
    }
}

int
td_dtype_is_float(td_dtype_t dtype)
{
    return dtype == TD_FLOAT32 || dtype == TD_FLOAT64;
}

td_status_t
td_device_parse(const char *s, td_device_t *device_p)
{
    char *end;
    long idx;

    if (s != NULL && strcmp(s, "cpu") == 0) {
        *device_p = TD_CPU;
        return TD_OK;
    }
    if (s != NULL && strncmp(s, "cuda", 4) == 0) {
        if (s[4] == '\0') {
            *device_p = (td_device_t){TD_DEVICE_CUDA, 0};
            return TD_OK;
        }
        if (s[4] == ':') {
            idx = strtol(s + 5, &end, 10);
            if (end != s + 5 && *end == '\0' && idx >= 0 && idx < 1024) {
                *device_p = (td_device_t){TD_DEVICE_CUDA, (int)idx};
                return TD_OK;
            }
        }
    }
    return td_error(TD_ERR_INVALID, "tensor: device '%s' is not cpu or "
                    "cuda:N", s ? s : "(null)");
}

const char *
td_device_str(td_device_t device, char *buf, size_t len)
{
    if (device.type == TD_DEVICE_CPU) {
        snprintf(buf, len, "cpu");
    } else if (device.type == TD_DEVICE_CUDA) {
        snprintf(buf, len, "cuda:%d", device.index);
    } else {
        snprintf(buf, len, "device%d:%d", (int)device.type, device.index);
    }
    return buf;
}

const char *
td__shape_str(const int64_t *shape, int ndim, char *buf, size_t len)
{
    size_t pos = 0;

    pos += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && pos < len; d++) {
        pos += (size_t)snprintf(buf + pos, len - pos, d ? ", %lld" : "%lld",
                                (long long)shape[d]);
    }
    if (pos < len) {
        snprintf(buf + pos, len - pos, "]");
    }
    return buf;
}

/* ---- storage ------------------------------------------------------------ */

/* A cache of freed blocks of a page and more, by exact size. glibc gives
 * the top of its heap back to the kernel once 128 KiB of it are free, and
 * blocks above its mmap threshold on every free, so a training step that
 * makes and frees the same activations every iteration would page-fault
 * them in anew each time: ~10% of the MLP step at 64 KiB+ blocks, and
 * 90-620 faults a step of the pipeline's 32 KiB activations before blocks
 * under 64 KiB were kept too (bench/RESULTS.md). Each size has a list
 * threaded through its free blocks' first bytes; small blocks go straight
 * to malloc (glibc's bins keep them).
 * Invariants (T1, the cache):
 *  1. cache.lock guards cls[] and bytes; it is held only to push or pop a
 *     block, never across malloc or free.
 *  2. A block on a list is owned by no tensor; its size is its class's
 *     (alloc_size of the bytes it was made for), so a reuse has the
 *     alignment and length the first allocation had.
 *  3. At most CACHE_CLASSES sizes at once (a class whose list is empty
 *     takes the next new size) and CACHE_MAX_BYTES in all; a block that
 *     does not fit goes back to free(). */
#define CACHE_CLASSES   64
#define CACHE_MIN_BYTES ((size_t)4096)
#define CACHE_MAX_BYTES ((size_t)256 << 20)
#define PAGE_ROUND_BYTES ((size_t)64 << 10)
#define HUGE_BYTES      ((size_t)2 << 20)   /* x86-64 / arm64 huge page */
#define HUGE_MIN_BYTES  ((size_t)4 << 20)   /* storage this large: THP */

static struct {
    pthread_mutex_t lock;
    struct {
        size_t size;     /* 0: unused */
        void  *head;     /* the next block's address is in its first bytes */
    } cls[CACHE_CLASSES];
    size_t bytes;
} cache = {PTHREAD_MUTEX_INITIALIZER, {{0, NULL}}, 0};

static size_t
alloc_size(size_t nbytes)
{
    /* 64-byte alignment for vector loads; at least one line so a 0-element
     * tensor still has a distinct pointer; 64 KiB and more rounded to
     * pages (below, a page more would cost up to 12% of a block) */
    size_t n = ((nbytes + 63) / 64) * 64 + 64;

    return n >= PAGE_ROUND_BYTES ? (n + 4095) & ~(size_t)4095 : n;
}

static void *
block_alloc(size_t size)
{
    if (size >= CACHE_MIN_BYTES) {
        pthread_mutex_lock(&cache.lock);
        for (int i = 0; i < CACHE_CLASSES; i++) {
            if (cache.cls[i].size == size && cache.cls[i].head != NULL) {
                void *p = cache.cls[i].head;

                memcpy(&cache.cls[i].head, p, sizeof(void *));
                cache.bytes -= size;
                pthread_mutex_unlock(&cache.lock);
                return p;
            }
        }
        pthread_mutex_unlock(&cache.lock);
    }
    if (size >= HUGE_MIN_BYTES) {
        /* Large storage on 2 MiB boundaries, and asking for transparent
         * huge pages: 512x fewer page faults on first touch and TLB
         * misses, and process_vm_readv (the collectives' single copy)
         * runs at memcpy speed on huge pages, at half of it on 4 KiB
         * pages (bench/RESULTS.md). Advice only: without THP, or if
         * refused, the pages stay small. */
        void *p = aligned_alloc(HUGE_BYTES, (size + HUGE_BYTES - 1) &
                                ~(HUGE_BYTES - 1));

#ifdef MADV_HUGEPAGE
        if (p != NULL) {
            (void)madvise(p, size & ~(HUGE_BYTES - 1), MADV_HUGEPAGE);
        }
#endif
        return p;
    }
    return aligned_alloc(64, size);
}

static void
block_free(void *p, size_t size)
{
    if (size >= CACHE_MIN_BYTES) {
        int slot = -1;

        pthread_mutex_lock(&cache.lock);
        if (cache.bytes + size <= CACHE_MAX_BYTES) {
            for (int i = 0; i < CACHE_CLASSES; i++) {
                if (cache.cls[i].size == size) {
                    slot = i;
                    break;
                }
                if (slot < 0 && cache.cls[i].head == NULL) {
                    slot = i;     /* unused or empty: free for a new size */
                }
            }
        }
        if (slot >= 0) {
            if (cache.cls[slot].size != size) {
                cache.cls[slot].size = size;      /* its list is empty */
            }
            memcpy(p, &cache.cls[slot].head, sizeof(void *));
            cache.cls[slot].head = p;
            cache.bytes += size;
            pthread_mutex_unlock(&cache.lock);
            return;
        }
        pthread_mutex_unlock(&cache.lock);
    }
    free(p);
}

size_t
td__tensor_cache_bytes(void)
{
    size_t n;

    pthread_mutex_lock(&cache.lock);
    n = cache.bytes;
    pthread_mutex_unlock(&cache.lock);
    return n;
}

/* Device memory comes from the device's caching allocator
 * (kernels/device.h); the deleter gives it back there. */
static void
device_storage_free(void *data, void *arg)
{
    td_storage_t *s = arg;

    td__device_free(s->device, data);
}

static td_storage_t *
device_storage_new(size_t nbytes, td_device_t device)
{
    td_storage_t *s = calloc(1, sizeof(*s));

    if (s == NULL || td__device_alloc(device, nbytes, &s->data) != TD_OK) {
        free(s);
        return NULL;
    }
    atomic_init(&s->refcount, 1);
    atomic_init(&s->version, 0);
    s->nbytes = nbytes;
    s->device = device;
    s->deleter = device_storage_free;
    s->deleter_arg = s;
    return s;
}

static td_storage_t *
storage_new(size_t nbytes, td_device_t device)
{
    td_storage_t *s;

    if (device.type != TD_DEVICE_CPU) {
        return device_storage_new(nbytes, device);
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return NULL;
    }
    s->data = block_alloc(alloc_size(nbytes));
    if (s->data == NULL) {
        free(s);
        return NULL;
    }
    atomic_init(&s->refcount, 1);
    atomic_init(&s->version, 0);
    s->nbytes = nbytes;
    s->device = device;
    return s;
}

static void
storage_release(td_storage_t *s)
{
    if (atomic_fetch_sub(&s->refcount, 1) != 1) {
        return;
    }
    if (s->deleter != NULL) {
        s->deleter(s->data, s->deleter_arg);
    } else {
        block_free(s->data, alloc_size(s->nbytes));
    }
    free(s);
}

/* ---- creation ----------------------------------------------------------- */

static td_status_t
check_shape(const int64_t *shape, int ndim, td_dtype_t dtype, int64_t *numel_p)
{
    int64_t numel = 1;
    int64_t bound = 1;   /* product of max(shape, 1): strides stay below it */

    if (ndim < 0 || ndim > TD_MAX_DIMS) {
        return td_error(TD_ERR_SHAPE, "tensor: ndim=%d is outside 0..%d",
                        ndim, TD_MAX_DIMS);
    }
    if (td_dtype_size(dtype) == 0) {
        return td_error(TD_ERR_DTYPE, "tensor: dtype=%d is unknown", dtype);
    }
    for (int d = 0; d < ndim; d++) {
        /* A zero dimension makes numel 0, but the other dimensions still
         * enter the strides: bound them all (found by the wire fuzzer). */
        if (shape[d] < 0 || (shape[d] > 0 && bound > INT64_MAX / 16 / shape[d])) {
            return td_error(TD_ERR_SHAPE, "tensor: shape[%d]=%lld is invalid",
                            d, (long long)shape[d]);
        }
        numel *= shape[d];
        bound *= shape[d] > 0 ? shape[d] : 1;
    }
    *numel_p = numel;
    return TD_OK;
}

static td_tensor_t *
tensor_alloc(td_storage_t *storage, td_dtype_t dtype, int ndim)
{
    td_tensor_t *t = calloc(1, sizeof(*t));

    if (t == NULL) {
        return NULL;
    }
    atomic_init(&t->refcount, 1);
    pthread_mutex_init(&t->lock, NULL);
    t->storage = storage;
    t->dtype = dtype;
    t->device = storage->device;
    t->ndim = ndim;
    return t;
}

static void
set_contig_strides(td_tensor_t *t)
{
    int64_t s = 1;

    for (int d = t->ndim - 1; d >= 0; d--) {
        t->strides[d] = s;
        s *= t->shape[d];
    }
}

td_status_t
td_tensor_empty(const int64_t *shape, int ndim, td_dtype_t dtype,
                td_device_t device, td_tensor_t **out)
{
    td_storage_t *s;
    td_tensor_t *t;
    int64_t numel;
    td_status_t status;

    status = check_shape(shape, ndim, dtype, &numel);
    if (status != TD_OK) {
        return status;
    }
    if (device.type != TD_DEVICE_CPU &&
        (status = td__device_check(device)) != TD_OK) {
        return status;                 /* "no CUDA device" on a host */
    }
    if (td__kernels_get(device) == NULL) {
        return td_error(TD_ERR_UNSUPPORTED, "tensor: no kernels for device "
                        "type %d (built without it)", device.type);
    }
    s = storage_new((size_t)numel * td_dtype_size(dtype), device);
    if (s == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "tensor: cannot allocate %lld "
                        "elements of %s", (long long)numel,
                        td_dtype_name(dtype));
    }
    t = tensor_alloc(s, dtype, ndim);
    if (t == NULL) {
        storage_release(s);
        return td_error(TD_ERR_NO_MEMORY, "tensor: out of memory");
    }
    if (ndim > 0) {            /* a scalar's SHAPE may be NULL */
        memcpy(t->shape, shape, (size_t)ndim * sizeof(int64_t));
    }
    set_contig_strides(t);
    *out = t;
    return TD_OK;
}

td_status_t
td__tensor_empty_like(const td_tensor_t *t, td_tensor_t **out)
{
    return td_tensor_empty(t->shape, t->ndim, t->dtype, t->device, out);
}

td_status_t
td_tensor_full(const int64_t *shape, int ndim, td_dtype_t dtype, double value,
               td_tensor_t **out)
{
    td_tensor_t *t;
    td_status_t status = td_tensor_empty(shape, ndim, dtype, TD_CPU, &t);

    if (status != TD_OK) {
        return status;
    }
    td_cpu_kernels.fill(dtype, (td_operand_t){td_tensor_data(t), t->strides},
                        value, t->shape, t->ndim);
    *out = t;
    return TD_OK;
}

td_status_t
td_tensor_zeros(const int64_t *shape, int ndim, td_dtype_t dtype,
                td_tensor_t **out)
{
    return td_tensor_full(shape, ndim, dtype, 0.0, out);
}

td_status_t
td_tensor_scalar(double value, td_dtype_t dtype, td_tensor_t **out)
{
    return td_tensor_full(NULL, 0, dtype, value, out);
}

td_status_t
td_tensor_from_data(const void *data, const int64_t *shape, int ndim,
                    td_dtype_t dtype, td_tensor_t **out)
{
    td_tensor_t *t;
    td_status_t status = td_tensor_empty(shape, ndim, dtype, TD_CPU, &t);

    if (status != TD_OK) {
        return status;
    }
    if (td_tensor_nbytes(t) > 0) {
        memcpy(td_tensor_data(t), data, td_tensor_nbytes(t));
    }
    *out = t;
    return TD_OK;
}

static void
no_free(void *data, void *arg)
{
}

td_status_t
td_tensor_from_blob(void *data, const int64_t *shape, int ndim,
                    td_dtype_t dtype, td_device_t device,
                    void (*deleter)(void *data, void *arg), void *arg,
                    td_tensor_t **out)
{
    td_storage_t *s;
    td_tensor_t *t;
    int64_t numel;
    td_status_t status;

    status = check_shape(shape, ndim, dtype, &numel);
    if (status != TD_OK) {
        return status;
    }
    if (data == NULL && numel > 0) {
        return td_error(TD_ERR_INVALID, "tensor: from_blob of %lld elements "
                        "with data=NULL", (long long)numel);
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "tensor: out of memory");
    }
    atomic_init(&s->refcount, 1);
    atomic_init(&s->version, 0);
    s->data = data;
    s->nbytes = (size_t)numel * td_dtype_size(dtype);
    s->device = device;
    s->deleter = deleter != NULL ? deleter : no_free;
    s->deleter_arg = arg;
    t = tensor_alloc(s, dtype, ndim);
    if (t == NULL) {
        free(s);
        return td_error(TD_ERR_NO_MEMORY, "tensor: out of memory");
    }
    if (ndim > 0) {            /* a scalar's SHAPE may be NULL */
        memcpy(t->shape, shape, (size_t)ndim * sizeof(int64_t));
    }
    set_contig_strides(t);
    *out = t;
    return TD_OK;
}

td_status_t
td__tensor_new_view(td_tensor_t *base, const int64_t *shape,
                   const int64_t *strides, int ndim, int64_t offset,
                   td_tensor_t **out)
{
    td_tensor_t *t = tensor_alloc(base->storage, base->dtype, ndim);

    if (t == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "tensor: out of memory");
    }
    atomic_fetch_add(&base->storage->refcount, 1);
    if (ndim > 0) {
        memcpy(t->shape, shape, (size_t)ndim * sizeof(int64_t));
        memcpy(t->strides, strides, (size_t)ndim * sizeof(int64_t));
    }
    t->offset = offset;
    t->device = base->device;
    *out = t;
    return TD_OK;
}

/* ---- refcount and accessors -------------------------------------------- */

td_tensor_t *
td_tensor_retain(td_tensor_t *t)
{
    if (t != NULL) {
        atomic_fetch_add(&t->refcount, 1);
    }
    return t;
}

void
td_tensor_release(td_tensor_t *t)
{
    td_hook_t *h, *next;

    if (t == NULL || atomic_fetch_sub(&t->refcount, 1) != 1) {
        return;
    }
    td__autograd_leaf_dying(t);
    td_tensor_release(t->grad);
    td_node_release(t->grad_fn);
    for (h = t->hooks; h != NULL; h = next) {
        next = h->next;
        free(h);
    }
    for (h = t->post_hooks; h != NULL; h = next) {
        next = h->next;
        free(h);
    }
    storage_release(t->storage);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

td_dtype_t td_tensor_dtype(const td_tensor_t *t) { return t->dtype; }
td_device_t td_tensor_device(const td_tensor_t *t) { return t->device; }
int td_tensor_ndim(const td_tensor_t *t) { return t->ndim; }
const int64_t *td_tensor_shape(const td_tensor_t *t) { return t->shape; }
const int64_t *td_tensor_strides(const td_tensor_t *t) { return t->strides; }
int64_t td_tensor_offset(const td_tensor_t *t) { return t->offset; }

int64_t
td_tensor_size(const td_tensor_t *t, int dim)
{
    if (dim < 0) {
        dim += t->ndim;
    }
    return dim >= 0 && dim < t->ndim ? t->shape[dim] : -1;
}

void *
td_tensor_data(const td_tensor_t *t)
{
    return (char *)t->storage->data + t->offset * (int64_t)td_dtype_size(t->dtype);
}

int64_t
td_tensor_numel(const td_tensor_t *t)
{
    int64_t n = 1;

    for (int d = 0; d < t->ndim; d++) {
        n *= t->shape[d];
    }
    return n;
}

size_t
td_tensor_nbytes(const td_tensor_t *t)
{
    return (size_t)td_tensor_numel(t) * td_dtype_size(t->dtype);
}

int
td_tensor_is_contiguous(const td_tensor_t *t)
{
    int64_t s = 1;

    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != s) {
            return 0;
        }
        s *= t->shape[d];
    }
    return 1;
}

uint64_t
td_tensor_version(const td_tensor_t *t)
{
    return atomic_load(&t->storage->version);
}

void
td_tensor_bump_version(td_tensor_t *t)
{
    atomic_fetch_add(&t->storage->version, 1);
}

int
td_tensor_requires_grad(const td_tensor_t *t)
{
    return t->requires_grad || t->grad_fn != NULL;
}

td_status_t
td_tensor_set_requires_grad(td_tensor_t *t, int requires_grad)
{
    if (t->grad_fn != NULL) {
        return td_error(TD_ERR_STATE, "tensor: requires_grad can only be set "
                        "on a leaf (this one comes from %s)",
                        td_node_name(t->grad_fn));
    }
    if (requires_grad && !td_dtype_is_float(t->dtype)) {
        return td_error(TD_ERR_DTYPE, "tensor: only floating tensors can "
                        "require grad (dtype is %s)", td_dtype_name(t->dtype));
    }
    t->requires_grad = requires_grad != 0;
    return TD_OK;
}

int
td_tensor_is_leaf(const td_tensor_t *t)
{
    return t->grad_fn == NULL;
}

td_tensor_t *
td_tensor_grad(const td_tensor_t *t)
{
    return t->grad;
}

td_status_t
td_tensor_set_grad(td_tensor_t *t, td_tensor_t *grad)
{
    td_tensor_t *old;

    if (grad != NULL && (grad->dtype != t->dtype || !td__shape_equal(grad, t))) {
        return td_error(TD_ERR_SHAPE, "tensor: grad %s %s does not match "
                        "tensor %s %s", td_dtype_name(grad->dtype),
                        TD_SHAPE_STR(grad), td_dtype_name(t->dtype),
                        TD_SHAPE_STR(t));
    }
    pthread_mutex_lock(&t->lock);
    old = t->grad;
    t->grad = td_tensor_retain(grad);
    pthread_mutex_unlock(&t->lock);
    td_tensor_release(old);
    return TD_OK;
}

int
td__shape_equal(const td_tensor_t *a, const td_tensor_t *b)
{
    return a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(int64_t)) == 0;
}

static double
load_elem(const void *p, td_dtype_t dtype)
{
    switch (dtype) {
    case TD_FLOAT32: return *(const float *)p;
    case TD_FLOAT64: return *(const double *)p;
    case TD_INT64: return (double)*(const int64_t *)p;
    case TD_INT32: return *(const int32_t *)p;
    case TD_UINT8: return *(const uint8_t *)p;
    default: return NAN;
    }
}

double
td_tensor_get(const td_tensor_t *t, const int64_t *index)
{
    int64_t off = 0;

    for (int d = 0; d < t->ndim; d++) {
        off += index[d] * t->strides[d];
    }
    return load_elem((const char *)td_tensor_data(t) +
                     off * (int64_t)td_dtype_size(t->dtype), t->dtype);
}

td_status_t
td_tensor_item(const td_tensor_t *t, double *value_p)
{
    if (td_tensor_numel(t) != 1) {
        return td_error(TD_ERR_SHAPE, "tensor: item() of a tensor with %lld "
                        "elements %s", (long long)td_tensor_numel(t),
                        TD_SHAPE_STR(t));
    }
    if (t->device.type != TD_DEVICE_CPU) {
        return td_error(TD_ERR_UNSUPPORTED, "tensor: item() needs a cpu tensor");
    }
    *value_p = load_elem(td_tensor_data(t), t->dtype);
    return TD_OK;
}

/* ---- copies ---------------------------------------------------------- */

static td_status_t
broadcast_strides(const td_tensor_t *src, const int64_t *shape, int ndim,
                  int64_t *strides, const char *what)
{
    int lead = ndim - src->ndim;

    if (lead < 0) {
        goto bad;
    }
    for (int d = 0; d < ndim; d++) {
        int sd = d - lead;
        if (sd < 0) {
            strides[d] = 0;
        } else if (src->shape[sd] == shape[d]) {
            strides[d] = src->strides[sd];
        } else if (src->shape[sd] == 1) {
            strides[d] = 0;
        } else {
            goto bad;
        }
    }
    return TD_OK;
bad:
    return td_error(TD_ERR_SHAPE, "%s: shape %s cannot broadcast to %s", what,
                    TD_SHAPE_STR(src),
                    td__shape_str(shape, ndim, (char[96]){0}, 96));
}

/* copy_ from another device: SRC's values (broadcast to DST's shape,
 * converted to DST's dtype) made contiguous on SRC's device, moved by
 * td__device_memcpy, then copied into DST's strides on its own device. */
static td_status_t
copy_across(td_tensor_t *dst, td_tensor_t *src)
{
    td_tensor_t *a = NULL, *b = NULL;
    int64_t sst[TD_MAX_DIMS];
    td_status_t status;

    status = broadcast_strides(src, dst->shape, dst->ndim, sst, "copy_");
    if (status == TD_OK) {
        status = td_tensor_empty(dst->shape, dst->ndim, dst->dtype,
                                 src->device, &a);
    }
    if (status == TD_OK) {
        status = td_tensor_empty(dst->shape, dst->ndim, dst->dtype,
                                 dst->device, &b);
    }
    if (status != TD_OK) {
        goto out;
    }
    td__kernels_get(src->device)->copy(dst->dtype,
        (td_operand_t){td_tensor_data(a), a->strides}, src->dtype,
        (td_operand_t){td_tensor_data(src), sst}, dst->shape, dst->ndim);
    status = td__device_memcpy(td_tensor_data(b), dst->device,
                              td_tensor_data(a), src->device,
                              td_tensor_nbytes(a));
    if (status != TD_OK) {
        goto out;
    }
    td__kernels_get(dst->device)->copy(dst->dtype,
        (td_operand_t){td_tensor_data(dst), dst->strides}, dst->dtype,
        (td_operand_t){td_tensor_data(b), b->strides}, dst->shape, dst->ndim);
    td_tensor_bump_version(dst);
out:
    td_tensor_release(a);
    td_tensor_release(b);
    return status;
}

td_status_t
td_tensor_copy_(td_tensor_t *dst, td_tensor_t *src)
{
    int64_t sst[TD_MAX_DIMS];
    td_status_t status;

    status = broadcast_strides(src, dst->shape, dst->ndim, sst, "copy_");
    if (status != TD_OK) {
        return status;
    }
    if (!td__device_same(dst->device, src->device)) {
        /* across devices: through a contiguous copy of SRC on DST's
         * device (td__device_memcpy), then the strided copy there */
        return copy_across(dst, src);
    }
    td__kernels_get(dst->device)->copy(dst->dtype,
                        (td_operand_t){td_tensor_data(dst), dst->strides},
                        src->dtype, (td_operand_t){td_tensor_data(src), sst},
                        dst->shape, dst->ndim);
    td_tensor_bump_version(dst);
    return TD_OK;
}

td_status_t
td_tensor_fill_(td_tensor_t *t, double value)
{
    td__kernels_get(t->device)->fill(t->dtype,
                                    (td_operand_t){td_tensor_data(t), t->strides},
                                    value, t->shape, t->ndim);
    td_tensor_bump_version(t);
    return TD_OK;
}

td_status_t
td_tensor_zero_(td_tensor_t *t)
{
    return td_tensor_fill_(t, 0.0);
}

/* A contiguous copy without autograd. */
td_status_t
td__tensor_copy_raw(td_tensor_t *t, td_dtype_t dtype, td_tensor_t **out)
{
    td_tensor_t *c;
    td_status_t status = td_tensor_empty(t->shape, t->ndim, dtype, t->device, &c);

    if (status != TD_OK) {
        return status;
    }
    td__kernels_get(t->device)->copy(dtype,
                        (td_operand_t){td_tensor_data(c), c->strides},
                        t->dtype, (td_operand_t){td_tensor_data(t), t->strides},
                        t->shape, t->ndim);
    *out = c;
    return TD_OK;
}

/* The view of expand, recording nothing (ops_reduce.c wraps it with its
 * backward, a sum). */
td_status_t
td__tensor_expand_view(td_tensor_t *t, const int64_t *shape, int ndim,
                      td_tensor_t **out)
{
    int64_t strides[TD_MAX_DIMS], full[TD_MAX_DIMS];
    td_status_t status;
    int lead = ndim - t->ndim;

    if (ndim > TD_MAX_DIMS || lead < 0) {
        return td_error(TD_ERR_SHAPE, "expand: %s to %d dims", TD_SHAPE_STR(t),
                        ndim);
    }
    for (int d = 0; d < ndim; d++) {
        full[d] = shape[d] == -1 && d >= lead ? t->shape[d - lead] : shape[d];
    }
    status = broadcast_strides(t, full, ndim, strides, "expand");
    if (status != TD_OK) {
        return status;
    }
    return td__tensor_new_view(t, full, strides, ndim, t->offset, out);
}

td_status_t
td_tensor_detach(td_tensor_t *t, td_tensor_t **out)
{
    return td__tensor_new_view(t, t->shape, t->strides, t->ndim, t->offset, out);
}

/* ---- random --------------------------------------------------------- */

/* Values come from the device's counter-based random kernel: element i
 * depends only on (seed, i), so every device and every split draws the
 * same stream. */
static td_status_t
random_fill(td_tensor_t *t, int normal, double a, double b, uint64_t seed)
{
    td_tensor_t *tmp;
    int64_t n = td_tensor_numel(t);
    td_status_t status;

    if (!td_dtype_is_float(t->dtype)) {
        return td_error(TD_ERR_DTYPE, "random: dtype %s is not floating",
                        td_dtype_name(t->dtype));
    }
    if (td_tensor_is_contiguous(t)) {
        td__kernels_get(t->device)->random(t->dtype, td_tensor_data(t), n,
                                          normal, a, b, seed);
        td_tensor_bump_version(t);
        return TD_OK;
    }
    status = td_tensor_empty(t->shape, t->ndim, t->dtype, t->device, &tmp);
    if (status != TD_OK) {
        return status;
    }
    td__kernels_get(t->device)->random(t->dtype, td_tensor_data(tmp), n,
                                      normal, a, b, seed);
    status = td_tensor_copy_(t, tmp);
    td_tensor_release(tmp);
    return status;
}

td_status_t
td_tensor_uniform_(td_tensor_t *t, double lo, double hi, uint64_t seed)
{
    return random_fill(t, 0, lo, hi, seed);
}

td_status_t
td_tensor_normal_(td_tensor_t *t, double mean, double std, uint64_t seed)
{
    return random_fill(t, 1, mean, std, seed);
}
