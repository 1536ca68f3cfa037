/* todist/tensor.h: n-dimensional tensors over refcounted storage.
 *
 * A tensor is a view: dtype, device, shape, strides (in elements) and an
 * offset into a storage that several views may share. Storage is
 * refcounted; so is the tensor handle (td_tensor_retain/release). Views
 * (reshape, transpose, narrow, select, expand, ...) share storage and its
 * version counter; every in-place write bumps that counter so autograd can
 * refuse a saved tensor that changed under it.
 *
 * Devices: TD_DEVICE_CPU now; TD_DEVICE_CUDA (index N) has its slot in the
 * per-device kernel table (td_kernels_t in runtime/tensor/tensor_internal.h) so a CUDA
 * module only registers kernels.
 *
 * The accessors (dtype, ndim, shape, strides, offset, data, numel, nbytes,
 * is_contiguous, requires_grad, grad, version) are the stable surface the
 * RPC layer serializes with; they will not change.
 *
 * Threads: retain/release and all accessors are thread-safe. A tensor's
 * data may be read by several threads at once; writing it (fill, copy_,
 * in-place ops) while others read it is the caller's race, as in PyTorch.
 * Functions that create tensors are thread-safe. Every function that can
 * fail returns td_status_t and sets its output only on success. */
#ifndef TODIST_TENSOR_H
#define TODIST_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <todist/status.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_MAX_DIMS 8

typedef enum {
    TD_FLOAT32 = 0,
    TD_FLOAT64 = 1,
    TD_INT64   = 2,
    TD_INT32   = 3,
    TD_UINT8   = 4,
    TD_NUM_DTYPES
} td_dtype_t;

typedef enum {
    TD_DEVICE_CPU  = 0,
    TD_DEVICE_CUDA = 1,
    TD_NUM_DEVICE_TYPES
} td_device_type_t;

typedef struct {
    td_device_type_t type;
    int              index;   /* cuda:N; 0 for cpu */
} td_device_t;

#define TD_CPU ((td_device_t){TD_DEVICE_CPU, 0})

typedef struct td_tensor td_tensor_t;

/* dtype facts: size in bytes (0 for an unknown dtype), name ("float32"),
 * and whether it is a floating type (only those can require grad). */
size_t      td_dtype_size(td_dtype_t dtype);
const char *td_dtype_name(td_dtype_t dtype);
int         td_dtype_is_float(td_dtype_t dtype);
/* Parse a device string "cpu" / "cuda:N". */
td_status_t td_device_parse(const char *s, td_device_t *device_p);

/* ---- creation ------------------------------------------------------- */

/* Uninitialised contiguous tensor of SHAPE[NDIM] (ndim 0 = a scalar). */
td_status_t td_tensor_empty(const int64_t *shape, int ndim, td_dtype_t dtype,
                            td_device_t device, td_tensor_t **out);
td_status_t td_tensor_zeros(const int64_t *shape, int ndim, td_dtype_t dtype,
                            td_tensor_t **out);
td_status_t td_tensor_full(const int64_t *shape, int ndim, td_dtype_t dtype,
                           double value, td_tensor_t **out);
/* A 0-d tensor holding VALUE. */
td_status_t td_tensor_scalar(double value, td_dtype_t dtype, td_tensor_t **out);
/* Copy NBYTES of DATA (contiguous, row-major) into a new cpu tensor. */
td_status_t td_tensor_from_data(const void *data, const int64_t *shape,
                                int ndim, td_dtype_t dtype, td_tensor_t **out);
/* Wrap DATA without copying; DELETER(DATA, ARG) runs when the storage dies
 * (DELETER may be NULL when the caller keeps DATA alive longer). */
td_status_t td_tensor_from_blob(void *data, const int64_t *shape, int ndim,
                                td_dtype_t dtype, td_device_t device,
                                void (*deleter)(void *data, void *arg),
                                void *arg, td_tensor_t **out);

/* ---- refcount and accessors ------------------------------------------ */

td_tensor_t *td_tensor_retain(td_tensor_t *t);
void         td_tensor_release(td_tensor_t *t);   /* NULL is a no-op */

td_dtype_t     td_tensor_dtype(const td_tensor_t *t);
td_device_t    td_tensor_device(const td_tensor_t *t);
int            td_tensor_ndim(const td_tensor_t *t);
const int64_t *td_tensor_shape(const td_tensor_t *t);    /* ndim entries */
const int64_t *td_tensor_strides(const td_tensor_t *t);  /* in elements */
int64_t        td_tensor_size(const td_tensor_t *t, int dim); /* dim<0 ok */
int64_t        td_tensor_offset(const td_tensor_t *t);   /* in elements */
/* Address of element [0,...,0] (storage base + offset). */
void          *td_tensor_data(const td_tensor_t *t);
int64_t        td_tensor_numel(const td_tensor_t *t);
/* numel * dtype size: the bytes of a contiguous copy. */
size_t         td_tensor_nbytes(const td_tensor_t *t);
int            td_tensor_is_contiguous(const td_tensor_t *t);
/* Version counter of the storage (bumped by every in-place write). */
uint64_t       td_tensor_version(const td_tensor_t *t);
/* Mark an in-place write done outside todist (e.g. RPC received into it). */
void           td_tensor_bump_version(td_tensor_t *t);

/* Autograd fields. A leaf is a tensor with no grad_fn. */
int          td_tensor_requires_grad(const td_tensor_t *t);
/* Only leaves of floating dtype may have requires_grad set. */
td_status_t  td_tensor_set_requires_grad(td_tensor_t *t, int requires_grad);
int          td_tensor_is_leaf(const td_tensor_t *t);
/* Accumulated gradient of a leaf, borrowed (NULL if none). */
td_tensor_t *td_tensor_grad(const td_tensor_t *t);
/* Replace (or clear, with NULL) the leaf's .grad; retains GRAD. */
td_status_t  td_tensor_set_grad(td_tensor_t *t, td_tensor_t *grad);

/* Element access for tests and small tools (converts through double). */
td_status_t td_tensor_item(const td_tensor_t *t, double *value_p);
double      td_tensor_get(const td_tensor_t *t, const int64_t *index);

/* ---- views (share storage; differentiable) --------------------------- */

td_status_t td_tensor_reshape(td_tensor_t *t, const int64_t *shape, int ndim,
                              td_tensor_t **out); /* one -1 allowed; copies
                                                      when not viewable */
td_status_t td_tensor_view(td_tensor_t *t, const int64_t *shape, int ndim,
                           td_tensor_t **out);    /* never copies */
td_status_t td_tensor_transpose(td_tensor_t *t, int d0, int d1,
                                td_tensor_t **out);
td_status_t td_tensor_permute(td_tensor_t *t, const int *dims,
                              td_tensor_t **out);
td_status_t td_tensor_narrow(td_tensor_t *t, int dim, int64_t start,
                             int64_t length, td_tensor_t **out);
td_status_t td_tensor_select(td_tensor_t *t, int dim, int64_t index,
                             td_tensor_t **out);
td_status_t td_tensor_squeeze(td_tensor_t *t, int dim, td_tensor_t **out);
td_status_t td_tensor_unsqueeze(td_tensor_t *t, int dim, td_tensor_t **out);
td_status_t td_tensor_expand(td_tensor_t *t, const int64_t *shape, int ndim,
                             td_tensor_t **out);

/* ---- copies ---------------------------------------------------------- */

/* Contiguous tensor with T's values (T itself, retained, if already so). */
td_status_t td_tensor_contiguous(td_tensor_t *t, td_tensor_t **out);
td_status_t td_tensor_clone(td_tensor_t *t, td_tensor_t **out);
/* Same storage, no autograd history, requires_grad false. */
td_status_t td_tensor_detach(td_tensor_t *t, td_tensor_t **out);
/* Convert to DTYPE (a new tensor; differentiable between float types). */
td_status_t td_tensor_to_dtype(td_tensor_t *t, td_dtype_t dtype,
                               td_tensor_t **out);
/* In-place writes (not recorded by autograd; bump the version). SRC is
 * broadcast to DST's shape and converted to DST's dtype. */
td_status_t td_tensor_copy_(td_tensor_t *dst, td_tensor_t *src);
td_status_t td_tensor_fill_(td_tensor_t *t, double value);
td_status_t td_tensor_zero_(td_tensor_t *t);

/* ---- seeded random fill (same numbers on every machine) --------------
 * Counter-based: element i of a contiguous walk gets splitmix64(seed, i),
 * so results depend on neither threads nor platform (normal uses
 * Box-Muller on two such draws). */
td_status_t td_tensor_uniform_(td_tensor_t *t, double lo, double hi,
                               uint64_t seed);
td_status_t td_tensor_normal_(td_tensor_t *t, double mean, double std,
                              uint64_t seed);

/* ---- joining and splitting (differentiable) -------------------------- */

td_status_t td_tensor_cat(td_tensor_t *const *ts, int n, int dim,
                          td_tensor_t **out);
td_status_t td_tensor_stack(td_tensor_t *const *ts, int n, int dim,
                            td_tensor_t **out);
/* Views of SPLIT_SIZE along DIM (the last may be shorter); OUTS must hold
 * ceil(size/split_size) entries, *N_P receives the count. */
td_status_t td_tensor_split(td_tensor_t *t, int64_t split_size, int dim,
                            td_tensor_t **outs, int max_outs, int *n_p);
td_status_t td_tensor_chunk(td_tensor_t *t, int chunks, int dim,
                            td_tensor_t **outs, int *n_p);
td_status_t td_tensor_index_select(td_tensor_t *t, int dim,
                                   td_tensor_t *index, td_tensor_t **out);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_TENSOR_H */
