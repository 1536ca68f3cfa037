/* base/log.h: the library's one logging facility (internal).
 *
 * Every diagnostic libtodist prints goes through here: one line per message
 * on stderr, prefixed "todist[rank N]: " once td_init knows the rank
 * ("todist: " before). The level comes from TODIST_LOG=error|warn|info|debug
 * (default warn), read once (td__log_init, or the first message); an
 * unknown value is reported then, once, and the default kept. Messages never go to stdout.
 * Thread-safe: one write(2) per line, so lines of threads never interleave. */
#ifndef TD_BASE_LOG_H
#define TD_BASE_LOG_H

typedef enum {
    TD_LOG_ERROR = 0,
    TD_LOG_WARN  = 1,
    TD_LOG_INFO  = 2,
    TD_LOG_DEBUG = 3
} td_log_level_t;

/* Read TODIST_LOG now and report an unknown value (once per process;
 * later calls do nothing). td_init calls it first, so a job that logs
 * nothing still hears of a bad TODIST_LOG. */
void td__log_init(void);

/* Print one line at LEVEL if the configured level lets it through. */
void td__log_print(td_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Would a message at LEVEL be printed? (skip costly formatting if not) */
int td__log_enabled(td_log_level_t level);

/* The rank shown in the prefix (-1: none). Called by td_init/td_finalize. */
void td__log_set_rank(int rank);

#define td_log_error(...) td__log_print(TD_LOG_ERROR, __VA_ARGS__)
#define td_log_warn(...)  td__log_print(TD_LOG_WARN, __VA_ARGS__)
#define td_log_info(...)  td__log_print(TD_LOG_INFO, __VA_ARGS__)
#define td_log_debug(...) td__log_print(TD_LOG_DEBUG, __VA_ARGS__)

#endif /* TD_BASE_LOG_H */
