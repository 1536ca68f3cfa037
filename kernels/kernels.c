/* kernels/kernels.c: the registry of per-device kernel tables. */
#include "config.h"

#include "kernels/kernels.h"

/* Device rows arrive with their module (kernels/module.h M2). */
static const td_kernels_t *kernel_table[TD_NUM_DEVICE_TYPES] = {
    &td_cpu_kernels, NULL
};

const td_kernels_t *
td__kernels_get(td_device_t device)
{
    if ((unsigned)device.type >= TD_NUM_DEVICE_TYPES) {
        return NULL;
    }
    return kernel_table[device.type];
}

void
td__kernels_register(td_device_type_t type, const td_kernels_t *k)
{
    if ((unsigned)type < TD_NUM_DEVICE_TYPES) {
        kernel_table[type] = k;
    }
}
