/* runtime/ddp/ddp_internal.h: what Join (join.c) needs from DDP beyond
 * todist/ddp.h. Internal to libtodist. */
#ifndef TD_RUNTIME_DDP_INTERNAL_H
#define TD_RUNTIME_DDP_INTERNAL_H

#include <todist/ddp.h>

/* td_ddp_wait, with every reduced bucket multiplied by SCALE once all
 * completed and before the averages are handed out (.grad views, or the
 * context's gradients in a distributed backward, DDP9). 1.0: td_ddp_wait
 * exactly. Same thread rule as td_ddp_wait. */
td_status_t td__ddp_wait_scaled(td_ddp_t *ddp, double scale);

#endif /* TD_RUNTIME_DDP_INTERNAL_H */
