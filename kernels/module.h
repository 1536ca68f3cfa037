/* kernels/module.h: device backends as loadable modules (internal).
 *
 * libtodist links no device library, so a rank that never touches a
 * device maps none of them (the CUDA libraries are 160 MB of mappings and
 * most of a CPU rank's start-up). The CUDA backend -- kernels/cuda/, its
 * NCCL calls and its pinned-memory copies -- is built as libtodist-cuda.so
 * and opened with dlopen the first time a device of its type is asked for
 * (td__device_module_row, through kernels/device.c: a CUDA tensor's allocation, a device count, td_init
 * when devices are wanted, see runtime/rpc/device_map.c). Its one exported
 * symbol, TD_DEVICE_MODULE_ENTRY, takes the host table (the few functions
 * of libtodist it calls: td_error, logging, device allocation) and returns
 * its descriptor: the kernel-table row, the device-memory row and, with
 * NCCL, its collectives. The module links nothing of libtodist, so a test
 * program that links the library statically shares one copy of its state
 * (last error, log rank, allocator) with the module.
 *
 * Where libtodist-cuda.so is looked for, first found wins: each folder of
 * TODIST_MODULE_PATH (colon-separated); the folder libtodist was loaded
 * from, + "/todist" (an installed tree: $(pkglibdir)); that folder itself
 * (the build tree's .libs); the configured $(pkglibdir).
 *
 * Invariants:
 *  M1. A type's module is loaded at most once per process (its row is
 *      installed once, never unloaded: rows stay valid until exit). A
 *      failed load is kept with its reason -- not found (the folders
 *      searched), dlopen's message (it names the missing library), no
 *      entry, or another ABI -- and every later request of that type
 *      fails with TD_ERR_UNSUPPORTED and that reason, without retrying.
 *  M2. td__device_module_install is the one way a row gets in: the loaded
 *      module and the test backend (device.h D4) both go through it. It
 *      checks the descriptor's ABI and installs the kernel row before the
 *      device row, so whoever sees the device row sees the kernels.
 *  M3. td__device_module_row never loads for TD_DEVICE_CPU and
 *      td__device_module_peek never loads at all (start-up uses it to ask
 *      "is a backend already there?" without paying for one).
 * Thread-safe: all functions (the load runs under one lock; readers take
 * the installed rows with acquire loads). */
#ifndef TD_KERNELS_MODULE_H
#define TD_KERNELS_MODULE_H

#include <stddef.h>
#include <todist/coll.h>
#include <todist/status.h>
#include <todist/tensor.h>

#include "base/log.h"
#include "kernels/kernels.h"
#include "kernels/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_DEVICE_MODULE_ABI   3    /* 2: td_nccl_ops_t.device_id;
                                     * 3: td_device_ops_t.copy_counts */
#define TD_DEVICE_MODULE_ENTRY "td_device_module_entry"
#define TD_CUDA_MODULE_NAME    "libtodist-cuda.so"

/* What libtodist lends a module. */
typedef struct {
    unsigned           abi;                 /* TD_DEVICE_MODULE_ABI */
    td_status_t      (*error)(td_status_t code, const char *fmt, ...);
    const char      *(*last_error)(void);
    void             (*log_print)(td_log_level_t level, const char *fmt,
                                  ...);
    td_status_t      (*device_alloc)(td_device_t dev, size_t nbytes,
                                     void **ptr_p);
    void             (*device_free)(td_device_t dev, void *ptr);
} td_device_host_t;

/* The collectives a backend's communication library runs (NCCL): raw
 * calls on device pointers; groups, keys and timeouts stay in
 * runtime/coll/nccl.c. */
typedef enum {
    TD_NCCL_ALL_REDUCE, TD_NCCL_BROADCAST, TD_NCCL_REDUCE,
    TD_NCCL_ALL_GATHER, TD_NCCL_REDUCE_SCATTER
} td_nccl_kind_t;

#define TD_NCCL_ID_MAX 256

typedef struct {
    size_t        id_size;                  /* <= TD_NCCL_ID_MAX */
    /* 1 when DTYPE (and, for a reduction, OP) has an NCCL equivalent */
    int         (*supports)(td_dtype_t dtype, int reduces, td_reduce_op_t op);
    td_status_t (*unique_id)(void *id);
    td_status_t (*comm_init)(int device, int n, int me, const void *id,
                             void **comm_p);
    /* Which GPU DEVICE is, whatever this process's numbering (its PCI bus
     * id): NCCL refuses two ranks of a communicator on one GPU. */
    td_status_t (*device_id)(int device, char *buf, size_t len);
    /* Queue one collective on DEVICE's stream (cuda_device.h G2). COUNT
     * is the element count NCCL takes (per rank for gathers/scatters). */
    td_status_t (*launch)(void *comm, int device, td_nccl_kind_t kind,
                          const void *send, void *recv, size_t count,
                          td_dtype_t dtype, td_reduce_op_t op, int root);
    /* *DONE_P = 1 once the stream is drained (then synchronised); an
     * error (the device's or NCCL's asynchronous one) names the cause. */
    td_status_t (*poll)(void *comm, int device, int *done_p);
    void        (*abort)(void *comm);
    void        (*destroy)(void *comm);
} td_nccl_ops_t;

/* What a module hands back. */
typedef struct {
    unsigned               abi;             /* TD_DEVICE_MODULE_ABI */
    td_device_type_t       type;
    const td_kernels_t    *kernels;
    const td_device_ops_t *device;
    const td_nccl_ops_t   *nccl;            /* NULL: collectives staged */
} td_device_module_t;

typedef const td_device_module_t *(*td_device_module_entry_fn)(
    const td_device_host_t *host);

/* The device row of TYPE, loading its module on the first call (M1) and
 * lending it HOST (kernels/device.c holds it: the module calls back into
 * the device layer, which sits above this loader); NULL with td_error set
 * (TD_ERR_UNSUPPORTED, the reason) when there is none. NULL without an
 * error for TD_DEVICE_CPU (M3). */
const td_device_ops_t *td__device_module_row(td_device_type_t type,
                                            const td_device_host_t *host);

/* The row of TYPE if one is installed, else NULL; never loads (M3). */
const td_device_ops_t *td__device_module_peek(td_device_type_t type);

/* The collectives of TYPE's installed module (NULL: none; never loads). */
const td_nccl_ops_t   *td__device_module_nccl(td_device_type_t type);

/* Install M's rows (M2). TD_ERR_INVALID for another ABI. */
td_status_t td__device_module_install(const td_device_module_t *m);

/* The file TYPE's module was loaded from ("" when none was, e.g. the test
 * backend). */
const char *td__device_module_file(td_device_type_t type);

#ifdef __cplusplus
}
#endif
#endif /* TD_KERNELS_MODULE_H */
