/* runtime/pipe/pipe_internal.h: what the files of runtime/pipe share: the
 * schedules' op lists (schedule.c) and the split backward of zero-bubble
 * schedules (split.c). Invariants P1-P9 are in todist/pipe.h. */
#ifndef TD_RUNTIME_PIPE_INTERNAL_H
#define TD_RUNTIME_PIPE_INTERNAL_H

#include <todist/autograd.h>
#include <todist/pipe.h>

/* ---- schedule.c ------------------------------------------------------- */

typedef enum {
    PIPE_OP_F  = 0,     /* forward */
    PIPE_OP_BW = 1,     /* whole backward (input and weight gradients) */
    PIPE_OP_B  = 2,     /* input-gradient backward (ZB_H1) */
    PIPE_OP_W  = 3      /* weight-gradient backward (ZB_H1) */
} pipe_op_kind_t;

typedef struct {
    pipe_op_kind_t kind;
    int            micro;
} pipe_op_t;

/* Ops of one stage's step: 3M under ZB_H1 (F, B, W), else 2M (F, BW). */
int  pipe_schedule_n_ops(td_pipe_schedule_t sched, int n_micro);
/* The order of the ops of stage S_ of N_STAGES for N_MICRO micro-batches
 * into OPS[pipe_schedule_n_ops()] (P1-P3): the executor runs them in
 * this order; ZB_H1's W's are placed as the paper's ZB-H1 places them. */
void pipe_schedule_ops(td_pipe_schedule_t sched, int n_stages, int s_,
                       int n_micro, pipe_op_t *ops);
/* Micro-batches that may be in flight on stage S_ (P3). */
int  pipe_schedule_cap(td_pipe_schedule_t sched, int n_stages, int s_,
                       int n_micro);
/* The bubble fraction of each stage, idle / makespan of one step, that
 * the schedule's op lists give when stage s takes FS[s], BS[s] and WS[s]
 * per op (BW = B + W) and every message arrives MSG after it was sent:
 * the schedule replayed, into BUBBLE[n_stages]. -1 when out of memory,
 * else 0. */
int    pipe_schedule_replay_stages(td_pipe_schedule_t sched, int n_stages,
                                   int n_micro, const double *fs,
                                   const double *bs, const double *ws,
                                   double msg, double *bubble);
/* The replay with every stage taking F, B, W: the bubble (the same on
 * every stage), or -1 when out of memory. */
double pipe_schedule_replay(td_pipe_schedule_t sched, int n_stages,
                            int n_micro, double f, double b, double w);
/* The replay with F = B = W: (S-1)/(M+S-1) for GPipe and 1F1B,
 * (S-1)/(3M+S-1) for ZB_H1 when M >= S. */
double pipe_schedule_theory(td_pipe_schedule_t sched, int n_stages,
                            int n_micro);

/* ---- pipe.c ----------------------------------------------------------- */

/* P8: seconds a stage waiting for a message drives the transport before
 * it sleeps, from TODIST_PIPE_SPIN_MS's value ENV (NULL or "": unset; a
 * number of ms in (0, 60000], else 0: the runtime's own) or, unset, 0.05
 * when LOCAL_RANKS (ranks of this host) <= CORES (this process may run
 * on), else 0. Pure. */
double pipe_spin_choose(const char *env, int local_ranks, int cores);

/* ---- split.c ---------------------------------------------------------- */

/* One micro-batch's deferred weight gradients: the nodes with an edge to
 * a parameter, the gradients that entered them in the input pass. */
typedef struct {
    td_node_t    **nodes;     /* retained */
    td_tensor_t  **grads;     /* n_nodes x max_inputs, NULL = zero */
    int           *slots;     /* n_inputs of each node */
    int          **params;    /* per node: indices into the stage's params */
    int           *n_params;
    int            n_nodes, max_inputs;
} pipe_split_t;

/* Input pass: gradient of OUT (seeded with DOUT) to X (NULL: none wanted;
 * *DX_P gets a new reference or NULL) and to every weight node of PARAMS'
 * graph, keeping the graph (retain_graph). Parameters are not touched. */
td_status_t pipe_split_input(pipe_split_t *sp, td_tensor_t *out,
                             td_tensor_t *dout, td_tensor_t *x,
                             td_tensor_t *const *params, int n_params,
                             td_tensor_t **dx_p);
/* Weight pass: each weight node alone from its captured gradient to its
 * parameters, added into their .grad; frees what the input pass kept. */
td_status_t pipe_split_weight(pipe_split_t *sp, td_tensor_t *const *params);
void        pipe_split_clear(pipe_split_t *sp);

#endif /* TD_RUNTIME_PIPE_INTERNAL_H */
