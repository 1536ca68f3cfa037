/* todist/status.h: the one status type every fallible todist call returns.
 *
 * Codes are 0 (TD_OK) or negative, as in libuv. The first function that sees
 * an error records a message naming what was wrong (the variable, the rank,
 * the size) with td_error(); callers pass the code up unchanged, and
 * td_last_error() returns the message of the calling thread's last error.
 * All functions here are thread-safe (the message is thread-local). */
#ifndef TODIST_STATUS_H
#define TODIST_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TD_OK               = 0,
    TD_ERR_INVALID      = -1,  /* bad argument, option or environment value */
    TD_ERR_NO_MEMORY    = -2,
    TD_ERR_IO           = -3,  /* system call or file failure */
    TD_ERR_PROTOCOL     = -4,  /* malformed message or frame */
    TD_ERR_TIMEOUT      = -5,
    TD_ERR_PEER         = -6,  /* a peer died or is unreachable */
    TD_ERR_NOT_FOUND    = -7,
    TD_ERR_AUTH         = -8,  /* authentication failed */
    TD_ERR_STATE        = -9,  /* call not valid in the current state */
    TD_ERR_SHAPE        = -10, /* tensor shape mismatch */
    TD_ERR_DTYPE        = -11, /* tensor dtype mismatch */
    TD_ERR_REMOTE       = -12, /* an error raised on another worker */
    TD_ERR_UNSUPPORTED  = -13,
    TD_ERR_TRANSPORT    = -14, /* UCX reported a failure */
    TD_ERR_CANCELED     = -15,
    TD_ERR_EXISTS       = -16,
    TD_ERR_RANGE        = -17  /* a value outside its allowed range */
} td_status_t;

/* Short, static description of a code ("invalid argument"). */
const char *td_strerror(td_status_t status);

/* The calling thread's last recorded error message ("" if none). */
const char *td_last_error(void);

/* Record a formatted message for the calling thread and return CODE, so
 * `return td_error(TD_ERR_INVALID, "world: %s=%s is not a number", k, v);`
 * reads as one statement. */
td_status_t td_error(td_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Forget the calling thread's last error message. */
void td_error_clear(void);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_STATUS_H */
