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

/* *TS = CLOCK_REALTIME now + S seconds: the absolute deadline
 * pthread_cond_timedwait wants (its condition variables use that clock). */
static inline void
td_deadline_after(double s, struct timespec *ts)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += (time_t)s;
    ts->tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

#endif /* TD_BASE_CLOCK_H */
