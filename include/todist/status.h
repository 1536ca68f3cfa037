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

/* The one table of status codes: name, value, message. Everything else
 * (the enum, td_strerror, td_status_name) is generated from it. */
#define TD_STATUS_TABLE(X)                                                   \
    X(TD_OK,              0,  "success")                                    \
    X(TD_ERR_INVALID,    -1,  "invalid argument")  /* bad argument or env */\
    X(TD_ERR_NO_MEMORY,  -2,  "out of memory")                              \
    X(TD_ERR_IO,         -3,  "input/output error") /* syscall or file */   \
    X(TD_ERR_PROTOCOL,   -4,  "protocol error")  /* malformed message */    \
    X(TD_ERR_TIMEOUT,    -5,  "timed out")                                  \
    X(TD_ERR_PEER,       -6,  "peer failure")    /* died or unreachable */  \
    X(TD_ERR_NOT_FOUND,  -7,  "not found")                                  \
    X(TD_ERR_AUTH,       -8,  "authentication failed")                      \
    X(TD_ERR_STATE,      -9,  "invalid state")   /* not valid right now */  \
    X(TD_ERR_SHAPE,      -10, "shape mismatch")                             \
    X(TD_ERR_DTYPE,      -11, "dtype mismatch")                             \
    X(TD_ERR_REMOTE,     -12, "remote error")    /* raised on a peer */     \
    X(TD_ERR_UNSUPPORTED,-13, "not supported")                              \
    X(TD_ERR_TRANSPORT,  -14, "transport error") /* UCX failed */           \
    X(TD_ERR_CANCELED,   -15, "canceled")                                   \
    X(TD_ERR_EXISTS,     -16, "already exists")                             \
    X(TD_ERR_RANGE,      -17, "out of range")

typedef enum {
#define TD_STATUS_ENUM_(name, value, msg) name = value,
    TD_STATUS_TABLE(TD_STATUS_ENUM_)
#undef TD_STATUS_ENUM_
} td_status_t;

/* Short, static description of a code ("invalid argument"). */
const char *td_strerror(td_status_t status);

/* The code's name as written in C ("TD_ERR_INVALID"); "TD_ERR_UNKNOWN" for
 * a value outside the table. */
const char *td_status_name(td_status_t status);

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
