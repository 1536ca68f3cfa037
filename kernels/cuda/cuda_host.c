/* kernels/cuda/cuda_host.c: the few libtodist functions the CUDA backend
 * calls (cuda_host.h), defined as forwards through the host table
 * libtodist lends at the entry; the module exports only its entry, so
 * these stay inside it and the module links nothing of libtodist (M1's
 * one copy of the library's state). It calls no other file of
 * kernels/cuda/, so every file there may call it. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include "kernels/cuda/cuda_host.h"

#define MSG_MAX 1024   /* as base/status.c keeps */

static const td_device_host_t *host;

void
cuda_host_set(const td_device_host_t *h)
{
    host = h;
}

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
td__log_print(td_log_level_t level, const char *fmt, ...)
{
    char msg[MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    host->log_print(level, "%s", msg);
}

td_status_t
td__device_alloc(td_device_t dev, size_t nbytes, void **ptr_p)
{
    return host->device_alloc(dev, nbytes, ptr_p);
}

void
td__device_free(td_device_t dev, void *ptr)
{
    host->device_free(dev, ptr);
}

/* Not lent: kernels/ may call nothing of runtime/ (where the library's
 * td_dtype_size lives; tests/test_tensor_layers.sh), and the table is the
 * public dtype enum's. */
size_t
td_dtype_size(td_dtype_t dtype)
{
    return td__dtype_bytes(dtype);
}
