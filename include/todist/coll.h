/* todist/coll.h: process groups, point-to-point messages and collectives
 * (torch.distributed's c10d in C) over the UCX transport.
 *
 * Groups. td_group_world() is every rank; td_group_new() makes a subset. It
 * is called by EVERY rank of the world with the same list in the same order
 * (as torch's new_group) and exchanges no message: the group's id is the
 * number of td_group_new calls so far, and a digest of its member list
 * travels in every message, so ranks that built different lists fail at the
 * first message instead of mixing data. A rank outside the list gets a
 * handle whose operations fail with TD_ERR_STATE.
 *
 * Point-to-point. td_send/td_recv and their async forms move one tensor's
 * bytes to a group rank, matched by (source, tag) in order of posting; the
 * body lands straight in the receiver's tensor (UCX rendezvous for large
 * ones). A send completes when the receiver has matched it (as MPI_Ssend):
 * a size or dtype mismatch therefore fails on both sides, naming both
 * shapes. Two ranks that td_send to each other first both wait: use
 * td_isend (or td_irecv) for exchanges. Tags are 0..TD_TAG_MAX.
 *
 * Collectives. Every member calls the same collectives in the same order
 * (as in c10d). Each one is blocking or _async (a work handle). Tensors are
 * contiguous (a non-contiguous one is rejected with TD_ERR_INVALID:
 * make it contiguous with td_tensor_contiguous, which would hide that the
 * result does not land in the caller's tensor), of dtype float32, float64,
 * int32, int64 or uint8, on the cpu or a GPU:
 *   G1. GPU tensors of all_reduce, broadcast, reduce, all_gather and
 *       reduce_scatter go through NCCL when every member of the group has
 *       a CUDA device (published at td_init; members agree without a
 *       message); a completed work handle means the result is in place
 *       (the device stream was synchronised).
 *   G2. Any other GPU tensor is staged: copied to the host, the host
 *       algorithm, copied back only on success; members may mix cpu and
 *       GPU tensors in one staged collective.
 *   G3. A CUDA tensor where there is no device is TD_ERR_UNSUPPORTED
 *       naming it. Shapes:
 *   all_reduce(t):            in place, every rank the same numel
 *   broadcast(t, root), reduce(t, root): in place (reduce: root's t only;
 *                             others' t unchanged)
 *   all_gather(out, in):      out is [n, ...in's numel] (numel n * in)
 *   gather(out, in, root):    out as all_gather, on root only (NULL else)
 *   scatter(out, in, root):   in [n * out's numel] on root only (NULL else)
 *   reduce_scatter(out, in):  in has n * out's numel; out gets block `rank`
 *   all_to_all(out, in):      both n * k elements; block j of in goes to
 *                             rank j, block i of out came from rank i
 * Ops: TD_REDUCE_SUM, PROD, MIN, MAX, AVG (integers: truncating division),
 * and BAND, BOR, BXOR on integer dtypes only.
 *
 * Algorithms (n = group size, B = bytes of the per-rank tensor; "shm"
 * when the group's members are on one host, see below; "hier" when they
 * run on several hosts and some host holds two or more of them):
 *   collective      default                         other (TODIST_COLL_ALGO)
 *   all_reduce      hier; B <= 4 MiB: shm           rd, ring, shm, hier
 *                   else B <= 64 KiB or count < n: rd
 *                   else ring (reduce-scatter + all-gather, 1 MiB segments)
 *   broadcast       hier; B <= 4 MiB: shm,          binomial, linear, shm,
 *                   else binomial                   hier
 *   reduce          binomial                        linear
 *   all_gather      hier; n*B <= 4 MiB: shm         direct, ring, shm, hier
 *                   else n*B <= 64 KiB: direct, else ring
 *   reduce_scatter  hier; n*B <= 4 MiB: shm         direct, ring, shm, hier
 *                   else B <= 64 KiB: direct, else ring
 *   gather, scatter linear
 *   all_to_all      pairwise
 *   barrier         hier; shm, else dissemination   dissemination, shm, hier
 *                   (ceil(log2 n) rounds of 0-byte messages)
 * hier is hierarchical: inside each host to one leader, among the
 * leaders across hosts, inside each host again (runtime/coll/hier.c).
 * rd is recursive doubling (non-powers of two fold the extra ranks into
 * their neighbours first, MPICH's way). TODIST_COLL_ALGO=coll:algo[,...]
 * (e.g. "all_reduce:ring,broadcast:linear") or td_coll_set_algo() forces a
 * choice; every member must use the same one (the choice travels in the
 * mismatch check, so differing overrides fail instead of hanging).
 *
 * Shared segment (shm). A group's first shm collective tries to
 * map one shared-memory segment on all its members (a memfd opened
 * through /proc/PID/fd; about 2 x n x 1 MiB, at most 8 MiB); members
 * then write their data there and read each other's directly, with no
 * message. If any member cannot map it (another host, i.e. another
 * kernel boot id; another pid namespace), every member goes on through
 * the transport for good ("shm" then means what the rules below pick
 * without it). TODIST_COLL_SHM=0 keeps auto from picking it (set it on
 * every rank, like TODIST_COLL_ALGO).
 *
 * Single copy. Between ranks of one node, a collective body of 64 KiB or
 * more is read in place from the sender with process_vm_readv (one copy,
 * where UCX's shared-memory rendezvous makes two); where that cannot work
 * the body goes through UCX. TODIST_COLL_CMA=0 turns it off.
 *
 * Mailboxes. A td_send/td_isend of at most 4 KiB to a rank of this host
 * is written into that rank's inbox (shared memory, offered in the ack of
 * the first message) and acked there, once the first message between the
 * two went through the transport; order and the mismatch check hold as on
 * the transport. Mailboxes are polled by threads waiting or testing in
 * todist. TODIST_COLL_P2P_SHM=0 turns them off.
 *
 * Failures. A collective carries its sequence number in the group and a
 * 16-byte description (collective, dtype, op, root, count, algorithm) in
 * every message; a member that sees another call at the same sequence
 * number fails it, naming both ranks and both calls, and tells every
 * member, which fail too. A member that dies fails every pending and later
 * operation of its groups on the survivors (TD_ERR_PEER, naming it) within
 * about a second (UCX keepalive). An operation still waiting after
 * TODIST_COLL_TIMEOUT seconds (default 60; td_coll_set_timeout) fails with
 * TD_ERR_TIMEOUT naming the ranks it was waiting for, and tells every
 * member (a late one fails its call too). After any of these a
 * group is broken: its later operations fail at once with the first error
 * (sequence numbers can no longer agree); make a new group.
 *
 * Threads: every function is thread-safe. Operations of one group run one
 * at a time in the order they were issued (async ones on the group's own
 * thread); different groups, and RPC, run concurrently. Do not wait on a
 * work handle inside an RPC handler marked TD_RPC_INLINE or a transport
 * callback. */
#ifndef TODIST_COLL_H
#define TODIST_COLL_H

#include <todist/status.h>
#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_ANY_SOURCE   (-1)
#define TD_TAG_MAX      0x7fffffff
#define TD_GROUPS_MAX   1024         /* live groups per process */

typedef struct td_group td_group_t;
typedef struct td_work  td_work_t;

typedef enum {
    TD_REDUCE_SUM  = 0,
    TD_REDUCE_PROD = 1,
    TD_REDUCE_MIN  = 2,
    TD_REDUCE_MAX  = 3,
    TD_REDUCE_AVG  = 4,
    TD_REDUCE_BAND = 5,
    TD_REDUCE_BOR  = 6,
    TD_REDUCE_BXOR = 7,
    TD_REDUCE_NUM_OPS
} td_reduce_op_t;

/* "sum", "prod", ... ("?" outside the table). */
const char *td_reduce_op_name(td_reduce_op_t op);

/* ---- groups ------------------------------------------------------------ */

/* The world's group (NULL before td_init). Owned by the runtime: do not
 * destroy it. */
td_group_t *td_group_world(void);
/* A group of world ranks RANKS[0..N-1] (distinct, in range; group rank i is
 * RANKS[i]). Called by every world rank, with the same list, in the same
 * order of td_group_new calls. */
td_status_t td_group_new(const int *ranks, int n, td_group_t **group_p);
/* This rank's rank in G (-1 when not a member); G's size. */
int         td_group_rank(const td_group_t *g);
int         td_group_size(const td_group_t *g);
/* World rank of group rank R (-1 when out of range). */
int         td_group_world_rank(const td_group_t *g, int r);
/* Elastic recovery (todist/elastic.h) re-forms every group td_group_new
 * made when the world shrinks or grows: same handle, its creation list's
 * ranks that are members of the new epoch, in that order, group ranks
 * renumbered 0..n-1 (td_group_rank and td_group_size change), a fresh
 * sequence; a group that lost no member is left as it is. A group left
 * with no member fails every call naming it. The number of world ranks of
 * G's creation list that it has lost (0 for the world, an epoch's group or
 * a whole group); the first MAX of them into RANKS (may be NULL), in the
 * list's order. */
int         td_group_lost(const td_group_t *g, int *ranks, int max);
/* Waits for G's queued operations, then frees it. NULL and the world group
 * are no-ops. Wait for G's point-to-point work handles first (they refer
 * to G). */
void        td_group_destroy(td_group_t *g);

/* ---- work handles ------------------------------------------------------ */

/* Wait at most TIMEOUT_S seconds (< 0: until done) for W: the operation's
 * status, or TD_ERR_TIMEOUT when the wait ran out (W goes on). */
td_status_t td_work_wait(td_work_t *w, double timeout_s);
/* *DONE_P = 1 once W finished (then td_work_wait returns at once). */
td_status_t td_work_test(td_work_t *w, int *done_p);
/* The sender of a finished td_irecv (group rank), for TD_ANY_SOURCE. */
td_status_t td_work_source(td_work_t *w, int *src_p);
/* Drop the handle; an unfinished operation completes on its own (its
 * tensors stay retained until then). NULL is a no-op. */
void        td_work_release(td_work_t *w);

/* ---- point-to-point ---------------------------------------------------- */

td_status_t td_send(td_group_t *g, td_tensor_t *t, int dst, int tag);
/* SRC may be TD_ANY_SOURCE; *SRC_P (may be NULL) gets the sender. */
td_status_t td_recv(td_group_t *g, td_tensor_t *t, int src, int tag,
                    int *src_p);
td_status_t td_isend(td_group_t *g, td_tensor_t *t, int dst, int tag,
                     td_work_t **work_p);
td_status_t td_irecv(td_group_t *g, td_tensor_t *t, int src, int tag,
                     td_work_t **work_p);

/* ---- collectives ------------------------------------------------------- */

td_status_t td_broadcast(td_group_t *g, td_tensor_t *t, int root);
td_status_t td_reduce(td_group_t *g, td_tensor_t *t, int root,
                      td_reduce_op_t op);
td_status_t td_all_reduce(td_group_t *g, td_tensor_t *t, td_reduce_op_t op);
td_status_t td_all_gather(td_group_t *g, td_tensor_t *out, td_tensor_t *in);
/* List form: OUTS[i] (n tensors, each like IN) gets rank i's IN. */
td_status_t td_all_gather_list(td_group_t *g, td_tensor_t **outs,
                               td_tensor_t *in);
td_status_t td_gather(td_group_t *g, td_tensor_t *out, td_tensor_t *in,
                      int root);
td_status_t td_scatter(td_group_t *g, td_tensor_t *out, td_tensor_t *in,
                       int root);
td_status_t td_reduce_scatter(td_group_t *g, td_tensor_t *out,
                              td_tensor_t *in, td_reduce_op_t op);
td_status_t td_all_to_all(td_group_t *g, td_tensor_t *out, td_tensor_t *in);
td_status_t td_group_barrier(td_group_t *g);

td_status_t td_broadcast_async(td_group_t *g, td_tensor_t *t, int root,
                               td_work_t **work_p);
td_status_t td_reduce_async(td_group_t *g, td_tensor_t *t, int root,
                            td_reduce_op_t op, td_work_t **work_p);
td_status_t td_all_reduce_async(td_group_t *g, td_tensor_t *t,
                                td_reduce_op_t op, td_work_t **work_p);
td_status_t td_all_gather_async(td_group_t *g, td_tensor_t *out,
                                td_tensor_t *in, td_work_t **work_p);
td_status_t td_gather_async(td_group_t *g, td_tensor_t *out, td_tensor_t *in,
                            int root, td_work_t **work_p);
td_status_t td_scatter_async(td_group_t *g, td_tensor_t *out, td_tensor_t *in,
                             int root, td_work_t **work_p);
td_status_t td_reduce_scatter_async(td_group_t *g, td_tensor_t *out,
                                    td_tensor_t *in, td_reduce_op_t op,
                                    td_work_t **work_p);
td_status_t td_all_to_all_async(td_group_t *g, td_tensor_t *out,
                                td_tensor_t *in, td_work_t **work_p);
td_status_t td_group_barrier_async(td_group_t *g, td_work_t **work_p);

/* ---- settings ---------------------------------------------------------- */

/* Force algorithms: "coll:algo[,coll:algo...]" as TODIST_COLL_ALGO;
 * NULL or "" restores the defaults. Every member must call it at the same
 * point of its sequence of collectives. */
td_status_t td_coll_set_algo(const char *spec);
/* Per-operation timeout in seconds (> 0), overriding TODIST_COLL_TIMEOUT. */
td_status_t td_coll_set_timeout(double seconds);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_COLL_H */
