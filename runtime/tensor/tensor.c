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

void td_autograd_leaf_dying(td_tensor_t *t);

size_t
td_dtype_size(td_dtype_t dtype)
{
    switch (dtype) {
    case TD_FLOAT32: return 4;
    case TD_FLOAT64: return 8;
    case TD_INT64: return 8;
    case TD_INT32: return 4;
    case TD_UINT8: return 1;
    default: return 0;
    }
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
td_shape_str(const int64_t *shape, int ndim, char *buf, size_t len)
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

/* A small cache of large freed blocks: glibc returns blocks above its mmap
 * threshold to the kernel, so a training step that allocates the same
 * activations every iteration would otherwise page-fault them in anew
 * (measured: ~10% of the MLP step). Exact-size reuse, bounded in count and
 * bytes; small blocks go straight to malloc. */
#define CACHE_SLOTS 32
#define CACHE_MIN_BYTES (64 * 1024)
#define CACHE_MAX_BYTES ((size_t)256 << 20)
#define HUGE_BYTES      ((size_t)2 << 20)   /* x86-64 / arm64 huge page */
#define HUGE_MIN_BYTES  ((size_t)4 << 20)   /* storage this large: THP */

static struct {
    pthread_mutex_t lock;
    void           *ptr[CACHE_SLOTS];
    size_t          size[CACHE_SLOTS];
    size_t          bytes;
} cache = {PTHREAD_MUTEX_INITIALIZER, {0}, {0}, 0};

static size_t
alloc_size(size_t nbytes)
{
    /* 64-byte alignment for vector loads; at least one line so a 0-element
     * tensor still has a distinct pointer; large sizes rounded to pages */
    size_t n = ((nbytes + 63) / 64) * 64 + 64;

    return n >= CACHE_MIN_BYTES ? (n + 4095) & ~(size_t)4095 : n;
}

static void *
block_alloc(size_t size)
{
    if (size >= CACHE_MIN_BYTES) {
        pthread_mutex_lock(&cache.lock);
        for (int i = 0; i < CACHE_SLOTS; i++) {
            if (cache.ptr[i] != NULL && cache.size[i] == size) {
                void *p = cache.ptr[i];
                cache.ptr[i] = NULL;
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
        pthread_mutex_lock(&cache.lock);
        if (cache.bytes + size <= CACHE_MAX_BYTES) {
            for (int i = 0; i < CACHE_SLOTS; i++) {
                if (cache.ptr[i] == NULL) {
                    cache.ptr[i] = p;
                    cache.size[i] = size;
                    cache.bytes += size;
                    pthread_mutex_unlock(&cache.lock);
                    return;
                }
            }
        }
        pthread_mutex_unlock(&cache.lock);
    }
    free(p);
}

/* Device memory comes from the device's caching allocator
 * (kernels/device.h); the deleter gives it back there. */
static void
device_storage_free(void *data, void *arg)
{
    td_storage_t *s = arg;

    td_device_free(s->device, data);
}

static td_storage_t *
device_storage_new(size_t nbytes, td_device_t device)
{
    td_storage_t *s = calloc(1, sizeof(*s));

    if (s == NULL || td_device_alloc(device, nbytes, &s->data) != TD_OK) {
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
        (status = td_device_check(device)) != TD_OK) {
        return status;                 /* "no CUDA device" on a host */
    }
    if (td_kernels_get(device) == NULL) {
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
td_tensor_empty_like(const td_tensor_t *t, td_tensor_t **out)
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
td_tensor_new_view(td_tensor_t *base, const int64_t *shape,
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
    td_autograd_leaf_dying(t);
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

    if (grad != NULL && (grad->dtype != t->dtype || !td_shape_equal(grad, t))) {
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
td_shape_equal(const td_tensor_t *a, const td_tensor_t *b)
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
                    td_shape_str(shape, ndim, (char[96]){0}, 96));
}

/* copy_ from another device: SRC's values (broadcast to DST's shape,
 * converted to DST's dtype) made contiguous on SRC's device, moved by
 * td_device_memcpy, then copied into DST's strides on its own device. */
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
    td_kernels_get(src->device)->copy(dst->dtype,
        (td_operand_t){td_tensor_data(a), a->strides}, src->dtype,
        (td_operand_t){td_tensor_data(src), sst}, dst->shape, dst->ndim);
    status = td_device_memcpy(td_tensor_data(b), dst->device,
                              td_tensor_data(a), src->device,
                              td_tensor_nbytes(a));
    if (status != TD_OK) {
        goto out;
    }
    td_kernels_get(dst->device)->copy(dst->dtype,
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
         * device (td_device_memcpy), then the strided copy there */
        return copy_across(dst, src);
    }
    td_kernels_get(dst->device)->copy(dst->dtype,
                        (td_operand_t){td_tensor_data(dst), dst->strides},
                        src->dtype, (td_operand_t){td_tensor_data(src), sst},
                        dst->shape, dst->ndim);
    td_tensor_bump_version(dst);
    return TD_OK;
}

td_status_t
td_tensor_fill_(td_tensor_t *t, double value)
{
    td_kernels_get(t->device)->fill(t->dtype,
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
static td_status_t
raw_contiguous_copy(td_tensor_t *t, td_dtype_t dtype, td_tensor_t **out)
{
    td_tensor_t *c;
    td_status_t status = td_tensor_empty(t->shape, t->ndim, dtype, t->device, &c);

    if (status != TD_OK) {
        return status;
    }
    td_kernels_get(t->device)->copy(dtype,
                        (td_operand_t){td_tensor_data(c), c->strides},
                        t->dtype, (td_operand_t){td_tensor_data(t), t->strides},
                        t->shape, t->ndim);
    *out = c;
    return TD_OK;
}

/* ---- autograd for views and copies -------------------------------------- */

typedef struct {
    int     kind;
    int     ndim;                  /* input's shape */
    int64_t shape[TD_MAX_DIMS];
    int     d0, d1;                /* transpose dims, narrow/select dim */
    int     perm[TD_MAX_DIMS];
    int64_t start, length;
    td_dtype_t dtype;
} view_state_t;

enum { V_RESHAPE, V_TRANSPOSE, V_PERMUTE, V_NARROW, V_SELECT, V_COPY,
       V_DTYPE, V_PAD };

/* grad of narrow: zeros of the input shape with G written into the slice.
 * Built from differentiable ops: zeros + cat would do too, but a padded
 * write is one pass. Its own gradient is narrow(gg), recorded here. */
static td_status_t narrow_backward(td_tensor_t *g, const int64_t *shape,
                                   int ndim, int dim, int64_t start,
                                   td_tensor_t **out);

static td_status_t
view_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    view_state_t *st = td_node_state(node);
    td_tensor_t *g = gin[0], *tmp = NULL;
    int inv[TD_MAX_DIMS];
    td_status_t status;

    if (g == NULL) {
        gout[0] = NULL;
        return TD_OK;
    }
    switch (st->kind) {
    case V_RESHAPE:
        return td_tensor_reshape(g, st->shape, st->ndim, &gout[0]);
    case V_TRANSPOSE:
        return td_tensor_transpose(g, st->d0, st->d1, &gout[0]);
    case V_PERMUTE:
        for (int d = 0; d < st->ndim; d++) {
            inv[st->perm[d]] = d;
        }
        return td_tensor_permute(g, inv, &gout[0]);
    case V_NARROW:
        return narrow_backward(g, st->shape, st->ndim, st->d0, st->start,
                               &gout[0]);
    case V_SELECT:
        status = td_tensor_unsqueeze(g, st->d0, &tmp);
        if (status == TD_OK) {
            status = narrow_backward(tmp, st->shape, st->ndim, st->d0,
                                     st->start, &gout[0]);
            td_tensor_release(tmp);
        }
        return status;
    case V_COPY:
        gout[0] = td_tensor_retain(g);
        return TD_OK;
    case V_DTYPE:
        return td_tensor_to_dtype(g, st->dtype, &gout[0]);
    case V_PAD:
        return td_tensor_narrow(g, st->d0, st->start, st->length, &gout[0]);
    }
    return td_error(TD_ERR_STATE, "%s: unknown view kind", td_node_name(node));
}

static const td_node_ops_t view_ops[] = {
    [V_RESHAPE] = {"ViewBackward", view_backward, NULL, free},
    [V_TRANSPOSE] = {"TransposeBackward", view_backward, NULL, free},
    [V_PERMUTE] = {"PermuteBackward", view_backward, NULL, free},
    [V_NARROW] = {"NarrowBackward", view_backward, NULL, free},
    [V_SELECT] = {"SelectBackward", view_backward, NULL, free},
    [V_COPY] = {"CloneBackward", view_backward, NULL, free},
    [V_DTYPE] = {"ToCopyBackward", view_backward, NULL, free},
    [V_PAD] = {"NarrowBackwardBackward", view_backward, NULL, free},
};

/* Record a view/copy node for OUT from IN; on failure releases OUT. */
static td_status_t
record_view(td_tensor_t *in, td_tensor_t *out, int kind, int d0, int d1,
            const int *perm, int64_t start, td_tensor_t **out_p)
{
    view_state_t *st;
    td_status_t status;

    if (!td_grad_enabled() || !td_tensor_requires_grad(in)) {
        *out_p = out;
        return TD_OK;
    }
    st = calloc(1, sizeof(*st));
    if (st == NULL) {
        td_tensor_release(out);
        return td_error(TD_ERR_NO_MEMORY, "tensor: out of memory");
    }
    st->kind = kind;
    st->ndim = in->ndim;
    memcpy(st->shape, in->shape, sizeof(st->shape));
    st->d0 = d0;
    st->d1 = d1;
    st->start = start;
    st->length = kind == V_PAD ? in->shape[d0] : 0;
    st->dtype = in->dtype;
    if (perm != NULL) {
        memcpy(st->perm, perm, (size_t)in->ndim * sizeof(int));
    }
    status = td_autograd_record(&view_ops[kind], st, &in, 1, out);
    if (status != TD_OK) {
        td_tensor_release(out);
        return status;
    }
    *out_p = out;
    return TD_OK;
}

static td_status_t
narrow_backward(td_tensor_t *g, const int64_t *shape, int ndim, int dim,
                int64_t start, td_tensor_t **out)
{
    td_tensor_t *z, *slice;
    td_status_t status;
    int was = td_grad_set_enabled(0);

    status = td_tensor_zeros(shape, ndim, g->dtype, &z);
    if (status == TD_OK) {
        status = td_tensor_new_view(z, z->shape, z->strides, z->ndim, 0, &slice);
        if (status == TD_OK) {
            slice->shape[dim] = g->shape[dim];
            slice->offset = start * z->strides[dim];
            status = td_tensor_copy_(slice, g);
            td_tensor_release(slice);
        }
    }
    td_grad_set_enabled(was);
    if (status != TD_OK) {
        td_tensor_release(z);
        return status;
    }
    /* d/dg of the padded write is narrow of the incoming gradient */
    return record_view(g, z, V_PAD, dim, 0, NULL, start, out);
}

/* ---- views ---------------------------------------------------------- */

static int
norm_dim(int dim, int ndim)
{
    return dim < 0 ? dim + ndim : dim;
}

td_status_t
td_tensor_view(td_tensor_t *t, const int64_t *shape_in, int ndim,
               td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS], strides[TD_MAX_DIMS];
    int64_t numel = td_tensor_numel(t), known = 1;
    int infer = -1;
    td_tensor_t *v;
    td_status_t status;

    if (ndim < 0 || ndim > TD_MAX_DIMS) {
        return td_error(TD_ERR_SHAPE, "view: ndim=%d is outside 0..%d", ndim,
                        TD_MAX_DIMS);
    }
    for (int d = 0; d < ndim; d++) {
        shape[d] = shape_in[d];
        if (shape[d] == -1 && infer < 0) {
            infer = d;
        } else if (shape[d] < 0) {
            return td_error(TD_ERR_SHAPE, "view: shape[%d]=%lld is invalid",
                            d, (long long)shape[d]);
        } else {
            known *= shape[d];
        }
    }
    if (infer >= 0) {
        if (known == 0 || numel % known != 0) {
            goto bad;
        }
        shape[infer] = numel / known;
        known = numel;
    }
    if (known != numel) {
        goto bad;
    }
    if (!td_tensor_is_contiguous(t)) {
        return td_error(TD_ERR_SHAPE, "view: tensor %s is not contiguous; "
                        "use reshape", TD_SHAPE_STR(t));
    }
    {
        int64_t s = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            strides[d] = s;
            s *= shape[d];
        }
    }
    status = td_tensor_new_view(t, shape, strides, ndim, t->offset, &v);
    if (status != TD_OK) {
        return status;
    }
    return record_view(t, v, V_RESHAPE, 0, 0, NULL, 0, out);
bad:
    return td_error(TD_ERR_SHAPE, "view: shape %s is invalid for a tensor %s "
                    "of %lld elements",
                    td_shape_str(shape_in, ndim, (char[96]){0}, 96),
                    TD_SHAPE_STR(t), (long long)numel);
}

td_status_t
td_tensor_reshape(td_tensor_t *t, const int64_t *shape, int ndim,
                  td_tensor_t **out)
{
    td_tensor_t *c;
    td_status_t status;

    if (td_tensor_is_contiguous(t)) {
        return td_tensor_view(t, shape, ndim, out);
    }
    status = td_tensor_contiguous(t, &c);
    if (status != TD_OK) {
        return status;
    }
    status = td_tensor_view(c, shape, ndim, out);
    td_tensor_release(c);
    return status;
}

td_status_t
td_tensor_transpose(td_tensor_t *t, int d0, int d1, td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS], strides[TD_MAX_DIMS], tmp;
    td_tensor_t *v;
    td_status_t status;

    d0 = norm_dim(d0, t->ndim);
    d1 = norm_dim(d1, t->ndim);
    if (d0 < 0 || d0 >= t->ndim || d1 < 0 || d1 >= t->ndim) {
        return td_error(TD_ERR_RANGE, "transpose: dims (%d, %d) out of range "
                        "for %s", d0, d1, TD_SHAPE_STR(t));
    }
    memcpy(shape, t->shape, sizeof(shape));
    memcpy(strides, t->strides, sizeof(strides));
    tmp = shape[d0]; shape[d0] = shape[d1]; shape[d1] = tmp;
    tmp = strides[d0]; strides[d0] = strides[d1]; strides[d1] = tmp;
    status = td_tensor_new_view(t, shape, strides, t->ndim, t->offset, &v);
    if (status != TD_OK) {
        return status;
    }
    return record_view(t, v, V_TRANSPOSE, d0, d1, NULL, 0, out);
}

td_status_t
td_tensor_permute(td_tensor_t *t, const int *dims, td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS], strides[TD_MAX_DIMS];
    int seen[TD_MAX_DIMS] = {0}, perm[TD_MAX_DIMS];
    td_tensor_t *v;
    td_status_t status;

    for (int d = 0; d < t->ndim; d++) {
        int s = norm_dim(dims[d], t->ndim);
        if (s < 0 || s >= t->ndim || seen[s]) {
            return td_error(TD_ERR_RANGE, "permute: dims[%d]=%d is not a "
                            "permutation of %d dims", d, dims[d], t->ndim);
        }
        seen[s] = 1;
        perm[d] = s;
        shape[d] = t->shape[s];
        strides[d] = t->strides[s];
    }
    status = td_tensor_new_view(t, shape, strides, t->ndim, t->offset, &v);
    if (status != TD_OK) {
        return status;
    }
    return record_view(t, v, V_PERMUTE, 0, 0, perm, 0, out);
}

td_status_t
td_tensor_narrow(td_tensor_t *t, int dim, int64_t start, int64_t length,
                 td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS];
    td_tensor_t *v;
    td_status_t status;

    dim = norm_dim(dim, t->ndim);
    if (dim < 0 || dim >= t->ndim) {
        return td_error(TD_ERR_RANGE, "narrow: dim out of range for %s",
                        TD_SHAPE_STR(t));
    }
    if (start < 0 || length < 0 || start + length > t->shape[dim]) {
        return td_error(TD_ERR_RANGE, "narrow: [%lld, %lld) is outside dim "
                        "%d of %s", (long long)start,
                        (long long)(start + length), dim, TD_SHAPE_STR(t));
    }
    memcpy(shape, t->shape, sizeof(shape));
    shape[dim] = length;
    status = td_tensor_new_view(t, shape, t->strides, t->ndim,
                                t->offset + start * t->strides[dim], &v);
    if (status != TD_OK) {
        return status;
    }
    return record_view(t, v, V_NARROW, dim, 0, NULL, start, out);
}

td_status_t
td_tensor_select(td_tensor_t *t, int dim, int64_t index, td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS], strides[TD_MAX_DIMS];
    td_tensor_t *v;
    td_status_t status;
    int j = 0;

    dim = norm_dim(dim, t->ndim);
    if (dim < 0 || dim >= t->ndim) {
        return td_error(TD_ERR_RANGE, "select: dim out of range for %s",
                        TD_SHAPE_STR(t));
    }
    if (index < 0) {
        index += t->shape[dim];
    }
    if (index < 0 || index >= t->shape[dim]) {
        return td_error(TD_ERR_RANGE, "select: index %lld is outside dim %d "
                        "of %s", (long long)index, dim, TD_SHAPE_STR(t));
    }
    for (int d = 0; d < t->ndim; d++) {
        if (d != dim) {
            shape[j] = t->shape[d];
            strides[j++] = t->strides[d];
        }
    }
    status = td_tensor_new_view(t, shape, strides, t->ndim - 1,
                                t->offset + index * t->strides[dim], &v);
    if (status != TD_OK) {
        return status;
    }
    return record_view(t, v, V_SELECT, dim, 0, NULL, index, out);
}

td_status_t
td_tensor_squeeze(td_tensor_t *t, int dim, td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS];
    int j = 0;

    dim = norm_dim(dim, t->ndim);
    if (dim < 0 || dim >= t->ndim || t->shape[dim] != 1) {
        return td_error(TD_ERR_SHAPE, "squeeze: dim %d of %s is not of size 1",
                        dim, TD_SHAPE_STR(t));
    }
    for (int d = 0; d < t->ndim; d++) {
        if (d != dim) {
            shape[j++] = t->shape[d];
        }
    }
    return td_tensor_reshape(t, shape, j, out);
}

td_status_t
td_tensor_unsqueeze(td_tensor_t *t, int dim, td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS], strides[TD_MAX_DIMS];
    td_tensor_t *v;
    td_status_t status;
    int j = 0;

    if (dim < 0) {
        dim += t->ndim + 1;
    }
    if (dim < 0 || dim > t->ndim || t->ndim >= TD_MAX_DIMS) {
        return td_error(TD_ERR_RANGE, "unsqueeze: dim %d out of range for %s",
                        dim, TD_SHAPE_STR(t));
    }
    for (int d = 0; d <= t->ndim; d++) {
        if (d == dim) {
            shape[d] = 1;
            strides[d] = d < t->ndim ? t->strides[j] * t->shape[j] : 1;
        } else {
            shape[d] = t->shape[j];
            strides[d] = t->strides[j];
            j++;
        }
    }
    status = td_tensor_new_view(t, shape, strides, t->ndim + 1, t->offset, &v);
    if (status != TD_OK) {
        return status;
    }
    return record_view(t, v, V_RESHAPE, 0, 0, NULL, 0, out);
}

/* The view of expand, recording nothing (ops_reduce.c wraps it with its
 * backward, a sum). */
td_status_t
td_tensor_expand_view(td_tensor_t *t, const int64_t *shape, int ndim,
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
    return td_tensor_new_view(t, full, strides, ndim, t->offset, out);
}

td_status_t
td_tensor_contiguous(td_tensor_t *t, td_tensor_t **out)
{
    if (td_tensor_is_contiguous(t)) {
        *out = td_tensor_retain(t);
        return TD_OK;
    }
    return td_tensor_clone(t, out);
}

td_status_t
td_tensor_clone(td_tensor_t *t, td_tensor_t **out)
{
    td_tensor_t *c;
    td_status_t status = raw_contiguous_copy(t, t->dtype, &c);

    if (status != TD_OK) {
        return status;
    }
    return record_view(t, c, V_COPY, 0, 0, NULL, 0, out);
}

td_status_t
td_tensor_to_dtype(td_tensor_t *t, td_dtype_t dtype, td_tensor_t **out)
{
    td_tensor_t *c;
    td_status_t status;

    if (td_dtype_size(dtype) == 0) {
        return td_error(TD_ERR_DTYPE, "to_dtype: dtype=%d is unknown", dtype);
    }
    status = raw_contiguous_copy(t, dtype, &c);
    if (status != TD_OK) {
        return status;
    }
    if (!td_dtype_is_float(dtype)) {
        *out = c;
        return TD_OK;
    }
    return record_view(t, c, V_DTYPE, 0, 0, NULL, 0, out);
}

td_status_t
td_tensor_detach(td_tensor_t *t, td_tensor_t **out)
{
    return td_tensor_new_view(t, t->shape, t->strides, t->ndim, t->offset, out);
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
        td_kernels_get(t->device)->random(t->dtype, td_tensor_data(t), n,
                                          normal, a, b, seed);
        td_tensor_bump_version(t);
        return TD_OK;
    }
    status = td_tensor_empty(t->shape, t->ndim, t->dtype, t->device, &tmp);
    if (status != TD_OK) {
        return status;
    }
    td_kernels_get(t->device)->random(t->dtype, td_tensor_data(tmp), n,
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

/* ---- joins and splits ------------------------------------------------- */

typedef struct {
    int      n, dim;
    int64_t *sizes;
} cat_state_t;

static void
cat_destroy(void *p)
{
    cat_state_t *st = p;

    free(st->sizes);
    free(st);
}

static td_status_t
cat_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    cat_state_t *st = td_node_state(node);
    int64_t start = 0;
    td_status_t status;

    for (int i = 0; i < st->n; i++) {
        gout[i] = NULL;
        if (gin[0] != NULL) {
            status = td_tensor_narrow(gin[0], st->dim, start, st->sizes[i],
                                      &gout[i]);
            if (status != TD_OK) {
                for (int j = 0; j < i; j++) {
                    td_tensor_release(gout[j]);
                }
                return status;
            }
        }
        start += st->sizes[i];
    }
    return TD_OK;
}

static const td_node_ops_t cat_ops = {"CatBackward", cat_backward, NULL,
                                      cat_destroy};

td_status_t
td_tensor_cat(td_tensor_t *const *ts, int n, int dim, td_tensor_t **out)
{
    int64_t shape[TD_MAX_DIMS], start = 0;
    td_tensor_t *c, *slice;
    cat_state_t *st;
    td_status_t status;
    int bad_i = 0;

    if (n <= 0) {
        return td_error(TD_ERR_INVALID, "cat: no tensors");
    }
    dim = norm_dim(dim, ts[0]->ndim);
    if (dim < 0 || dim >= ts[0]->ndim) {
        return td_error(TD_ERR_RANGE, "cat: dim out of range for %s",
                        TD_SHAPE_STR(ts[0]));
    }
    memcpy(shape, ts[0]->shape, sizeof(shape));
    shape[dim] = 0;
    for (int i = 0; i < n; i++) {
        bad_i = i;
        if (!td__device_same(ts[i]->device, ts[0]->device)) {
            char a[24], b[24];

            return td_error(TD_ERR_INVALID, "cat: tensor %d is on %s, tensor "
                            "0 on %s (move them to one device first)", i,
                            td_device_str(ts[i]->device, a, sizeof(a)),
                            td_device_str(ts[0]->device, b, sizeof(b)));
        }
        if (ts[i]->ndim != ts[0]->ndim || ts[i]->dtype != ts[0]->dtype) {
            goto bad;
        }
        for (int d = 0; d < ts[0]->ndim; d++) {
            if (d != dim && ts[i]->shape[d] != ts[0]->shape[d]) {
                goto bad;
            }
        }
        shape[dim] += ts[i]->shape[dim];
    }
    status = td_tensor_empty(shape, ts[0]->ndim, ts[0]->dtype, ts[0]->device, &c);
    if (status != TD_OK) {
        return status;
    }
    for (int i = 0; i < n; i++) {
        td_tensor_new_view(c, ts[i]->shape, c->strides, c->ndim,
                           start * c->strides[dim], &slice);
        td_kernels_get(c->device)->copy(c->dtype,
                            (td_operand_t){td_tensor_data(slice), slice->strides},
                            ts[i]->dtype,
                            (td_operand_t){td_tensor_data(ts[i]), ts[i]->strides},
                            slice->shape, slice->ndim);
        td_tensor_release(slice);
        start += ts[i]->shape[dim];
    }
    if (td_grad_enabled() && td_any_requires_grad(ts, n)) {
        st = calloc(1, sizeof(*st));
        if (st == NULL || (st->sizes = calloc((size_t)n, sizeof(int64_t))) == NULL) {
            free(st);
            td_tensor_release(c);
            return td_error(TD_ERR_NO_MEMORY, "cat: out of memory");
        }
        st->n = n;
        st->dim = dim;
        for (int i = 0; i < n; i++) {
            st->sizes[i] = ts[i]->shape[dim];
        }
        status = td_autograd_record(&cat_ops, st, ts, n, c);
        if (status != TD_OK) {
            td_tensor_release(c);
            return status;
        }
    }
    *out = c;
    return TD_OK;
bad:
    return td_error(TD_ERR_SHAPE, "cat: tensor %d (%s %s) does not match "
                    "tensor 0 (%s %s) outside dim %d", bad_i,
                    td_dtype_name(ts[bad_i]->dtype), TD_SHAPE_STR(ts[bad_i]),
                    td_dtype_name(ts[0]->dtype), TD_SHAPE_STR(ts[0]), dim);
}

td_status_t
td_tensor_stack(td_tensor_t *const *ts, int n, int dim, td_tensor_t **out)
{
    td_tensor_t *u[64];
    td_status_t status = TD_OK;
    int k;

    if (n <= 0 || n > 64) {
        return td_error(TD_ERR_INVALID, "stack: n=%d is outside 1..64", n);
    }
    for (k = 0; k < n; k++) {
        if (!td_shape_equal(ts[k], ts[0])) {
            status = td_error(TD_ERR_SHAPE, "stack: tensor %d %s differs from "
                              "tensor 0 %s", k, TD_SHAPE_STR(ts[k]),
                              TD_SHAPE_STR(ts[0]));
            break;
        }
        status = td_tensor_unsqueeze(ts[k], dim, &u[k]);
        if (status != TD_OK) {
            break;
        }
    }
    if (status == TD_OK) {
        status = td_tensor_cat(u, n, dim < 0 ? dim : dim, out);
    }
    for (int i = 0; i < k; i++) {
        td_tensor_release(u[i]);
    }
    return status;
}

td_status_t
td_tensor_split(td_tensor_t *t, int64_t split_size, int dim,
                td_tensor_t **outs, int max_outs, int *n_p)
{
    int64_t size;
    int n;
    td_status_t status;

    dim = norm_dim(dim, t->ndim);
    if (dim < 0 || dim >= t->ndim || split_size <= 0) {
        return td_error(TD_ERR_INVALID, "split: split_size=%lld dim=%d for %s",
                        (long long)split_size, dim, TD_SHAPE_STR(t));
    }
    size = t->shape[dim];
    n = (int)((size + split_size - 1) / split_size);
    if (n > max_outs) {
        return td_error(TD_ERR_RANGE, "split: %d pieces do not fit in %d", n,
                        max_outs);
    }
    for (int i = 0; i < n; i++) {
        int64_t len = size - i * split_size < split_size ? size - i * split_size
                                                         : split_size;
        status = td_tensor_narrow(t, dim, i * split_size, len, &outs[i]);
        if (status != TD_OK) {
            for (int j = 0; j < i; j++) {
                td_tensor_release(outs[j]);
            }
            return status;
        }
    }
    *n_p = n;
    return TD_OK;
}

td_status_t
td_tensor_chunk(td_tensor_t *t, int chunks, int dim, td_tensor_t **outs,
                int *n_p)
{
    int d = norm_dim(dim, t->ndim);

    if (chunks <= 0 || d < 0 || d >= t->ndim) {
        return td_error(TD_ERR_INVALID, "chunk: chunks=%d dim=%d for %s",
                        chunks, dim, TD_SHAPE_STR(t));
    }
    /* as torch: pieces of ceil(size / chunks) */
    return td_tensor_split(t, t->shape[d] > 0 ? (t->shape[d] + chunks - 1) / chunks : 1,
                           d, outs, chunks, n_p);
}
