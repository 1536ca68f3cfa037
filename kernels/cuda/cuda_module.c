/* kernels/cuda/cuda_module.c: the entry of libtodist-cuda.so
 * (kernels/module.h): it keeps the host table libtodist lends and hands
 * back the module's rows. The few libtodist functions the backend calls
 * are defined here as forwards through that table; the module exports
 * only TD_DEVICE_MODULE_ENTRY, so these stay inside it and the module
 * links nothing of libtodist (M1's one copy of the library's state). */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include "kernels/module.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_device.h"
#ifdef TD_HAVE_NCCL
#include "kernels/cuda/cuda_nccl.h"
#endif

const td_device_module_t *td_device_module_entry(const td_device_host_t *h);

#define MSG_MAX 1024   /* as base/status.c keeps */

static const td_device_host_t *host;

static const td_device_module_t cuda_module = {
    .abi = TD_DEVICE_MODULE_ABI,
    .type = TD_DEVICE_CUDA,
    .kernels = &td_cuda_kernels,
    .device = &td_cuda_device_ops,
#ifdef TD_HAVE_NCCL
    .nccl = &td_cuda_nccl_ops,
#else
    .nccl = NULL,
#endif
};

const td_device_module_t *
td_device_module_entry(const td_device_host_t *h)
{
    if (h == NULL || h->abi != TD_DEVICE_MODULE_ABI) {
        return NULL;                 /* the loader names the mismatch */
    }
    host = h;
    return &cuda_module;
}

/* ---- libtodist's functions, through the host table ------------------- */

td_status_t
td_error(td_status_t code, const char *fmt, ...)
{
    char msg[MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return host->error(code, "%s", msg);
}

const char *
td_last_error(void)
{
    return host->last_error();
}

void
td_log_print(td_log_level_t level, const char *fmt, ...)
{
    char msg[MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    host->log_print(level, "%s", msg);
}

td_status_t
td_device_alloc(td_device_t dev, size_t nbytes, void **ptr_p)
{
    return host->device_alloc(dev, nbytes, ptr_p);
}

void
td_device_free(td_device_t dev, void *ptr)
{
    host->device_free(dev, ptr);
}

/* Not lent: kernels/ may call nothing of runtime/ (where the library's
 * td_dtype_size lives; tests/test_tensor_layers.sh), and the table is the
 * public dtype enum's. */
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
