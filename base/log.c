/* base/log.c: leveled, rank-prefixed diagnostics on stderr. */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/log.h"

#define LOG_LINE_MAX 2048

static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static td_log_level_t level = TD_LOG_WARN;
static atomic_int log_rank = -1;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static void log_call(td_log_level_t lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Read TODIST_LOG (once). An unknown value is reported here, when it is
 * read, not with the first message: a quiet job would never mention it. */
static void
level_read(void)
{
    const char *v = getenv("TODIST_LOG");

    if (v == NULL || *v == '\0') {
        return;
    }
    for (int i = 0; i <= TD_LOG_DEBUG; i++) {
        if (strcasecmp(v, level_names[i]) == 0) {
            level = (td_log_level_t)i;
            return;
        }
    }
    log_call(TD_LOG_WARN, "TODIST_LOG=%s is not one of error, warn, info, "
             "debug; using warn", v);
}

void
td__log_init(void)
{
    pthread_once(&level_once, level_read);
}

int
td__log_enabled(td_log_level_t lvl)
{
    pthread_once(&level_once, level_read);
    return lvl <= level;
}

void
td__log_set_rank(int rank)
{
    atomic_store(&log_rank, rank);
}

static void
log_write(td_log_level_t lvl, const char *fmt, va_list ap)
{
    char line[LOG_LINE_MAX];
    int rank = atomic_load(&log_rank);
    int n;

    if (rank >= 0) {
        n = snprintf(line, sizeof(line), "todist[rank %d]: ", rank);
    } else {
        n = snprintf(line, sizeof(line), "todist: ");
    }
    if (lvl == TD_LOG_ERROR) {
        n += snprintf(line + n, sizeof(line) - n, "error: ");
    }
    n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
    if (n >= (int)sizeof(line) - 1) {
        n = sizeof(line) - 2;           /* truncated: keep the newline */
    }
    while (n > 0 && line[n - 1] == '\n') {
        n--;
    }
    line[n++] = '\n';
    /* one write per line: lines from several threads never interleave */
    if (write(STDERR_FILENO, line, n) < 0) {
        return;                         /* nowhere left to report it */
    }
}

static void
log_call(td_log_level_t lvl, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_write(lvl, fmt, ap);
    va_end(ap);
}

void
td__log_print(td_log_level_t lvl, const char *fmt, ...)
{
    va_list ap;

    if (!td__log_enabled(lvl)) {
        return;
    }
    va_start(ap, fmt);
    log_write(lvl, fmt, ap);
    va_end(ap);
}
