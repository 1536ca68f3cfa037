/* tools/rdzv.h: todist-run's restart rounds across nodes (issue 32).
 *
 * With `--nnodes MIN:MAX` (MIN < MAX), or several nodes and
 * `--max-restarts`, the launchers (agents, one per node) meet in a store of
 * their own, served by the agent that can listen on
 * --master-addr:--rdzv-port (the leader, always node 0), and run the job
 * in numbered rounds. In a round every agent starts its workers with the
 * round's ranks; when a worker fails, a host is lost or a host joins, the
 * round is stopped, every agent reaps its workers, and those still alive
 * join the next round, whose plan (world, ranks, reason) the leader
 * writes. The workers resume from their own last checkpoint.
 *
 * Keys (all under "e/", in the agents' store):
 *   e/agents         counter: agent ids 1, 2, ... handed out at rdzv_open
 *   e/agent/K        "HOST NPROC" of agent K (for messages)
 *   e/hb/K           agent K's heartbeat counter
 *   e/r/R/n          how many agents joined round R (counter)
 *   e/r/R/in/K       agent K joined round R
 *   e/r/R/plan       round R's plan (rdzv_plan_encode)
 *   e/r/R/stop       "CODE KIND REASON": what stopped round R
 *   e/r/R/fail/K     agent K's first failed rank in round R, named
 *   e/r/R/done/K     agent K's workers all exited 0 in round R
 *   e/round          the last round with a plan
 *   e/end            "CODE REASON": the job is over
 *   e/bye            counter: agents that saw e/end
 *
 * Invariants:
 *  E1. Only the leader writes e/r/R/plan (once per R), e/round and e/end
 *      (once); every other key is written by the agent it names, or by
 *      compare-and-set (E4).
 *  E2. A plan names each node once; node 0 is the leader; nodes' ranks
 *      are contiguous in node order and world_size is their sum;
 *      1 <= nnodes <= RDZV_NODES_MAX. rdzv_plan_decode checks all of it
 *      and rejects anything else.
 *  E3. Every round's plan carries a fresh random job token, which is the
 *      workers' TODIST_JOB_TOKEN: a worker of an older round can neither
 *      authenticate at the new round's worker store nor pass its
 *      transport's tag check, so a late or partitioned worker cannot
 *      rejoin.
 *  E4. e/r/R/stop is set by compare-and-set from absent: the first cause
 *      stops the round, later ones are dropped there. Every agent also
 *      names its own failure (e/r/R/fail/K) before it joins R+1, so the
 *      next plan's reason lists every node's, whichever came first.
 *  E5. An agent starts round R's workers only after reading R's plan, and
 *      joins R+1 only after every worker of R is reaped.
 *  E6. The leader closes round R once at least MIN agents joined and every
 *      agent it believes alive joined (round 0 also waits for the last
 *      call: no new agent for --rdzv-last-call seconds, unless MAX
 *      joined); at most MAX nodes go in, the leader first, then by agent
 *      id. An agent is alive while its heartbeat advances within
 *      TODIST_LIVENESS seconds of the leader's own clock (0: always).
 *  E7. A round stopped by a failure (a worker, or a lost host) counts
 *      against --max-restarts; one stopped because a node joined does
 *      not. With no restart left the leader ends the job with the
 *      failure's exit code.
 * Single-threaded: every call runs on the launcher's one thread. */
#ifndef TODIST_TOOLS_RDZV_H
#define TODIST_TOOLS_RDZV_H

#include <stddef.h>
#include <stdint.h>

#include "todist/rank_env.h"
#include "todist/status.h"

#define RDZV_NODES_MAX  1024
#define RDZV_REASON_MAX 1024

typedef struct {
    int agent;          /* the agent's id (e/agents) */
    int node_rank;
    int first_rank;     /* its workers are first_rank .. + nproc - 1 */
    int nproc;
} rdzv_node_t;

typedef struct {
    int         round;
    int         restarts;      /* rounds stopped by a failure before this */
    int         world_size;
    int         nnodes;
    char        token[TD_JOB_TOKEN_HEX + 1];
    char        reason[RDZV_REASON_MAX];   /* why this round began */
    rdzv_node_t node[RDZV_NODES_MAX];
} rdzv_plan_t;

/* Text form: "todist-plan 1 ROUND RESTARTS WORLD NNODES TOKEN\n", NNODES
 * lines "AGENT NODE_RANK FIRST_RANK NPROC\n", then the reason (the rest,
 * no NUL). Returns the length written, or -1 when CAP is too small. */
int rdzv_plan_encode(const rdzv_plan_t *p, char *buf, size_t cap);

/* Parse LEN bytes into P, checking E2; TD_ERR_PROTOCOL naming what is
 * wrong otherwise (P is then unspecified). */
td_status_t rdzv_plan_decode(const char *buf, size_t len, rdzv_plan_t *p);

/* The node of AGENT in P, or NULL. */
const rdzv_node_t *rdzv_plan_find(const rdzv_plan_t *p, int agent);

typedef struct {
    const char *addr;          /* --master-addr */
    uint16_t    port;          /* --rdzv-port */
    const char *token;         /* the job token (TODIST_JOB_TOKEN) */
    const char *host;          /* this node's name, for messages */
    int         nproc;
    int         min_nodes, max_nodes;
    int         max_restarts;
    double      liveness;      /* s of heartbeat silence: lost; 0: never */
    double      last_call;     /* s, round 0 (E6) */
    double      timeout;       /* s to reach MIN nodes in a round */
} rdzv_opts_t;

typedef struct rdzv rdzv_t;

/* What a wait or a watch saw. */
typedef enum {
    RDZV_WAITING = 0,   /* nothing yet */
    RDZV_PLAN,          /* the round's plan is in *plan */
    RDZV_STOP,          /* the round was stopped (code, reason) */
    RDZV_END            /* the job is over (code, reason) */
} rdzv_event_t;

/* Serve the agents' store if ADDR:PORT can be listened on here (this agent
 * is then the leader), else connect to it; then take an agent id. */
td_status_t rdzv_open(const rdzv_opts_t *o, rdzv_t **r_p);

int rdzv_is_leader(const rdzv_t *r);
uint16_t rdzv_port(const rdzv_t *r);   /* the store's (PORT 0: the one taken) */
int rdzv_agent(const rdzv_t *r);

/* The round a new agent joins: 0 before the first plan, else the one
 * after the last planned. */
td_status_t rdzv_first_round(rdzv_t *r, int *round_p);

/* Join ROUND (E5: the caller's workers of earlier rounds are reaped). */
td_status_t rdzv_join(rdzv_t *r, int round);

/* One step of waiting for ROUND's plan: heartbeat; the leader tries to
 * close the round (E6, E7). RDZV_PLAN fills *PLAN; RDZV_END fills *CODE
 * and REASON (CAP bytes). Call it every tick until it says so. */
td_status_t rdzv_wait_plan(rdzv_t *r, int round, rdzv_plan_t *plan,
                           rdzv_event_t *ev, int *code, char *reason,
                           size_t cap);

/* One step of watching the running round P: heartbeat; the leader
 * watches the members' heartbeats (a lost host stops the round), nodes
 * waiting to join (stop, while P has fewer than MAX nodes) and the
 * members' done marks (all done: the job ends with 0). RDZV_STOP or
 * RDZV_END fill *CODE and REASON. */
td_status_t rdzv_watch(rdzv_t *r, const rdzv_plan_t *p, rdzv_event_t *ev,
                       int *code, char *reason, size_t cap);

/* Stop ROUND because of REASON (E4). KIND: "fail" (counts, E7), "join",
 * or "abort" (the leader then ends the job with CODE). */
td_status_t rdzv_stop(rdzv_t *r, int round, int code, const char *kind,
                      const char *reason);

/* This agent's rank failed in ROUND: name it (WHY) and stop the round
 * (kind "fail", CODE). */
td_status_t rdzv_fail(rdzv_t *r, int round, int code, const char *why);

/* This agent's workers of ROUND all exited 0. */
td_status_t rdzv_done(rdzv_t *r, int round);

/* End the job (leader only; E1). */
td_status_t rdzv_end(rdzv_t *r, int code, const char *reason);

/* Leave: a follower says it saw the end; the leader waits (bounded) for
 * the live agents to say so, then stops serving. Frees R. */
void rdzv_close(rdzv_t *r);

#endif /* TODIST_TOOLS_RDZV_H */
