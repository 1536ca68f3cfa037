/* status.c: error codes and the per-thread last-error message. */
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
    case TD_OK:              return "success";
    case TD_ERR_INVALID:     return "invalid argument";
    case TD_ERR_NO_MEMORY:   return "out of memory";
    case TD_ERR_IO:          return "input/output error";
    case TD_ERR_PROTOCOL:    return "protocol error";
    case TD_ERR_TIMEOUT:     return "timed out";
    case TD_ERR_PEER:        return "peer failure";
    case TD_ERR_NOT_FOUND:   return "not found";
    case TD_ERR_AUTH:        return "authentication failed";
    case TD_ERR_STATE:       return "invalid state";
    case TD_ERR_SHAPE:       return "shape mismatch";
    case TD_ERR_DTYPE:       return "dtype mismatch";
    case TD_ERR_REMOTE:      return "remote error";
    case TD_ERR_UNSUPPORTED: return "not supported";
    case TD_ERR_TRANSPORT:   return "transport error";
    case TD_ERR_CANCELED:    return "canceled";
    case TD_ERR_EXISTS:      return "already exists";
    case TD_ERR_RANGE:       return "out of range";
    }
    return "unknown error";
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
