/* base/status.c: status codes (from the one table in todist/status.h) and
 * the per-thread last-error message. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "todist/status.h"

#define TD_ERROR_MSG_MAX 1024

static __thread char last_error[TD_ERROR_MSG_MAX];

const char *
td_strerror(td_status_t status)
{
    switch (status) {
#define TD_STATUS_MSG_(name, value, msg) case name: return msg;
    TD_STATUS_TABLE(TD_STATUS_MSG_)
#undef TD_STATUS_MSG_
    }
    return "unknown error";
}

const char *
td_status_name(td_status_t status)
{
    switch (status) {
#define TD_STATUS_NAME_(name, value, msg) case name: return #name;
    TD_STATUS_TABLE(TD_STATUS_NAME_)
#undef TD_STATUS_NAME_
    }
    return "TD_ERR_UNKNOWN";
}

const char *
td_last_error(void)
{
    return last_error;
}

td_status_t
td_error(td_status_t code, const char *fmt, ...)
{
    char msg[TD_ERROR_MSG_MAX];
    va_list ap;

    /* Format aside first: callers may pass td_last_error() as an argument
     * to prefix context onto a lower layer's message. */
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof(msg));
    return code;
}

void
td_error_clear(void)
{
    last_error[0] = '\0';
}
