/* kernels/device.c: the per-device-type memory rows (see device.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"

static const td_device_ops_t *const device_rows[TD_NUM_DEVICE_TYPES] = {
    NULL,                       /* cpu: handled inline below */
#ifdef TD_HAVE_CUDA
    &td_cuda_device_ops,
#else
    NULL,
#endif
};

static const char *
type_name(td_device_type_t type)
{
    return type == TD_DEVICE_CPU ? "cpu" : type == TD_DEVICE_CUDA ? "cuda"
                                                                  : "?";
}

const td_device_ops_t *
td_device_ops(td_device_type_t type)
{
    if ((unsigned)type >= TD_NUM_DEVICE_TYPES) {
        return NULL;
    }
    return device_rows[type];
}

td_status_t
td_device_count_of(td_device_type_t type, int *n_p)
{
    const td_device_ops_t *ops;

    if (type == TD_DEVICE_CPU) {
        *n_p = 1;
        return TD_OK;
    }
    ops = td_device_ops(type);
    if (ops == NULL) {
        return td_error(TD_ERR_UNSUPPORTED, "no %s device (libtodist was "
                        "built without it)",
                        type == TD_DEVICE_CUDA ? "CUDA" : type_name(type));
    }
    return ops->count(n_p);
}

td_status_t
td_device_check(td_device_t dev)
{
    int n;
    td_status_t status;

    if (dev.type == TD_DEVICE_CPU) {
        return TD_OK;
    }
    status = td_device_count_of(dev.type, &n);
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
td_device_alloc(td_device_t dev, size_t nbytes, void **ptr_p)
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
    status = td_device_check(dev);
    if (status != TD_OK) {
        return status;
    }
    return td_device_ops(dev.type)->alloc(dev.index, nbytes, ptr_p);
}

void
td_device_free(td_device_t dev, void *ptr)
{
    const td_device_ops_t *ops;

    if (dev.type == TD_DEVICE_CPU) {
        free(ptr);
        return;
    }
    ops = td_device_ops(dev.type);
    if (ops != NULL && ptr != NULL) {
        ops->free(dev.index, ptr);
    }
}

td_status_t
td_device_memcpy(void *dst, td_device_t ddev, const void *src,
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
    if ((status = td_device_check(ddev)) != TD_OK ||
        (status = td_device_check(sdev)) != TD_OK) {
        return status;
    }
    return td_device_ops(dev.type)->memcpy(dst, ddev, src, sdev, nbytes);
}
