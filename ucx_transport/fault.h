/* ucx_transport/fault.h: TODIST_FAULT, fault injection for tests
 * (internal to ucx_transport; the rules' syntax is in transport.h). The
 * transport keeps one td__faults_t and calls td__fault_send from one hook
 * before each message leaves; td__transport_fault_roll asks it for
 * messages that do not go through UCX (the mailboxes).
 *
 * Invariants:
 *  F1 Without TODIST_FAULT nothing here runs on a send: the hook is one
 *     test of n (0), and no rule, lock or random number is touched.
 *  F2 A rule names a kind that exists (a misspelt one would silently
 *     inject nothing, and the test using it would prove nothing).
 *  F3 Each rank draws from its own seeded generator (seed, rank), so a
 *     run with seed=N injects the same faults again.
 *
 * Thread safety: td__fault_send and td__fault_roll are thread-safe (the
 * rules are fixed after parsing; the generator and counts are under the
 * lock); setup, classifier and kinds are set before messages flow. */
#ifndef TD_UCX_TRANSPORT_FAULT_H
#define TD_UCX_TRANSPORT_FAULT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ucx_transport/transport.h"

enum { TD__FAULT_DROP, TD__FAULT_CORRUPT, TD__FAULT_DELAY, TD__FAULT_BREAK,
       TD__FAULT_ACTIONS };
#define TD__FAULT_RULES_MAX 8

typedef struct {
    int    action;
    char   kind[64];      /* any, call, reply, rref, coll, mbox, other,
                           * fn=PREFIX */
    double rate;
    double delay_s;
    int    to;            /* break: the world rank it applies to, -1 any */
} td__fault_rule_t;

typedef struct {
    td__fault_rule_t         rules[TD__FAULT_RULES_MAX];
    int                      n;             /* rules (F1: 0 = off) */
    pthread_mutex_t          lock;          /* rng, count (with rules) */
    uint64_t                 rng;
    uint64_t                 count[TD__FAULT_ACTIONS];
    td_transport_classify_fn classify;
    void                    *classify_arg;
    const char              *id_kind[TD_TRANSPORT_HANDLERS_MAX]; /* or NULL */
} td__faults_t;

/* F: no rules; its lock made. */
void        td__fault_init(td__faults_t *f);
void        td__fault_destroy(td__faults_t *f);
/* Parse SPEC (TODIST_FAULT) for RANK into F (F2, F3); an error names it. */
td_status_t td__fault_parse(td__faults_t *f, const char *spec, int rank);
/* The hook: a message to handler ID for world rank DST with user header
 * HDR (LEN bytes) is about to leave. TD__FAULT_DROP: drop it (counted;
 * the caller completes it as sent); TD__FAULT_BREAK: the caller fails it
 * as a broken endpoint would (TD_ERR_TRANSPORT); -1: send it (HDR's first
 * byte flipped if corrupted, after a delay if delayed). */
int         td__fault_send(td__faults_t *f, uint16_t id, int dst,
                           uint8_t *hdr, size_t len);
/* A message of KIND outside UCX: TD_TRANSPORT_FAULT_*. */
int         td__fault_roll(td__faults_t *f, const char *kind);
/* Log what was injected (at close; nothing without rules). */
void        td__fault_report(const td__faults_t *f);

#endif /* TD_UCX_TRANSPORT_FAULT_H */
