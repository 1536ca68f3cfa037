/* base/cpu.h: the pause instruction of a spin-wait loop (lets the sibling
 * hyperthread run and saves power while a flag is polled). */
#ifndef TD_BASE_CPU_H
#define TD_BASE_CPU_H

static inline void
td_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

#endif
