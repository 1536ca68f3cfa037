/* todist/store.h: the rendezvous store, a small TCP key-value service.
 *
 * Rank 0 runs the server at MASTER_ADDR:MASTER_PORT (td_init does this,
 * unless TODIST_AGENT_STORE=1 says the launcher serves it: todist-run
 * --no-kill); every rank, rank 0 included, talks to it through a client. Operations:
 * set, get, wait for keys (with a timeout), add (atomic counter), compare-
 * and-set, delete and the number of keys, like c10d's TCPStore. Used for the
 * address exchange, barriers and the shutdown agreement.
 *
 * Authentication: when TODIST_JOB_TOKEN is set the server admits a client
 * only after an HMAC-SHA256 challenge-response over the token (both ways:
 * the client checks the server too); comparisons are constant time. With no
 * token the store runs open and says so once on stderr.
 *
 * Wire: every frame has a version byte and lengths that are bounded
 * (TD_STORE_KEY_MAX, TD_STORE_VALUE_MAX) and checked before any allocation;
 * a malformed frame closes that connection and the server serves the rest.
 *
 * Thread safety: a td_store_t client may be shared between threads (calls
 * are serialised by a lock; a blocking wait holds it, so give a thread that
 * waits long its own client). The server runs its own thread;
 * td_store_server_start/stop are not thread-safe. */
#ifndef TODIST_STORE_H
#define TODIST_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <todist/status.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_STORE_KEY_MAX    1024             /* bytes in a key */
#define TD_STORE_VALUE_MAX  (1u << 20)       /* bytes in a value */
#define TD_STORE_WAIT_MAX   1024             /* keys in one wait */

typedef struct td_store        td_store_t;
typedef struct td_store_server td_store_server_t;

/* Start a server listening on ADDR:PORT (ADDR NULL or "" = all interfaces;
 * PORT 0 = any free port, see td_store_server_port). TOKEN NULL or "" runs
 * open (warned once on stderr). */
td_status_t td_store_server_start(const char *addr, uint16_t port,
                                  const char *token,
                                  td_store_server_t **server_p);

/* The port the server listens on. */
uint16_t td_store_server_port(const td_store_server_t *server);

/* Stop the server thread, close every connection, free everything. */
void td_store_server_stop(td_store_server_t *server);

/* Connect to HOST:PORT, retrying with backoff for up to TIMEOUT seconds (the
 * server may start last), and authenticate with TOKEN (NULL or "" = none). */
td_status_t td_store_connect(const char *host, uint16_t port,
                             const char *token, double timeout,
                             td_store_t **store_p);

/* Close the connection and free the client. NULL is a no-op. */
void td_store_close(td_store_t *store);

/* Set KEY to VALUE (LEN bytes, may be 0). */
td_status_t td_store_set(td_store_t *store, const char *key,
                         const void *value, size_t len);

/* Get KEY's value, waiting up to TIMEOUT seconds for it to be set (0: do not
 * wait; TD_ERR_NOT_FOUND when absent). *value_p is malloc'ed (NUL-terminated
 * for convenience, *len_p excludes the NUL). */
td_status_t td_store_get(td_store_t *store, const char *key, double timeout,
                         void **value_p, size_t *len_p);

/* Wait until all N KEYS exist, at most TIMEOUT seconds (< 0: forever).
 * TD_ERR_TIMEOUT names the first missing key. */
td_status_t td_store_wait(td_store_t *store, const char *const *keys,
                          size_t n, double timeout);

/* Atomically add DELTA to the integer at KEY (absent = 0) and return the new
 * value. The value is stored as decimal text. */
td_status_t td_store_add(td_store_t *store, const char *key, int64_t delta,
                         int64_t *result_p);

/* If KEY's value equals EXPECTED (or KEY is absent and EXP_LEN is 0), set it
 * to DESIRED. *value_p (malloc'ed) gets the value after the operation, so
 * success is "it equals DESIRED". */
td_status_t td_store_compare_set(td_store_t *store, const char *key,
                                 const void *expected, size_t exp_len,
                                 const void *desired, size_t des_len,
                                 void **value_p, size_t *len_p);

/* Delete KEY; *deleted_p (may be NULL) says whether it existed. */
td_status_t td_store_delete(td_store_t *store, const char *key,
                            int *deleted_p);

/* Number of keys in the store. */
td_status_t td_store_num_keys(td_store_t *store, int64_t *n_p);

/* Barrier of WORLD_SIZE participants named NAME: add to "NAME/n", then wait
 * for "NAME/done". TD_ERR_TIMEOUT after TIMEOUT seconds. Each NAME may be
 * used once. */
td_status_t td_store_barrier(td_store_t *store, const char *name,
                             int world_size, double timeout);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_STORE_H */
