/* base/clock.h: the monotonic clock every timeout and deadline uses. */
#ifndef TD_BASE_CLOCK_H
#define TD_BASE_CLOCK_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC (not wall time: immune to clock steps). */
static inline double
td_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif /* TD_BASE_CLOCK_H */
