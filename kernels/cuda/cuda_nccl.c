/* kernels/cuda/cuda_nccl.c: the NCCL calls of the CUDA module
 * (kernels/module.h td_nccl_ops_t): unique ids, communicators, one
 * collective queued on a device's stream, and the poll that watches the
 * stream and NCCL's asynchronous error. Groups, the store, timeouts and
 * failure policy stay in runtime/coll/nccl.c. Built only with NCCL. */
#include "config.h"

#include <string.h>

#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"   /* nccl.h's f() */
#include <nccl.h>
#pragma GCC diagnostic pop

#include "kernels/module.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_nccl.h"

_Static_assert(sizeof(ncclUniqueId) <= TD_NCCL_ID_MAX,
               "ncclUniqueId fits TD_NCCL_ID_MAX");

static int
nccl_dtype(td_dtype_t d, ncclDataType_t *out)
{
    switch (d) {
    case TD_FLOAT32: *out = ncclFloat32; return 1;
    case TD_FLOAT64: *out = ncclFloat64; return 1;
    case TD_INT64:   *out = ncclInt64;   return 1;
    case TD_INT32:   *out = ncclInt32;   return 1;
    case TD_UINT8:   *out = ncclUint8;   return 1;
    default:         return 0;
    }
}

static int
nccl_op(td_reduce_op_t op, ncclRedOp_t *out)
{
    switch (op) {
    case TD_REDUCE_SUM:  *out = ncclSum;  return 1;
    case TD_REDUCE_PROD: *out = ncclProd; return 1;
    case TD_REDUCE_MIN:  *out = ncclMin;  return 1;
    case TD_REDUCE_MAX:  *out = ncclMax;  return 1;
    case TD_REDUCE_AVG:  *out = ncclAvg;  return 1;
    default:             return 0;       /* bitwise: staged */
    }
}

static int
supports(td_dtype_t dtype, int reduces, td_reduce_op_t op)
{
    ncclDataType_t dt;
    ncclRedOp_t o;

    return nccl_dtype(dtype, &dt) && (!reduces || nccl_op(op, &o));
}

static td_status_t
nccl_fail(const char *what, ncclResult_t r)
{
    return td_error(TD_ERR_IO, "%s: %s", what, ncclGetErrorString(r));
}

static td_status_t
unique_id(void *id)
{
    ncclResult_t r = ncclGetUniqueId((ncclUniqueId *)id);

    return r == ncclSuccess ? TD_OK : nccl_fail("ncclGetUniqueId", r);
}

static td_status_t
device_id(int device, char *buf, size_t len)
{
    cudaError_t e = cudaDeviceGetPCIBusId(buf, (int)len, device);

    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return td_error(TD_ERR_IO, "cuda:%d: cudaDeviceGetPCIBusId: %s",
                        device, cudaGetErrorString(e));
    }
    return TD_OK;
}

static td_status_t
comm_init(int device, int n, int me, const void *id, void **comm_p)
{
    ncclUniqueId uid;
    ncclComm_t comm;
    ncclResult_t r;

    if (cudaSetDevice(device) != cudaSuccess) {
        (void)cudaGetLastError();
        return td_error(TD_ERR_IO, "cannot select cuda:%d", device);
    }
    memcpy(&uid, id, sizeof(uid));
    r = ncclCommInitRank(&comm, n, uid, me);
    if (r != ncclSuccess) {
        return nccl_fail("ncclCommInitRank", r);
    }
    *comm_p = comm;
    return TD_OK;
}

static td_status_t
launch(void *comm, int device, td_nccl_kind_t kind, const void *send,
       void *recv, size_t count, td_dtype_t dtype, td_reduce_op_t op,
       int root)
{
    ncclDataType_t dt = ncclFloat32;
    ncclRedOp_t o = ncclSum;
    ncclComm_t c = (ncclComm_t)comm;
    cudaStream_t s;
    void *stream;
    ncclResult_t r;
    td_status_t status;

    nccl_dtype(dtype, &dt);
    nccl_op(op, &o);
    status = td__cuda_enter(device, &stream);     /* the device's stream */
    if (status != TD_OK) {
        return status;
    }
    s = (cudaStream_t)stream;
    switch (kind) {
    case TD_NCCL_ALL_REDUCE:
        r = ncclAllReduce(send, recv, count, dt, o, c, s);
        break;
    case TD_NCCL_BROADCAST:
        r = ncclBroadcast(send, recv, count, dt, root, c, s);
        break;
    case TD_NCCL_REDUCE:
        r = ncclReduce(send, recv, count, dt, o, root, c, s);
        break;
    case TD_NCCL_ALL_GATHER:
        r = ncclAllGather(send, recv, count, dt, c, s);
        break;
    case TD_NCCL_REDUCE_SCATTER:
        r = ncclReduceScatter(send, recv, count, dt, o, c, s);
        break;
    default:
        return td_error(TD_ERR_INVALID, "NCCL: no collective %d", (int)kind);
    }
    return r == ncclSuccess ? TD_OK : nccl_fail("NCCL", r);
}

static td_status_t
poll_done(void *comm, int device, int *done_p)
{
    ncclResult_t ae = ncclSuccess;
    void *stream;
    cudaError_t ce;
    td_status_t status = td__cuda_stream(device, &stream);

    *done_p = 0;
    if (status != TD_OK) {
        return status;
    }
    ce = cudaStreamQuery((cudaStream_t)stream);
    if (ce == cudaSuccess) {
        *done_p = 1;
        return td__cuda_sync(device);
    }
    if (ce != cudaErrorNotReady) {
        (void)cudaGetLastError();
        return td_error(TD_ERR_IO, "cuda:%d: %s", device,
                        cudaGetErrorString(ce));
    }
    if (ncclCommGetAsyncError((ncclComm_t)comm, &ae) == ncclSuccess &&
        ae != ncclSuccess && ae != ncclInProgress) {
        return nccl_fail("NCCL", ae);
    }
    return TD_OK;
}

static void
comm_abort(void *comm)
{
    (void)ncclCommAbort((ncclComm_t)comm);
}

static void
comm_destroy(void *comm)
{
    (void)ncclCommDestroy((ncclComm_t)comm);
}

const td_nccl_ops_t td_cuda_nccl_ops = {
    .id_size = sizeof(ncclUniqueId),
    .supports = supports,
    .unique_id = unique_id,
    .comm_init = comm_init,
    .device_id = device_id,
    .launch = launch,
    .poll = poll_done,
    .abort = comm_abort,
    .destroy = comm_destroy,
};
