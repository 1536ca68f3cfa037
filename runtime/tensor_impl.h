/* runtime/tensor_impl.h: the tensor, storage and node structs, and the
 * per-device kernel table. Internal to libtodist (ops, autograd, kernels). */
#ifndef TD_RUNTIME_TENSOR_IMPL_H
#define TD_RUNTIME_TENSOR_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <todist/autograd.h>
#include <todist/tensor.h>

typedef struct {
    atomic_long     refcount;
    void           *data;
    size_t          nbytes;
    td_device_t     device;
    void          (*deleter)(void *data, void *arg);
    void           *deleter_arg;
    atomic_ullong   version;
} td_storage_t;

typedef struct td_hook {
    struct td_hook     *next;
    td_tensor_hook_fn   fn;
    td_post_accumulate_fn post_fn;
    void               *arg;
} td_hook_t;

struct td_tensor {
    atomic_long    refcount;
    td_storage_t  *storage;
    td_dtype_t     dtype;
    td_device_t    device;
    int            ndim;
    int64_t        shape[TD_MAX_DIMS];
    int64_t        strides[TD_MAX_DIMS];
    int64_t        offset;
    int            requires_grad;
    /* autograd: grad_fn is owned; grad_acc is weak (the accumulate node
     * owns the leaf and clears this pointer when it dies). */
    td_node_t     *grad_fn;
    uint32_t       output_nr;
    td_node_t     *grad_acc;
    td_tensor_t   *grad;
    td_hook_t     *hooks;       /* leaf hooks (non-leaf: on grad_fn) */
    td_hook_t     *post_hooks;
    pthread_mutex_t lock;       /* guards grad, grad_acc, hooks */
};

typedef struct td_node_hook {
    struct td_node_hook *next;
    uint32_t             input_nr;
    td_tensor_hook_fn    fn;
    void                *arg;
} td_node_hook_t;

struct td_node {
    atomic_long          refcount;
    const td_node_ops_t *ops;
    void                *state;
    int                  n_inputs;
    int                  n_next;
    td_edge_t           *next;
    uint64_t             sequence;
    td_tensor_t         *leaf;      /* accumulate nodes only (owned) */
    td_node_hook_t      *pre_hooks;
    atomic_int           released;  /* saved tensors dropped */
    pthread_mutex_t      lock;
    struct td_node      *pending;   /* deferred-destruction list link */
};

/* ---- the per-device kernel table --------------------------------------
 * One entry per device type; ops call a kernel once per tensor, never per
 * element. A CUDA module fills its slot with td_kernels_register(). */
typedef enum {
    TD_BIN_ADD, TD_BIN_SUB, TD_BIN_MUL, TD_BIN_DIV,
    TD_BIN_RELU_MASK    /* a * (b > 0): relu's backward, fused */
} td_binary_op_t;

typedef enum {
    TD_UN_NEG, TD_UN_EXP, TD_UN_LOG, TD_UN_SQRT, TD_UN_ABS, TD_UN_TANH,
    TD_UN_SIGMOID, TD_UN_RELU, TD_UN_GELU, TD_UN_GELU_GRAD, TD_UN_GELU_GRAD2,
    TD_UN_SIGN, TD_UN_STEP, TD_UN_POW, TD_UN_MUL_SCALAR, TD_UN_ADD_SCALAR
} td_unary_op_t;

/* A strided operand: first-element pointer and per-dim strides over the
 * common SHAPE of the kernel call. */
typedef struct {
    void          *data;
    const int64_t *strides;
} td_operand_t;

typedef struct {
    /* out (contiguous, dtype) = a OP b over shape[ndim] */
    void (*binary)(td_binary_op_t op, td_dtype_t dtype, void *out,
                   td_operand_t a, td_operand_t b, const int64_t *shape,
                   int ndim);
    /* out (contiguous) = OP(a, scalar) */
    void (*unary)(td_unary_op_t op, td_dtype_t dtype, void *out,
                  td_operand_t a, double scalar, const int64_t *shape,
                  int ndim);
    /* dst (strided, ddtype) = src (strided, sdtype) over shape */
    void (*copy)(td_dtype_t ddtype, td_operand_t dst, td_dtype_t sdtype,
                 td_operand_t src, const int64_t *shape, int ndim);
    void (*fill)(td_dtype_t dtype, td_operand_t dst, double value,
                 const int64_t *shape, int ndim);
    /* out[outer, inner] = sum over the middle of a contiguous
     * [outer, mid, inner] block */
    void (*sum_mid)(td_dtype_t dtype, void *out, const void *in,
                    int64_t outer, int64_t mid, int64_t inner);
    /* C[m,n] = alpha * op(A) op(B) + beta * C, row-major, lda etc. */
    void (*gemm)(td_dtype_t dtype, int trans_a, int trans_b, int64_t m,
                 int64_t n, int64_t k, double alpha, const void *a,
                 int64_t lda, const void *b, int64_t ldb, double beta,
                 void *c, int64_t ldc);
} td_kernels_t;

const td_kernels_t *td_kernels_get(td_device_t device);
void td_kernels_register(td_device_type_t type, const td_kernels_t *k);
extern const td_kernels_t td_cpu_kernels;

/* internal helpers shared by tensor.c, ops.c, autograd.c */
td_status_t td_tensor_new_view(td_tensor_t *base, const int64_t *shape,
                               const int64_t *strides, int ndim,
                               int64_t offset, td_tensor_t **out);
td_status_t td_tensor_empty_like(const td_tensor_t *t, td_tensor_t **out);
int  td_shape_equal(const td_tensor_t *a, const td_tensor_t *b);
const char *td_shape_str(const int64_t *shape, int ndim, char *buf,
                         size_t len);
#define TD_SHAPE_STR(t) td_shape_str((t)->shape, (t)->ndim, \
                                     (char[96]){0}, 96)
/* Reduce G (broadcast result) to SHAPE by summing; retains G if equal. */
td_status_t td_sum_to(td_tensor_t *g, const int64_t *shape, int ndim,
                      td_tensor_t **out);
/* Record NODE as the grad_fn of OUT if grad mode is on and any of the
 * inputs requires grad; otherwise frees STATE with OPS->destroy.
 * Takes over STATE. */
td_status_t td_autograd_record(const td_node_ops_t *ops, void *state,
                               td_tensor_t *const *inputs, int n_inputs,
                               td_tensor_t *out);
int td_any_requires_grad(td_tensor_t *const *ts, int n);
/* Accumulate G into leaf->grad (thread-safe), then run post hooks. */
td_status_t td_leaf_accumulate(td_tensor_t *leaf, td_tensor_t *g,
                               int create_graph);

#endif /* TD_RUNTIME_TENSOR_IMPL_H */
