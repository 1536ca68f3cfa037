/* hier.c: hierarchical collectives (algorithm "hier") for groups whose
 * members run on several hosts. Each host has one leader; a call runs in
 * three phases: inside each host (the members to their leader), among the
 * leaders over the network, inside each host again (the leader to its
 * members). Inside a host the data goes through the host's shared
 * segment (shm.c, a segment per host made at the group's first
 * hierarchical call: H8): members write their chunk in their slot and
 * raise a flag, the leader reduces or copies it out, and writes what the
 * members need in its own slot; no message moves inside the host. Across
 * hosts only the leaders talk, over the transport, so each host's link
 * carries its data once instead of once per member. Where some host
 * cannot have a segment, every host goes through the transport inside
 * (UCX's shared-memory transports, bodies from 64 KiB read in place:
 * cma.h C9), with the algorithms below marked "(transport)".
 *
 *   all_reduce      the vector in chunks of HIER_CHUNK: the leader reduces
 *                   its members' chunk c, exchanges it with the other
 *                   leaders, reduces theirs, and sends the result of c to
 *                   its members, while chunk c + 1 is already reduced on the
 *                   host (the exchange of c is in flight meanwhile). Among
 *                   2 leaders, and for one chunk (<= HIER_CHUNK: one round,
 *                   latency-optimal) among any number, the exchange is
 *                   direct (every leader to every other); among more
 *                   leaders a large vector goes around a ring of leaders
 *                   chunk by chunk (reduce-scatter + all-gather:
 *                   bandwidth-optimal).
 *   broadcast       in chunks down a binomial tree of leaders rooted at the
 *                   root's host, each leader forwarding chunk c to its
 *                   children and its members as soon as it has it.
 *   all_gather      in chunks, one round of the segment each: the host's
 *                   blocks (every member copies the others' out, the
 *                   leader sends each chunk to the other leaders at once),
 *                   then the other hosts' chunks as they arrive, from the
 *                   leader's slot. (transport: in units of a chunk of a
 *                   block, each sent on to the other leaders and to the
 *                   members as soon as the leader has it: H11.)
 *   reduce_scatter  in units (block, chunk), one round each, other hosts'
 *                   blocks first: the leader reduces the members' unit
 *                   from their slots and sends it to the leader of the
 *                   block's host at once; a unit of its own host waits for
 *                   the other leaders' parts, and goes to its member
 *                   through the leader's slot. (transport: in units of
 *                   a chunk of a block, other hosts' first, each reduced
 *                   from the members' as it arrives: H11.)
 *   barrier         a round of the host, dissemination among leaders, a
 *                   round of the host.
 *
 * Invariants (H1..H14):
 *  H1 Auto picks "hier" for all_reduce, broadcast, all_gather,
 *     reduce_scatter and barrier exactly when the group's members run on
 *     at least two hosts and some host holds two or more of them (with
 *     one member per host it is the flat algorithm with extra steps).
 *     It is tried before the shared segment: a group that spans hosts
 *     can have none (shm.c S1).
 *  H2 Every member uses one host map: group rank 0's, made from the
 *     host id each member published with its address (runtime/hostmap.h;
 *     an id rank 0 could not fetch is a host of its own) and broadcast to
 *     the others at the group's first call that may need it (run.c A1),
 *     so all agree on the algorithm (it travels in the call's
 *     description, C5) and on the leaders: the first member of each host
 *     in group-rank order, except that the root of a broadcast leads its
 *     own host. (Each member building its own map let one failed lookup
 *     make members pick different algorithms.)
 *  H3 Phases and chunks use disjoint step tags (TAG_UP, TAG_DOWN, TAG_X,
 *     TAG_RING, TAG_BAR, TAG_XP with the chunk, block or round in the low
 *     bits), so no phase's receive matches another's message (C8).
 *  H4 A leader changes a chunk of the caller's buffer only after every
 *     send that reads it has completed (the exchange of chunk c is waited
 *     for before its result is reduced in; sends to members are of final
 *     results only), and a member's result lands on a chunk only after
 *     its leader has read that chunk (the leader sends a result after
 *     reading what it reduces).
 *  H5 Every member gets bitwise the same result: a host's sum is made
 *     once, by its leader; among 2 leaders each adds the other's (the
 *     operations are commutative); among more, every leader reduces the
 *     hosts' parts in host order (direct) or each part is reduced by one
 *     leader (ring).
 *  H6 AVG sums throughout and divides by the group's size once, at the
 *     leader, before the result goes to the members.
 *  H7 Nothing returns with a request in flight (C4): every step posted
 *     is waited for, also after a failure, and the first error is the one
 *     returned.
 *  H8 Inside hosts, all hosts go through their segment or none does: at
 *     the group's first hierarchical call the first member of each host
 *     (its head) offers a segment to the others (shm.c's handshake: S1
 *     for one host), the heads trade whether their host has one, and
 *     each head tells its members the AND (g->hshm_state, then fixed).
 *     A host of one member needs none and says yes. So the leaders'
 *     messages, which differ between the two ways, always match. Bytes a
 *     rank writes into the segment and bytes it sends to a member of its
 *     own host are counted (hier_seg_bytes, hier_tp_bytes) and logged at
 *     debug when the group goes: through the segments the second is 0,
 *     which tests/hosts/test_hosts.sh checks.
 *  H9 Through the segments, a chunk is a slot of the largest host's
 *     segment (at most HIER_CHUNK), the same on every host, and one
 *     round of a host's segment is one epoch (shm.c S5): what a rank
 *     reads after round e it has read before it posts round e + 1, and
 *     what it writes for round e it writes after round e - 1. The leader
 *     keeps a chunk's exchange in flight while it works on the next
 *     (all_reduce: the exchange of chunk k is finished after chunk k + 1
 *     is reduced and posted, so its result reaches the members two
 *     rounds after their chunk; all_gather and reduce_scatter: every
 *     receive is posted before the first round, every send goes as soon
 *     as its chunk is ready).
 * H10 Through the segments, all_reduce's direct exchange posts chunk c's
 *     receives before chunk c is summed on the host: chunks 0 and 1
 *     before the first round, chunk c + 2 as soon as chunk c's exchange
 *     is finished (the two parities' slots, H4), so the other leaders'
 *     chunks land in place even when they are ahead.
 * H11 Through the transport inside hosts, all_gather and reduce_scatter
 *     of more than HIER_CHUNK in all go in units (block j, chunk c of
 *     chunking()'s), tagged j x K + c in every phase (H3: one unit one
 *     message a phase), every receive posted before the first send
 *     (reduce_scatter's from the members: unit u + 1's before unit u is
 *     reduced, in the other parity's slots, H4). The leader sends a unit
 *     on to the other leaders and its members as soon as it has it
 *     (all_gather: the other hosts' units of chunk c - 1 after its
 *     host's of chunk c, both in flight) and reduces a unit in the same
 *     order as one piece does (its input, its members in host order,
 *     then the other hosts in host order: H5), so the result is bitwise
 *     what the unchunked path gives, which a vector of one chunk still
 *     takes (whole blocks: fewer messages, latency first).
 *
 * H12 all_reduce's direct exchange between leaders goes in pieces of
 *     TD_TRANSPORT_FAR_SEG_BYTES (ar_x_cut: at most 0xffff a chunk, larger
 *     if need be), tagged TAG_XP | (chunk mod 256) << 16 | piece: each
 *     arrives in one UCX TCP segment and is delivered from it, not
 *     reassembled by UCX first (transport.c S3, as ring.c R2 cuts
 *     the ring's far links). Every leader cuts alike (the same chunk,
 *     the same constant) and posts a chunk's receives before its sends
 *     (H10), so pieces land in place. The chunk's low 8 bits suffice: a
 *     leader sends chunk c only after it has finished the exchange of
 *     c - 2 (its parity's slots), so no two chunks of one call 256 apart
 *     are ever in flight between two leaders. 2 hosts x 2 ranks, 64 MiB
 *     over 10 Gbit/s links: bench/RESULTS.md.
 * H13 Through the segments between 2 hosts, an all_reduce of fewer than
 *     HIER_PIPE slots goes in HIER_PIPE chunks of at least HIER_PIPE_MIN
 *     bytes (ar_seg_per; one chunk up to HIER_PIPE_MIN, latency first):
 *     in one chunk the members' copy up, the exchange and the copy down
 *     run one after another, in several the exchange of one overlaps the
 *     host's work on the next (H9). Every member computes it alike (the
 *     count, the element size and the map are the call's). Among more
 *     hosts a vector of one slot keeps its one direct round (the chunks
 *     would each go around the leaders' ring: 2(H - 1) steps each).
 * H14 all_gather's and reduce_scatter's units between leaders (block j,
 *     chunk c: unit j x K + c, through the segments and the transport)
 *     go in pieces of TD_TRANSPORT_FAR_SEG_BYTES (at most XQ_PIECES a
 *     unit, larger if need be), tagged TAG_XQ | unit << 5 | piece, for
 *     H12's reason: each arrives in one UCX TCP segment, in place. Every
 *     leader cuts alike (xq_cut reads only the call: the largest unit,
 *     the units, the hosts) and waits for a unit's pieces in order. A
 *     call whose units fit one piece, or with XQ_UNITS units or more, or
 *     more than XQ_STEPS pieces in all (a step is 1 KiB, and every
 *     receive is posted first: H9, H11), sends one message a unit under
 *     TAG_X | unit, as before.
 *
 * Run by the thread running the group's operation (work.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/coll/hier.h"
#include "runtime/coll/reduce.h"
#include "runtime/coll/shm.h"
#include "ucx_transport/transport.h"
#include "base/log.h"

/* A chunk of all_reduce and broadcast through the transport (through
 * the segments: H9, at most this): 1 MiB keeps a chunk's exchange
 * short enough to overlap with the next chunk's work on the host, and
 * the scratch small (the leader holds (1 + 2 x leaders) chunks). */
#define HIER_CHUNK      (1024u * 1024u)
#define HIER_CHUNKS_MAX 256           /* larger vectors: larger chunks */
#define HIER_PIPE       4             /* H13: chunks of a mid-sized vector */
#define HIER_PIPE_MIN   (64u * 1024u) /* H13: ... each at least this */

/* Step tags (H3): the phase in the high byte, the index in the rest. */
#define TAG_UP   0x80000000u          /* member -> its leader */
#define TAG_DOWN 0x81000000u          /* leader -> its members */
#define TAG_X    0x82000000u          /* leader <-> leader, direct */
#define TAG_RING 0x83000000u          /* leaders' ring: phase, step, chunk */
#define TAG_BAR  0x84000000u          /* leaders' dissemination rounds */
#define TAG_SEG  0x85000000u          /* heads: every host has a segment? */
#define TAG_XP   0x86000000u          /* all_reduce's direct exchange: chunk
                                       * (low 8 bits) << 16 | piece (H12) */
#define TAG_XQ   0x87000000u          /* all_gather's, reduce_scatter's
                                       * leader messages: unit << 5 |
                                       * piece (H14) */
#define TAG_IDX  0x00ffffffu
#define XQ_PIECES   32u               /* H14: pieces of a unit at most */
#define XQ_UNITS    (1u << 19)        /* H14: units of a call below this */
#define XQ_STEPS    16384u            /* H14: a call's pieces at most (a
                                       * step is 1 KiB) */

/* ---- the host map ------------------------------------------------------- */

td_status_t
coll_hostmap_build(const uint64_t *ids, int n, coll_hostmap_t **map_p)
{
    coll_hostmap_t *m = calloc(1, sizeof(*m));
    int *all = malloc(sizeof(int) * (4 * (size_t)n + 1));
    int *fill;

    if (m == NULL || all == NULL) {
        free(m);
        free(all);
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory for the host "
                        "map of %d members", n);
    }
    m->n = n;
    m->host_of = all;
    m->first = all + n;
    m->count = all + 2 * n;
    m->members = all + 3 * n;
    for (int i = 0; i < n; i++) {
        int h = -1;

        for (int j = 0; j < i && ids[i] != 0; j++) {
            if (ids[j] == ids[i]) {
                h = m->host_of[j];
                break;
            }
        }
        if (h < 0) {
            h = m->nhosts++;
            m->count[h] = 0;
        }
        m->host_of[i] = h;
        m->count[h]++;
    }
    for (int h = 0, off = 0; h < m->nhosts; h++) {
        m->first[h] = off;
        off += m->count[h];
    }
    fill = calloc((size_t)m->nhosts + 1, sizeof(int));
    if (fill == NULL) {
        coll_hostmap_free(m);
        return td_error(TD_ERR_NO_MEMORY, "coll: out of memory for the host "
                        "map of %d members", n);
    }
    for (int i = 0; i < n; i++) {
        int h = m->host_of[i];

        m->members[m->first[h] + fill[h]++] = i;
    }
    free(fill);
    *map_p = m;
    return TD_OK;
}

void
coll_hostmap_free(coll_hostmap_t *m)
{
    if (m != NULL) {
        free(m->host_of);
        free(m);
    }
}

int
coll_hier_pick(const coll_hostmap_t *m, coll_kind_t k)
{
    if (m == NULL || m->nhosts < 2 || m->nhosts >= m->n) {
        return 0;                                       /* H1 */
    }
    return k == COLL_ALL_REDUCE || k == COLL_BROADCAST ||
           k == COLL_ALL_GATHER || k == COLL_REDUCE_SCATTER ||
           k == COLL_BARRIER;
}

int
coll_hier_leader(const coll_hostmap_t *m, int h, int root)
{
    if (root >= 0 && root < m->n && m->host_of[root] == h) {
        return root;                                    /* H2 */
    }
    return m->members[m->first[h]];
}

const coll_hostmap_t *
coll_hier_map(const td_group_t *g)
{
    return g->hosts;                           /* H2: agreed by run.c */
}

/* ---- sets of steps (H7) ------------------------------------------------------ */

typedef struct {
    coll_req_t  *r;
    coll_req_t **p;
    int          n;
} rset_t;

static td_status_t
rset_init(rset_t *s, size_t cap)
{
    s->n = 0;
    s->r = calloc(cap + 1, sizeof(*s->r));
    s->p = calloc(cap + 1, sizeof(*s->p));
    if (s->r == NULL || s->p == NULL) {
        free(s->r);
        free(s->p);
        s->r = NULL;
        s->p = NULL;
        return td_error(TD_ERR_NO_MEMORY, "coll: hier: out of memory for %zu "
                        "steps", cap);
    }
    return TD_OK;
}

static void
rset_free(rset_t *s)
{
    free(s->r);
    free(s->p);
}

/* Post a receive (SEND 0) or a send into S; after an error ST nothing is
 * posted and ST stays. */
static td_status_t
rset_post(coll_op_t *op, rset_t *s, td_status_t st, int send, int peer,
          uint32_t tag, void *buf, size_t len)
{
    coll_req_t *r = &s->r[s->n];

    if (st != TD_OK) {
        return st;
    }
    st = send ? coll_isend(op, r, peer, tag, buf, len)
              : coll_irecv(op, r, peer, tag, buf, len);
    if (st == TD_OK) {
        const coll_hostmap_t *m = op->g->hosts;

        s->p[s->n++] = r;
        if (send && m != NULL && m->host_of[peer] == m->host_of[op->g->me]) {
            op->g->hier_tp_bytes += len;        /* (H8: tests read it) */
        }
    }
    return st;
}

/* Wait for every step of S and empty it: ST, or the first error. */
static td_status_t
rset_wait(coll_op_t *op, rset_t *s, td_status_t st)
{
    td_status_t w = s->n > 0 ? coll_step_wait(op, s->p, s->n) : TD_OK;

    s->n = 0;
    return st != TD_OK ? st : w;
}

/* ---- the call's shape ------------------------------------------------------------ */

typedef struct {
    const coll_hostmap_t *m;
    int  me, my_h, H;              /* group rank, its host, hosts */
    int  lead;                     /* my host's leader */
    int  leader;                   /* am I it? */
    int  L, idx, lidx;             /* my host's members; mine and the
                                    * leader's index among them */
    const int *who;                /* my host's members (group ranks) */
} shape_t;

static td_status_t
shape_of(coll_op_t *op, int root, shape_t *s)
{
    const coll_hostmap_t *m = coll_hier_map(op->g);

    if (m == NULL) {                   /* (run.c agrees it before: A1) */
        return td_error(TD_ERR_STATE, "coll: group %u has no host map",
                        op->g->id);
    }
    s->m = m;
    s->me = op->g->me;
    s->my_h = m->host_of[s->me];
    s->H = m->nhosts;
    s->lead = coll_hier_leader(m, s->my_h, root);
    s->leader = s->lead == s->me;
    s->L = m->count[s->my_h];
    s->who = &m->members[m->first[s->my_h]];
    for (int i = 0; i < s->L; i++) {
        if (s->who[i] == s->me) {
            s->idx = i;
        }
        if (s->who[i] == s->lead) {
            s->lidx = i;
        }
    }
    return TD_OK;
}

/* Elements per chunk of COUNT elements of ES bytes, and the chunks. */
static size_t
chunking(size_t count, size_t es, size_t *k_p)
{
    size_t per = HIER_CHUNK / es, k;

    if (per == 0) {
        per = 1;
    }
    k = (count + per - 1) / per;
    if (k > HIER_CHUNKS_MAX) {
        per = (count + HIER_CHUNKS_MAX - 1) / HIER_CHUNKS_MAX;
        k = (count + per - 1) / per;
    }
    *k_p = k > 0 ? k : 1;
    return per;
}

/* Chunk C (PER bytes or elements each) of TOTAL: its offset and length. */
static void
piece(size_t c, size_t per, size_t total, size_t *off, size_t *len)
{
    *off = c * per;
    *len = *off >= total ? 0 : total - *off < per ? total - *off : per;
}

/* ---- the leaders' units in pieces (H14) --------------------------------------- */

/* How a call's leader messages (NU units of at most PER bytes, among H
 * hosts) are cut, alike on every leader (all of it is the call's): the
 * bytes of a piece, or 0 for one message a unit under TAG_X (a unit of
 * one piece anyway, or too many units or pieces for the tag or the
 * steps). */
static size_t
xq_cut(size_t per, size_t nu, int H)
{
    size_t seg = TD_TRANSPORT_FAR_SEG_BYTES, np;

    if (per <= seg || H < 2) {
        return 0;
    }
    np = (per + seg - 1) / seg;
    if (np > XQ_PIECES) {
        seg = (per + XQ_PIECES - 1) / XQ_PIECES;
        np = (per + seg - 1) / seg;
    }
    if (nu >= XQ_UNITS || nu * np * (size_t)H > XQ_STEPS) {
        return 0;
    }
    return seg;
}

/* The steps of a unit of LEN bytes cut at SEG (xq_cut). */
static size_t
xq_n(size_t seg, size_t len)
{
    return seg == 0 || len <= seg ? 1 : (len + seg - 1) / seg;
}

/* Post unit U (LEN bytes at BUF) to (SEND) or from leader PEER: one step
 * under TAG_X | U, or its pieces (H14), in order. */
static td_status_t
xq_post(coll_op_t *op, rset_t *s, td_status_t st, int send, int peer,
        size_t seg, uint32_t u, char *buf, size_t len)
{
    if (seg == 0) {
        return rset_post(op, s, st, send, peer, TAG_X | u, buf, len);
    }
    for (size_t i = 0, o = 0; o < len || i == 0; i++, o += seg) {
        size_t l = len - o < seg ? len - o : seg;

        st = rset_post(op, s, st, send, peer, TAG_XQ | u << 5 | (uint32_t)i,
                       buf + o, l);
        if (st == TD_OK && send) {
            op->g->hier_xq_sent++;        /* (said when the group goes) */
            op->g->hier_xq_bytes = seg;
        }
    }
    return st;
}

/* Wait for the unit of LEN bytes whose first step is S's FIRST. */
static td_status_t
xq_wait(coll_op_t *op, const rset_t *s, int first, size_t seg, size_t len)
{
    td_status_t st = TD_OK;

    for (size_t i = 0, n = xq_n(seg, len); i < n && st == TD_OK; i++) {
        coll_req_t *w = s->p[(size_t)first + i];

        st = coll_step_wait(op, &w, 1);
    }
    return st;
}

/* reduce_scatter's receives of the other leaders' parts, K units a block
 * of at most PER elements of ES bytes, the last LAST: where a unit's
 * first step is (rs_block_finish). */
typedef struct {
    size_t seg;                    /* xq_cut's */
    size_t np;                     /* steps of a full unit */
    size_t pb;                     /* steps of a block */
} xq_t;

static void
xq_rs(xq_t *x, size_t per, size_t K, size_t count, size_t es, size_t nu,
      int H)
{
    size_t last = count - (K - 1) * per;

    x->seg = xq_cut((K > 1 ? per : last) * es, nu, H);
    x->np = xq_n(x->seg, per * es);
    x->pb = (K - 1) * x->np + xq_n(x->seg, last * es);
}

/* ---- all_reduce ---------------------------------------------------------------- */

typedef struct {
    coll_op_t  *op;
    shape_t     s;
    char       *b;                 /* the caller's vector */
    size_t      count, per, K, es, slot;
    td_dtype_t  dt;
    td_reduce_op_t rop;
    char       *tmp;               /* one member's chunk */
    char       *x;                 /* 2 parities x H slots (direct) */
    rset_t      xs[2];             /* the exchange of chunks c, c + 1 */
    rset_t      down;              /* results to the members */
    int         direct;
    size_t      xp, xn;            /* the direct exchange's pieces: their
                                    * elements, and per chunk (H12) */
} ar_t;

static void
ar_range(const ar_t *a, size_t c, size_t *off, size_t *len)
{
    *off = c * a->per;
    *len = a->count - *off < a->per ? a->count - *off : a->per;
}

/* The host's sum of chunk C into the caller's vector (leader). */
static td_status_t
ar_up(ar_t *a, size_t c, rset_t *one)
{
    const coll_hostmap_t *m = a->s.m;
    size_t off, len;
    td_status_t st = TD_OK;

    ar_range(a, c, &off, &len);
    for (int i = 0; i < m->count[a->s.my_h] && st == TD_OK; i++) {
        int j = m->members[m->first[a->s.my_h] + i];

        if (j == a->s.me) {
            continue;
        }
        st = rset_post(a->op, one, st, 0, j, TAG_UP | (uint32_t)c, a->tmp,
                       len * a->es);
        st = rset_wait(a->op, one, st);
        if (st == TD_OK) {
            coll_reduce_into(a->b + off * a->es, a->tmp, len, a->dt, a->rop);
        }
    }
    return st;
}

/* H12: the direct exchange's pieces, alike on every leader (they know
 * the same chunk): TD_TRANSPORT_FAR_SEG_BYTES each, at most 0xffff a
 * chunk (the tag's 16 bits; larger pieces if need be), and the rsets
 * that hold a parity's steps: H - 1 peers x this call's pieces of a
 * chunk x both ways (a step is 1 KiB: sized by the chunk alone, a small
 * call would zero 17 times what it uses). */
static td_status_t
ar_x_cut(ar_t *a)
{
    size_t p = TD_TRANSPORT_FAR_SEG_BYTES / a->es, used;
    size_t big = a->per < a->count ? a->per : a->count;
    td_status_t st;

    p = p > 0 ? p : 1;
    (void)coll_segs(a->per, &p);
    used = (big + p - 1) / p;
    a->xp = p;
    a->xn = used > 0 ? used : 1;
    a->op->g->hier_xp_bytes = p * a->es;   /* (said when the group goes) */
    st = rset_init(&a->xs[0], 2 * (size_t)a->s.H * a->xn);
    return st == TD_OK ? rset_init(&a->xs[1], 2 * (size_t)a->s.H * a->xn)
                       : st;
}

/* Post chunk C's pieces to (SEND) or from leader PEER, BUF its bytes. */
static td_status_t
ar_x_post_pieces(ar_t *a, size_t c, int send, int peer, char *buf,
                 size_t len)
{
    rset_t *xs = &a->xs[c & 1];
    td_status_t st = TD_OK;

    for (size_t i = 0, o = 0; o < len || i == 0; i++, o += a->xp) {
        size_t l = len - o < a->xp ? len - o : a->xp;

        st = rset_post(a->op, xs, st, send, peer, TAG_XP |
                       ((uint32_t)c & 0xff) << 16 | (uint32_t)i,
                       buf + o * a->es, l * a->es);
        if (st == TD_OK && send) {
            a->op->g->hier_xp_sent++;     /* (said when the group goes) */
        }
    }
    return st;
}

/* Post the receives of chunk C's direct exchange (its parity's slots:
 * free once chunk C - 2's exchange is finished). */
static td_status_t
ar_x_post_recv(ar_t *a, size_t c)
{
    const coll_hostmap_t *m = a->s.m;
    char *x = a->x + (c & 1) * (size_t)a->s.H * a->slot;
    size_t off, len;
    td_status_t st = TD_OK;

    ar_range(a, c, &off, &len);
    for (int h = 0; h < a->s.H && st == TD_OK; h++) {
        if (h != a->s.my_h) {
            st = ar_x_post_pieces(a, c, 0, coll_hier_leader(m, h, -1),
                                  x + (size_t)h * a->slot, len);
        }
    }
    return st;
}

/* Post the sends of chunk C's direct exchange (the host's sum of it). */
static td_status_t
ar_x_post_send(ar_t *a, size_t c)
{
    const coll_hostmap_t *m = a->s.m;
    size_t off, len;
    td_status_t st = TD_OK;

    ar_range(a, c, &off, &len);
    for (int k = 1; k < a->s.H && st == TD_OK; k++) {
        int h = (a->s.my_h + k) % a->s.H;     /* not all at host 0 first */

        st = ar_x_post_pieces(a, c, 1, coll_hier_leader(m, h, -1),
                              a->b + off * a->es, len);
    }
    return st;
}

/* Start the direct exchange of chunk C with the other leaders. */
static td_status_t
ar_x_post(ar_t *a, size_t c)
{
    td_status_t st = ar_x_post_recv(a, c);

    return st == TD_OK ? ar_x_post_send(a, c) : st;
}

/* Finish the exchange of chunk C: the other hosts' parts reduced in (H4,
 * H5). */
static td_status_t
ar_x_finish(ar_t *a, size_t c)
{
    char *x = a->x + (c & 1) * (size_t)a->s.H * a->slot;
    char *mine = a->b;
    size_t off, len, bytes;
    td_status_t st = rset_wait(a->op, &a->xs[c & 1], TD_OK);

    if (st != TD_OK) {
        return st;
    }
    ar_range(a, c, &off, &len);
    mine += off * a->es;
    bytes = len * a->es;
    if (a->s.H == 2) {
        coll_reduce_into(mine, x + (size_t)(1 - a->s.my_h) * a->slot, len,
                         a->dt, a->rop);
        return TD_OK;
    }
    /* in host order, the same on every leader (H5) */
    if (bytes > 0) {
        memcpy(x + (size_t)a->s.my_h * a->slot, mine, bytes);
    }
    for (int h = 1; h < a->s.H; h++) {
        coll_reduce_into(x, x + (size_t)h * a->slot, len, a->dt, a->rop);
    }
    if (bytes > 0) {
        memcpy(mine, x, bytes);
    }
    return TD_OK;
}

/* Chunk C all-reduced among the leaders around their ring. */
static td_status_t
ar_ring(ar_t *a, size_t c)
{
    const coll_hostmap_t *m = a->s.m;
    int H = a->s.H, me = a->s.my_h;
    int right = coll_hier_leader(m, (me + 1) % H, -1);
    int left = coll_hier_leader(m, (me - 1 + H) % H, -1);
    size_t off, len;
    char *b;

    ar_range(a, c, &off, &len);
    b = a->b + off * a->es;
    for (int phase = 0; phase < 2; phase++) {
        for (int s = 0; s < H - 1; s++) {
            int sc = phase == 0 ? (me - s + 2 * H) % H
                                : (me + 1 - s + 2 * H) % H;
            int rc = phase == 0 ? (me - s - 1 + 2 * H) % H
                                : (me - s + 2 * H) % H;
            size_t s0 = len * (size_t)sc / (size_t)H;
            size_t sl = len * (size_t)(sc + 1) / (size_t)H - s0;
            size_t r0 = len * (size_t)rc / (size_t)H;
            size_t rl = len * (size_t)(rc + 1) / (size_t)H - r0;
            uint32_t tag = TAG_RING | (uint32_t)phase << 23 |
                           ((uint32_t)s & 0x7ff) << 12 | ((uint32_t)c & 0xfff);
            td_status_t st;

            st = coll_sendrecv(a->op, right, b + s0 * a->es, sl * a->es, left,
                               phase == 0 ? a->tmp : b + r0 * a->es,
                               rl * a->es, tag);
            if (st != TD_OK) {
                return st;
            }
            if (phase == 0) {
                coll_reduce_into(b + r0 * a->es, a->tmp, rl, a->dt, a->rop);
            }
        }
    }
    return TD_OK;
}

/* Chunk C is final: divide (H6) and send it to the members. */
static td_status_t
ar_down(ar_t *a, size_t c, td_status_t st)
{
    const coll_hostmap_t *m = a->s.m;
    size_t off, len;

    ar_range(a, c, &off, &len);
    if (st == TD_OK && a->rop == TD_REDUCE_AVG) {
        coll_divide(a->b + off * a->es, len, a->dt, a->op->g->n);
    }
    for (int i = 0; i < m->count[a->s.my_h]; i++) {
        int j = m->members[m->first[a->s.my_h] + i];

        if (j != a->s.me) {
            st = rset_post(a->op, &a->down, st, 1, j, TAG_DOWN | (uint32_t)c,
                           a->b + off * a->es, len * a->es);
        }
    }
    return st;
}

static td_status_t
ar_leader(ar_t *a)
{
    int L = a->s.m->count[a->s.my_h], xchg;
    long pending = -1;             /* chunk exchanged, not yet finished */
    rset_t one;
    td_status_t st;

    a->direct = a->K == 1 || a->s.H == 2;
    xchg = a->s.H > 1 && a->direct;
    a->slot = (a->per * a->es + 63) & ~(size_t)63;
    a->tmp = coll_scratch(a->op->g, a->slot * (1 + (a->direct ? 2 *
                                     (size_t)a->s.H : 0)) + 64);
    if (a->tmp == NULL) {
        return TD_ERR_NO_MEMORY;
    }
    a->x = a->tmp + a->slot;
    memset(&one, 0, sizeof(one));
    memset(a->xs, 0, sizeof(a->xs));
    memset(&a->down, 0, sizeof(a->down));
    /* a parity holds (H - 1) x pieces receives and as many sends (H12) */
    st = rset_init(&one, 1);
    st = st == TD_OK ? ar_x_cut(a) : st;
    st = st == TD_OK ? rset_init(&a->down, a->K * (size_t)L) : st;
    for (size_t c = 0; c < a->K && st == TD_OK; c++) {
        st = ar_up(a, c, &one);
        if (xchg) {
            st = st == TD_OK ? ar_x_post(a, c) : st;
            if (pending >= 0) {
                /* chunk c's exchange is in flight: finish c - 1 */
                td_status_t s2 = ar_x_finish(a, (size_t)pending);

                st = ar_down(a, (size_t)pending, st != TD_OK ? st : s2);
                pending = -1;
            }
            pending = st == TD_OK ? (long)c : -1;
        } else {
            if (a->s.H > 1 && st == TD_OK) {
                st = ar_ring(a, c);
            }
            st = ar_down(a, c, st);
        }
    }
    if (pending >= 0) {
        td_status_t s2 = ar_x_finish(a, (size_t)pending);

        st = ar_down(a, (size_t)pending, st != TD_OK ? st : s2);
    }
    /* after a failure, whatever is still posted (H7) */
    if (a->xs[0].r != NULL) {
        st = rset_wait(a->op, &a->xs[0], st);
    }
    if (a->xs[1].r != NULL) {
        st = rset_wait(a->op, &a->xs[1], st);
    }
    if (a->down.r != NULL) {
        st = rset_wait(a->op, &a->down, st);
    }
    rset_free(&one);
    rset_free(&a->xs[0]);
    rset_free(&a->xs[1]);
    rset_free(&a->down);
    return st;
}

/* A member: every chunk up to the leader, every result back (H4). */
static td_status_t
ar_member(ar_t *a)
{
    rset_t s;
    td_status_t st = rset_init(&s, 2 * a->K);

    for (size_t c = 0; c < a->K && st == TD_OK; c++) {
        size_t off, len;

        ar_range(a, c, &off, &len);
        st = rset_post(a->op, &s, st, 0, a->s.lead, TAG_DOWN | (uint32_t)c,
                       a->b + off * a->es, len * a->es);
        st = rset_post(a->op, &s, st, 1, a->s.lead, TAG_UP | (uint32_t)c,
                       a->b + off * a->es, len * a->es);
    }
    if (s.r != NULL) {
        st = rset_wait(a->op, &s, st);
        rset_free(&s);
    }
    return st;
}

static td_status_t
all_reduce_tp(coll_op_t *op, void *buf, size_t count)
{
    ar_t a;
    td_status_t st;

    memset(&a, 0, sizeof(a));
    st = shape_of(op, -1, &a.s);
    if (st != TD_OK) {
        return st;
    }
    a.op = op;
    a.b = buf;
    a.count = count;
    a.es = op->esize;
    a.dt = (td_dtype_t)op->desc.dtype;
    a.rop = (td_reduce_op_t)op->desc.op;
    a.per = chunking(count, a.es, &a.K);
    return a.s.leader ? ar_leader(&a) : ar_member(&a);
}

/* ---- broadcast ------------------------------------------------------------------- */

static td_status_t
broadcast_tp(coll_op_t *op, void *buf, size_t nbytes)
{
    shape_t s;
    const coll_hostmap_t *m;
    int root = op->desc.root, hr, vh, low, nkids = 0, kids[32];
    size_t per, K;
    char *b = buf;
    rset_t in, out;
    td_status_t st = shape_of(op, root, &s);

    if (st != TD_OK) {
        return st;
    }
    m = s.m;
    per = chunking(nbytes, 1, &K);
    if (!s.leader) {
        st = rset_init(&in, K);
        for (size_t c = 0; c < K && st == TD_OK; c++) {
            size_t off = c * per, len = nbytes - off < per ? nbytes - off
                                                           : per;

            st = rset_post(op, &in, st, 0, s.lead, TAG_DOWN | (uint32_t)c,
                           b + off, len);
        }
        if (in.r != NULL) {
            st = rset_wait(op, &in, st);
            rset_free(&in);
        }
        return st;
    }
    /* a binomial tree of hosts, numbered from the root's */
    hr = m->host_of[root];
    vh = (s.my_h - hr + s.H) % s.H;
    low = vh == 0 ? s.H : vh & -vh;
    for (int mask = 1; mask < low && vh + mask < s.H && nkids < 32;
         mask <<= 1) {
        kids[nkids++] = coll_hier_leader(m, (vh + mask + hr) % s.H, root);
    }
    memset(&in, 0, sizeof(in));
    st = rset_init(&in, K);
    if (st == TD_OK) {
        st = rset_init(&out, K * ((size_t)nkids +
                                  (size_t)m->count[s.my_h]));
        if (st != TD_OK) {
            rset_free(&in);
        }
    }
    if (st != TD_OK) {
        return st;
    }
    for (size_t c = 0; vh != 0 && c < K; c++) {
        size_t off = c * per, len = nbytes - off < per ? nbytes - off : per;
        int parent = coll_hier_leader(m, (vh - (vh & -vh) + hr) % s.H, root);

        st = rset_post(op, &in, st, 0, parent, TAG_X | (uint32_t)c, b + off,
                       len);
    }
    for (size_t c = 0; c < K && st == TD_OK; c++) {
        size_t off = c * per, len = nbytes - off < per ? nbytes - off : per;

        if (vh != 0) {
            coll_req_t *r = &in.r[c];

            st = coll_step_wait(op, &r, 1);
        }
        for (int k = 0; k < nkids; k++) {
            st = rset_post(op, &out, st, 1, kids[k], TAG_X | (uint32_t)c,
                           b + off, len);
        }
        for (int i = 0; i < m->count[s.my_h]; i++) {
            int j = m->members[m->first[s.my_h] + i];

            if (j != s.me) {
                st = rset_post(op, &out, st, 1, j, TAG_DOWN | (uint32_t)c,
                               b + off, len);
            }
        }
    }
    st = rset_wait(op, &in, st);        /* after a failure: the rest (H7) */
    st = rset_wait(op, &out, st);
    rset_free(&in);
    rset_free(&out);
    return st;
}

/* ---- all_gather ------------------------------------------------------------------ */

/* One piece (the whole vector at most a chunk: latency first): whole
 * blocks to the leader, the host's blocks to the other leaders, the whole
 * result to the members, each phase after the other. */
static td_status_t
ag_tp_whole(coll_op_t *op, shape_t *sp, char *o, size_t nbytes)
{
    const shape_t s = *sp;
    const coll_hostmap_t *m = s.m;
    int n = op->g->n;
    rset_t r;
    td_status_t st;

    st = rset_init(&r, 2 * (size_t)n + (size_t)n * (size_t)s.H);
    if (st != TD_OK) {
        return st;
    }
    if (!s.leader) {
        st = rset_post(op, &r, st, 0, s.lead, TAG_DOWN, o,
                       (size_t)n * nbytes);
        st = rset_post(op, &r, st, 1, s.lead, TAG_UP,
                       o + (size_t)s.me * nbytes, nbytes);
        st = rset_wait(op, &r, st);
        rset_free(&r);
        return st;
    }
    /* the other hosts' blocks, from their leaders, straight into place */
    for (int j = 0; j < n; j++) {
        int h = m->host_of[j];

        if (h != s.my_h) {
            st = rset_post(op, &r, st, 0, coll_hier_leader(m, h, -1),
                           TAG_X | (uint32_t)j, o + (size_t)j * nbytes,
                           nbytes);
        }
    }
    {
        rset_t up;

        memset(&up, 0, sizeof(up));
        st = st == TD_OK ? rset_init(&up, (size_t)m->count[s.my_h]) : st;
        for (int i = 0; st == TD_OK && i < m->count[s.my_h]; i++) {
            int j = m->members[m->first[s.my_h] + i];

            if (j != s.me) {
                st = rset_post(op, &up, st, 0, j, TAG_UP,
                               o + (size_t)j * nbytes, nbytes);
            }
        }
        if (up.r != NULL) {
            st = rset_wait(op, &up, st);
            rset_free(&up);
        }
    }
    /* this host's blocks to every other leader */
    for (int k = 1; k < s.H; k++) {
        int h = (s.my_h + k) % s.H;

        for (int i = 0; i < m->count[s.my_h]; i++) {
            int j = m->members[m->first[s.my_h] + i];

            st = rset_post(op, &r, st, 1, coll_hier_leader(m, h, -1),
                           TAG_X | (uint32_t)j, o + (size_t)j * nbytes,
                           nbytes);
        }
    }
    st = rset_wait(op, &r, st);
    for (int i = 0; i < m->count[s.my_h]; i++) {
        int j = m->members[m->first[s.my_h] + i];

        if (j != s.me) {
            st = rset_post(op, &r, st, 1, j, TAG_DOWN, o,
                           (size_t)n * nbytes);
        }
    }
    st = rset_wait(op, &r, st);
    rset_free(&r);
    return st;
}

/* Unit (J, C) (chunk C of rank J's block, at O) to every member of the
 * leader's host but J. */
static td_status_t
ag_tp_down(coll_op_t *op, const shape_t *s, rset_t *r, td_status_t st,
           int j, uint32_t u, const char *o, size_t len)
{
    for (int i = 0; i < s->L; i++) {
        if (i != s->lidx && s->who[i] != j) {
            st = rset_post(op, r, st, 1, s->who[i], TAG_DOWN | u, (void *)o,
                           len);
        }
    }
    return st;
}

/* In units (block j, chunk c), tagged j x K + c (H11): the members send
 * their chunks up at once; the leader sends each unit of its host to the
 * other leaders and to its members as soon as it has it, and each other
 * host's unit to its members as soon as it arrives, one chunk behind its
 * host's (so both are in flight). Every receive is posted first,
 * straight into place. */
static td_status_t
ag_tp_chunks(coll_op_t *op, shape_t *sp, char *o, size_t nbytes)
{
    const shape_t *s = sp;
    const coll_hostmap_t *m = s->m;
    int n = op->g->n;
    size_t K, per = chunking(nbytes, 1, &K), off, len, cap;
    size_t seg = xq_cut(per < nbytes ? per : nbytes, (size_t)n * K, s->H);
    int *rx;                        /* a unit's first step in R */
    rset_t r;
    td_status_t st;

    if ((size_t)n * K > TAG_IDX) {
        return td_error(TD_ERR_INVALID, "coll: all_gather of %zu bytes a "
                        "rank in %d ranks: too many chunks", nbytes, n);
    }
    cap = s->leader ? (size_t)n * K * (1 + (size_t)s->L +
                                      (size_t)s->H * xq_n(seg, per))
                    : (size_t)n * K + K;
    rx = calloc((size_t)n * K + 1, sizeof(*rx));
    if (rx == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: hier: out of memory");
    }
    st = rset_init(&r, cap);
    /* every unit this rank lacks, straight into place: a member's from its
     * leader, the leader's from their member or their host's leader */
    for (int j = 0; j < n && st == TD_OK; j++) {
        int h = m->host_of[j], from;
        uint32_t tag;

        if (j == s->me) {
            continue;
        }
        for (size_t c = 0; c < K && st == TD_OK; c++) {
            uint32_t u = (uint32_t)((size_t)j * K + c);

            piece(c, per, nbytes, &off, &len);
            from = !s->leader ? s->lead : h == s->my_h ? j
                 : coll_hier_leader(m, h, -1);
            tag = !s->leader ? TAG_DOWN : TAG_UP;
            rx[u] = r.n;
            st = s->leader && h != s->my_h
                 ? xq_post(op, &r, st, 0, from, seg, u,
                           o + (size_t)j * nbytes + off, len)
                 : rset_post(op, &r, st, 0, from, tag | u,
                             o + (size_t)j * nbytes + off, len);
        }
    }
    if (!s->leader) {
        for (size_t c = 0; c < K && st == TD_OK; c++) {
            piece(c, per, nbytes, &off, &len);
            st = rset_post(op, &r, st, 1, s->lead,
                           TAG_UP | (uint32_t)((size_t)s->me * K + c),
                           o + (size_t)s->me * nbytes + off, len);
        }
    }
    for (size_t c = 0; s->leader && c <= K && st == TD_OK; c++) {
        /* this host's units of chunk c: to the other leaders, the members */
        for (int i = 0; c < K && i < s->L && st == TD_OK; i++) {
            int j = s->who[i];
            uint32_t u = (uint32_t)((size_t)j * K + c);
            char *b;

            piece(c, per, nbytes, &off, &len);
            b = o + (size_t)j * nbytes + off;
            if (j != s->me) {
                st = xq_wait(op, &r, rx[u], 0, len);   /* (one step) */
            }
            for (int k = 1; k < s->H; k++) {
                st = xq_post(op, &r, st, 1,
                             coll_hier_leader(m, (s->my_h + k) % s->H, -1),
                             seg, u, b, len);
            }
            st = ag_tp_down(op, s, &r, st, j, u, b, len);
        }
        /* the other hosts' units of chunk c - 1, as they arrive */
        for (int j = 0; c > 0 && j < n && st == TD_OK; j++) {
            uint32_t u = (uint32_t)((size_t)j * K + c - 1);

            if (m->host_of[j] == s->my_h) {
                continue;
            }
            piece(c - 1, per, nbytes, &off, &len);
            st = xq_wait(op, &r, rx[u], seg, len);
            st = ag_tp_down(op, s, &r, st, j, u, o + (size_t)j * nbytes + off,
                            len);
        }
    }
    if (r.r != NULL) {
        st = rset_wait(op, &r, st);    /* after a failure: the rest (H7) */
    }
    rset_free(&r);
    free(rx);
    return st;
}

static td_status_t
all_gather_tp(coll_op_t *op, void *out, const void *in, size_t nbytes)
{
    shape_t s;
    char *o = out;
    td_status_t st = shape_of(op, -1, &s);

    if (st != TD_OK) {
        return st;
    }
    if (nbytes > 0) {
        memmove(o + (size_t)s.me * nbytes, in, nbytes);
    }
    if ((size_t)op->g->n * nbytes <= HIER_CHUNK) {
        return ag_tp_whole(op, &s, o, nbytes);
    }
    return ag_tp_chunks(op, &s, o, nbytes);
}

/* ---- reduce_scatter -------------------------------------------------------------- */

/* The blocks in the order their units go (other hosts' first, so the
 * link starts early; then this host's): ORDER[n]. */
static void
rs_order(const shape_t *s, int *order)
{
    const coll_hostmap_t *m = s->m;

    for (int k = 1, q = 0; k <= s->H; k++) {
        int h = (s->my_h + k) % s->H;

        for (int i = 0; i < m->count[h]; i++) {
            order[q++] = m->members[m->first[h] + i];
        }
    }
}

/* One piece (the whole vector at most a chunk: latency first): the
 * members' whole vectors reduced at the leader, the host's sums of the
 * other hosts' blocks to their leaders, each phase after the other. */
static td_status_t
rs_tp_whole(coll_op_t *op, shape_t *sp, void *out, const void *in,
            size_t count)
{
    const shape_t s = *sp;
    const coll_hostmap_t *m = s.m;
    int n = op->g->n, L = s.L;
    size_t bytes = count * op->esize, total = (size_t)n * bytes;
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    char *acc, *tmp, *xr;
    rset_t r;
    td_status_t st = rset_init(&r, (size_t)n * ((size_t)s.H + 1) + 2);

    if (st != TD_OK) {
        return st;
    }
    if (!s.leader) {
        st = rset_post(op, &r, st, 0, s.lead, TAG_DOWN, out, bytes);
        st = rset_post(op, &r, st, 1, s.lead, TAG_UP, (void *)in, total);
        st = rset_wait(op, &r, st);
        rset_free(&r);
        return st;
    }
    /* acc: the host's sum; tmp: one member's vector; xr: the other
     * leaders' parts of this host's blocks, host by host */
    acc = coll_scratch(op->g, 2 * total + (size_t)s.H * (size_t)L * bytes +
                              1);
    if (acc == NULL) {
        rset_free(&r);
        return TD_ERR_NO_MEMORY;
    }
    tmp = acc + total;
    xr = tmp + total;
    if (total > 0) {
        memcpy(acc, in, total);
    }
    for (int i = 0; i < L && st == TD_OK; i++) {
        int j = m->members[m->first[s.my_h] + i];

        if (j != s.me) {
            st = rset_post(op, &r, st, 0, j, TAG_UP, tmp, total);
            st = rset_wait(op, &r, st);
            if (st == TD_OK) {
                coll_reduce_into(acc, tmp, (size_t)n * count, dt, rop);
            }
        }
    }
    /* the other leaders' parts of my host's blocks; mine of theirs */
    for (int h = 0; h < s.H; h++) {
        for (int i = 0; h != s.my_h && i < L; i++) {
            int j = m->members[m->first[s.my_h] + i];

            st = rset_post(op, &r, st, 0, coll_hier_leader(m, h, -1),
                           TAG_X | (uint32_t)j,
                           xr + ((size_t)h * (size_t)L + (size_t)i) * bytes,
                           bytes);
        }
    }
    for (int k = 1; k < s.H; k++) {
        int h = (s.my_h + k) % s.H;

        for (int i = 0; i < m->count[h]; i++) {
            int j = m->members[m->first[h] + i];

            st = rset_post(op, &r, st, 1, coll_hier_leader(m, h, -1),
                           TAG_X | (uint32_t)j, acc + (size_t)j * bytes,
                           bytes);
        }
    }
    st = rset_wait(op, &r, st);
    /* each of my host's blocks is reduced here only (H5) */
    for (int i = 0; i < L && st == TD_OK; i++) {
        int j = m->members[m->first[s.my_h] + i];

        for (int h = 0; h < s.H; h++) {
            if (h != s.my_h) {
                coll_reduce_into(acc + (size_t)j * bytes,
                                 xr + ((size_t)h * (size_t)L + (size_t)i) *
                                 bytes, count, dt, rop);
            }
        }
        if (rop == TD_REDUCE_AVG) {
            coll_divide(acc + (size_t)j * bytes, count, dt, n);  /* H6 */
        }
    }
    for (int i = 0; i < L; i++) {
        int j = m->members[m->first[s.my_h] + i];

        if (j != s.me) {
            st = rset_post(op, &r, st, 1, j, TAG_DOWN,
                           acc + (size_t)j * bytes, bytes);
        }
    }
    st = rset_wait(op, &r, st);
    if (st == TD_OK && bytes > 0) {
        memcpy(out, acc + (size_t)s.me * bytes, bytes);
    }
    rset_free(&r);
    return st;
}

/* Post the members' unit U (block J, chunk C at OFF, LEN elements) into
 * the parity's scratch slots TMP, one a member (the leader). */
static td_status_t
rs_tp_up_post(coll_op_t *op, const shape_t *s, rset_t *up, int j, size_t c,
              size_t K, char *tmp, size_t slot, size_t len)
{
    td_status_t st = TD_OK;

    for (int i = 0; i < s->L; i++) {
        if (i != s->idx) {
            st = rset_post(op, up, st, 0, s->who[i],
                           TAG_UP | (uint32_t)((size_t)j * K + c),
                           tmp + (size_t)i * slot, len);
        }
    }
    return st;
}

/* The host's sum of a unit of LEN elements into A, as one piece makes it
 * (H5): the leader's own input MINE, then its members' parts in host
 * order, member i's in the host segment's slot i (HS) or at PARTS + i x
 * STRIDE; the copy of MINE goes in the first part's pass (reduce.h
 * coll_reduce_to: the same bits, a pass less). */
static void
host_sum(const coll_op_t *op, const shape_t *s, char *a, const char *mine,
         coll_shm_t *hs, const char *parts, size_t stride, size_t len)
{
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    int first = 1;

    for (int i = 0; i < s->L; i++) {
        if (i != s->idx) {
            const void *p = hs != NULL ? (const void *)coll_shm_read(hs, i)
                                       : parts + (size_t)i * stride;

            if (first) {
                coll_reduce_to(a, mine, p, len, dt, rop);
            } else {
                coll_reduce_into(a, p, len, dt, rop);
            }
            first = 0;
        }
    }
    if (first && len > 0) {
        memcpy(a, mine, len * op->esize);      /* a host of one */
    }
}

/* The leader's last step on unit (J, C) of a block of its own host, whose
 * host sum is at A (LEN elements from element OFF of the block): add the
 * other hosts' parts of it in host order (H5), each once its receive on
 * R completes (posted first, in the order host, member, chunk, X's steps
 * a block and a chunk: H14, into XR by host then member, BYTES a block),
 * then divide for AVG (H6). The transport's and the segment's
 * reduce_scatter share it, so both do the same operations in the same
 * order. */
static td_status_t
rs_block_finish(coll_op_t *op, const shape_t *s, const rset_t *r,
                const xq_t *x, const char *xr, size_t bytes, int j, size_t c,
                char *a, size_t off, size_t len)
{
    size_t es = op->esize;
    td_dtype_t dt = (td_dtype_t)op->desc.dtype;
    td_reduce_op_t rop = (td_reduce_op_t)op->desc.op;
    td_status_t st = TD_OK;

    for (int h = 0, i = 0; h < s->H && st == TD_OK; h++) {
        if (h == s->my_h) {
            continue;
        }
        while (s->who[i] != j) {
            i++;
        }
        st = xq_wait(op, r, (int)(((size_t)(h - (h > s->my_h)) *
                                   (size_t)s->L + (size_t)i) * x->pb +
                                  c * x->np), x->seg, len * op->esize);
        if (st == TD_OK) {
            coll_reduce_into(a, xr + ((size_t)h * (size_t)s->L +
                                      (size_t)i) * bytes + off * es,
                             len, dt, rop);
        }
    }
    if (st == TD_OK && rop == TD_REDUCE_AVG) {
        coll_divide(a, len, dt, op->g->n);                /* H6 */
    }
    return st;
}

/* In units (block j, chunk c), tagged j x K + c, in rs_order (H11): the
 * members send every unit of their input up at once; the leader reduces
 * unit u from their scratch slots (the receives of unit u + 1 are posted
 * before, in the other parity's slots) in the same order as one piece
 * (its own input, then the members in host order), sends a unit of
 * another host's block to that host's leader at once, and finishes a
 * unit of its host's block with the other leaders' parts in host order
 * (H5) and sends it down: the same operations on every element as one
 * piece, so bitwise the same result. */
static td_status_t
rs_tp_chunks(coll_op_t *op, shape_t *sp, void *out, const void *in,
             size_t count)
{
    const shape_t *s = sp;
    const coll_hostmap_t *m = s->m;
    int n = op->g->n, L = s->L, H = s->H;
    size_t es = op->esize, bytes = count * es, total = (size_t)n * bytes;
    size_t K, per = chunking(count, es, &K), off, len, nu = (size_t)n * K;
    size_t slot = (per * es + 63) & ~(size_t)63;
    const char *src = in;
    char *acc, *xr, *tmp;
    int *order;
    xq_t x;
    rset_t r, up[2];
    td_status_t st;

    xq_rs(&x, per, K, count, es, nu, H);
    if (nu > TAG_IDX) {
        return td_error(TD_ERR_INVALID, "coll: reduce_scatter of %zu "
                        "elements a rank in %d ranks: too many chunks", count,
                        n);
    }
    order = malloc(sizeof(int) * (size_t)n);
    if (order == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: hier: out of memory");
    }
    rs_order(s, order);
    memset(&r, 0, sizeof(r));
    memset(up, 0, sizeof(up));
    if (!s->leader) {
        st = rset_init(&r, nu + K);
        for (size_t c = 0; c < K && st == TD_OK; c++) {
            piece(c, per, count, &off, &len);
            st = rset_post(op, &r, st, 0, s->lead, TAG_DOWN | (uint32_t)c,
                           (char *)out + off * es, len * es);
        }
        for (size_t u = 0; u < nu && st == TD_OK; u++) {
            int j = order[u / K];

            piece(u % K, per, count, &off, &len);
            st = rset_post(op, &r, st, 1, s->lead,
                           TAG_UP | (uint32_t)((size_t)j * K + u % K),
                           (void *)(src + (size_t)j * bytes + off * es),
                           len * es);
        }
        goto out;
    }
    /* acc: the host's sums; xr: the other leaders' parts of this host's
     * blocks, by host then member; tmp: 2 parities x L slots */
    acc = coll_scratch(op->g, total + (size_t)H * (size_t)L * bytes +
                              2 * (size_t)L * slot + 64);
    if (acc == NULL) {
        free(order);
        return TD_ERR_NO_MEMORY;
    }
    xr = acc + total;
    tmp = xr + (size_t)H * (size_t)L * bytes;
    tmp += (64 - (uintptr_t)tmp % 64) % 64;
    st = rset_init(&r, nu * ((size_t)H + 1) * x.np + 1);
    st = st == TD_OK ? rset_init(&up[0], (size_t)L) : st;
    st = st == TD_OK ? rset_init(&up[1], (size_t)L) : st;
    /* first the other leaders' parts, in the order host, member, chunk */
    for (int h = 0; h < H && st == TD_OK; h++) {
        for (int i = 0; h != s->my_h && i < L; i++) {
            for (size_t c = 0; c < K; c++) {
                piece(c, per, count, &off, &len);
                st = xq_post(op, &r, st, 0, coll_hier_leader(m, h, -1), x.seg,
                             (uint32_t)((size_t)s->who[i] * K + c),
                             xr + ((size_t)h * (size_t)L + (size_t)i) *
                             bytes + off * es, len * es);
            }
        }
    }
    piece(0, per, count, &off, &len);
    st = st == TD_OK ? rs_tp_up_post(op, s, &up[0], order[0], 0, K, tmp,
                                     slot, len * es) : st;
    for (size_t u = 0; u < nu && st == TD_OK; u++) {
        int j = order[u / K];
        size_t c = u % K;
        char *a = acc + (size_t)j * bytes, *t = tmp + (u & 1) * L * slot;

        if (u + 1 < nu) {            /* the next unit's, in the other slots */
            piece((u + 1) % K, per, count, &off, &len);
            st = rs_tp_up_post(op, s, &up[(u + 1) & 1], order[(u + 1) / K],
                               (u + 1) % K, K,
                               tmp + ((u + 1) & 1) * L * slot, slot,
                               len * es);
        }
        st = rset_wait(op, &up[u & 1], st);
        if (st != TD_OK) {
            break;
        }
        /* the host's sum of unit (j, c): as one piece does it */
        piece(c, per, count, &off, &len);
        a += off * es;
        host_sum(op, s, a, src + (size_t)j * bytes + off * es, NULL, t, slot,
                 len);
        if (m->host_of[j] != s->my_h) {
            st = xq_post(op, &r, st, 1, coll_hier_leader(m, m->host_of[j], -1),
                         x.seg, (uint32_t)((size_t)j * K + c), a, len * es);
            continue;
        }
        /* this host's block: the other hosts' parts (H5, H6) */
        st = rs_block_finish(op, s, &r, &x, xr, bytes, j, c, a, off, len);
        if (st == TD_OK && j == s->me) {
            memcpy((char *)out + off * es, a, len * es);
        } else {
            st = rset_post(op, &r, st, 1, j, TAG_DOWN | (uint32_t)c, a,
                           len * es);
        }
    }
    /* after a failure: whatever is still posted (H7) */
    if (up[0].r != NULL) {
        st = rset_wait(op, &up[0], st);
    }
    if (up[1].r != NULL) {
        st = rset_wait(op, &up[1], st);
    }
    rset_free(&up[0]);
    rset_free(&up[1]);
out:
    if (r.r != NULL) {
        st = rset_wait(op, &r, st);
    }
    rset_free(&r);
    free(order);
    return st;
}

static td_status_t
reduce_scatter_tp(coll_op_t *op, void *out, const void *in, size_t count)
{
    shape_t s;
    td_status_t st = shape_of(op, -1, &s);

    if (st != TD_OK) {
        return st;
    }
    if ((size_t)op->g->n * count * op->esize <= HIER_CHUNK) {
        return rs_tp_whole(op, &s, out, in, count);
    }
    return rs_tp_chunks(op, &s, out, in, count);
}

/* ---- barrier --------------------------------------------------------------------- */

static td_status_t
barrier_tp(coll_op_t *op)
{
    shape_t s;
    const coll_hostmap_t *m;
    rset_t r;
    td_status_t st = shape_of(op, -1, &s);

    if (st != TD_OK) {
        return st;
    }
    m = s.m;
    st = rset_init(&r, (size_t)m->count[s.my_h] + 2);
    if (st != TD_OK) {
        return st;
    }
    if (!s.leader) {
        st = rset_post(op, &r, st, 0, s.lead, TAG_DOWN, NULL, 0);
        st = rset_post(op, &r, st, 1, s.lead, TAG_UP, NULL, 0);
        st = rset_wait(op, &r, st);
        rset_free(&r);
        return st;
    }
    for (int i = 0; i < m->count[s.my_h]; i++) {
        int j = m->members[m->first[s.my_h] + i];

        if (j != s.me) {
            st = rset_post(op, &r, st, 0, j, TAG_UP, NULL, 0);
        }
    }
    st = rset_wait(op, &r, st);
    for (int k = 1, round = 0; k < s.H && st == TD_OK; k <<= 1, round++) {
        st = coll_sendrecv(op, coll_hier_leader(m, (s.my_h + k) % s.H, -1),
                           NULL, 0,
                           coll_hier_leader(m, (s.my_h - k + s.H) % s.H, -1),
                           NULL, 0, TAG_BAR | (uint32_t)round);
    }
    for (int i = 0; i < m->count[s.my_h]; i++) {
        int j = m->members[m->first[s.my_h] + i];

        if (j != s.me) {
            st = rset_post(op, &r, st, 1, j, TAG_DOWN, NULL, 0);
        }
    }
    st = rset_wait(op, &r, st);
    rset_free(&r);
    return st;
}

/* ---- through the hosts' segments (H8, H9) ------------------------------------ */

/* The heads' agreement (H8): each head sends its host's answer to every
 * other head; the decision is their AND, the same on every head. */
static td_status_t
heads_agree(coll_op_t *op, void *arg, uint32_t *ok)
{
    const shape_t *s = arg;
    const coll_hostmap_t *m = s->m;
    uint32_t *theirs, mine = *ok;
    rset_t r;
    td_status_t st;

    if (s->H < 2) {
        return TD_OK;
    }
    theirs = calloc((size_t)s->H, sizeof(uint32_t));
    if (theirs == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: hier: out of memory");
    }
    st = rset_init(&r, 2 * (size_t)s->H);
    for (int h = 0; h < s->H && st == TD_OK; h++) {
        if (h != s->my_h) {
            int head = m->members[m->first[h]];

            st = rset_post(op, &r, st, 0, head, TAG_SEG, &theirs[h], 4);
            st = rset_post(op, &r, st, 1, head, TAG_SEG, &mine, 4);
        }
    }
    if (r.r != NULL) {
        st = rset_wait(op, &r, st);
        rset_free(&r);
    }
    for (int h = 0; h < s->H && st == TD_OK; h++) {
        if (h != s->my_h) {
            *ok &= theirs[h] == 1;
        }
    }
    free(theirs);
    return st;
}

/* At the group's first hierarchical call: every host's segment, or none
 * (H8). */
static td_status_t
seg_setup(coll_op_t *op, shape_t *s)
{
    td_group_t *g = op->g;
    int on = 0;
    td_status_t st;

    if (g->hshm_state != SHM_UNTRIED) {
        return TD_OK;
    }
    if (s->L > 1) {
        /* the head is the host's first member, whoever leads the call */
        int idx = 0;

        while (s->who[idx] != s->me) {
            idx++;
        }
        st = coll_shm_host_attach(op, s->who, s->L, idx, heads_agree, s, &on,
                                  &g->hshm);
    } else {
        uint32_t ok = 1;

        st = heads_agree(op, s, &ok);
        on = ok == 1;
    }
    if (st == TD_OK) {
        g->hshm_state = on ? SHM_ON : SHM_OFF;
        if (!on) {
            td_log_debug("coll: group %u: some host has no shared segment: "
                         "hierarchical calls go through the transport "
                         "inside hosts", g->id);
        }
    }
    return st;
}

/* Bytes of a chunk through the segments: a slot of the largest host's
 * segment, so the same on every host (H9). */
static size_t
seg_chunk(const coll_hostmap_t *m)
{
    int most = 1;
    size_t b;

    for (int h = 0; h < m->nhosts; h++) {
        most = m->count[h] > most ? m->count[h] : most;
    }
    b = coll_shm_slot_for(most);
    return b < HIER_CHUNK ? b : HIER_CHUNK;
}

/* One round of the host's segment (none on a host of one). */
static td_status_t
seg_round(coll_op_t *op, td_status_t st)
{
    if (st != TD_OK || op->g->hshm == NULL) {
        return st;
    }
    return coll_shm_host_round(op, op->g->hshm);
}

/* Copy LEN bytes into slot IDX (this rank's) for the next round,
 * counted (H8's test reads the count). */
static void
seg_put(coll_op_t *op, int idx, const void *src, size_t len)
{
    if (len > 0) {
        memcpy(coll_shm_fill(op->g->hshm, idx), src, len);
        op->g->hier_seg_bytes += len;
    }
}

static size_t
pieces(size_t total, size_t per)
{
    size_t k = (total + per - 1) / per;

    return k > 0 ? k : 1;
}

/* H13: all_reduce's chunk through the segments, in elements. */
static size_t
ar_seg_per(const ar_t *a)
{
    size_t per = seg_chunk(a->s.m) / a->es, least = HIER_PIPE_MIN / a->es;

    per = per > 0 ? per : 1;
    if (a->s.H == 2 && a->count < HIER_PIPE * per) {
        size_t q = (a->count + HIER_PIPE - 1) / HIER_PIPE;

        q = q > least ? q : least;
        per = q < per ? q : per;
    }
    return per;
}

/* all_reduce: round k brings the members' chunk k to the leader, which
 * reduces it, starts its exchange and finishes the exchange of chunk
 * k - 1 (two in flight: the link is not idle while the host works),
 * whose result it puts in its slot for round k + 1 (H9). A single chunk
 * is finished at once (lag 1: two rounds, latency first). */
static td_status_t
ar_seg(ar_t *a)
{
    coll_op_t *op = a->op;
    coll_shm_t *hs = op->g->hshm;
    int L = a->s.L, lag;
    td_status_t st = TD_OK;

    a->per = ar_seg_per(a);
    a->K = pieces(a->count, a->per);
    lag = a->K == 1 ? 1 : 2;
    memset(a->xs, 0, sizeof(a->xs));
    if (a->s.leader) {
        a->direct = a->K == 1 || a->s.H == 2;
        a->slot = (a->per * a->es + 63) & ~(size_t)63;
        a->tmp = coll_scratch(op->g, a->slot * (1 + (a->direct ? 2 *
                                     (size_t)a->s.H : 0)) + 64);
        if (a->tmp == NULL) {
            return TD_ERR_NO_MEMORY;
        }
        a->x = a->tmp + a->slot;
        st = ar_x_cut(a);
        /* H10: a faster leader's chunk lands in place, not in the
         * transport's buffer for an unexpected message (pieces go
         * eager across hosts, H12: a copy more per piece) */
        if (st == TD_OK && a->direct && a->s.H > 1) {
            st = ar_x_post_recv(a, 0);
            st = st == TD_OK && a->K > 1 ? ar_x_post_recv(a, 1) : st;
        }
    }
    for (size_t k = 0; k < a->K + (size_t)lag && st == TD_OK; k++) {
        size_t off, len;

        if (!a->s.leader && k < a->K) {
            ar_range(a, k, &off, &len);
            seg_put(op, a->s.idx, a->b + off * a->es, len * a->es);
        }
        st = seg_round(op, st);
        if (st != TD_OK) {
            break;
        }
        if (!a->s.leader) {
            if (k >= (size_t)lag) {
                ar_range(a, k - (size_t)lag, &off, &len);
                if (len > 0) {
                    memcpy(a->b + off * a->es, coll_shm_read(hs, a->s.lidx),
                           len * a->es);
                }
            }
            continue;
        }
        if (k < a->K) {
            /* the host's sum: the leader's, then its members' in order */
            ar_range(a, k, &off, &len);
            for (int i = 0; i < L; i++) {
                if (i != a->s.idx) {
                    coll_reduce_into(a->b + off * a->es, coll_shm_read(hs, i),
                                     len, a->dt, a->rop);
                }
            }
            if (a->direct && a->s.H > 1) {
                st = ar_x_post_send(a, k);      /* receives: H10 */
            }
        }
        if (st == TD_OK && k + 1 >= (size_t)lag &&
            k + 1 - (size_t)lag < a->K) {
            size_t f = k + 1 - (size_t)lag;

            if (a->direct && a->s.H > 1) {
                st = ar_x_finish(a, f);
                /* f's parity is free: chunk f + 2's receives (H10) */
                if (st == TD_OK && f + 2 < a->K) {
                    st = ar_x_post_recv(a, f + 2);
                }
            } else if (a->s.H > 1) {
                st = ar_ring(a, f);
            }
            ar_range(a, f, &off, &len);
            if (st == TD_OK && a->rop == TD_REDUCE_AVG) {
                coll_divide(a->b + off * a->es, len, a->dt, op->g->n);
            }
            if (st == TD_OK && hs != NULL) {
                seg_put(op, a->s.idx, a->b + off * a->es, len * a->es);
            }
        }
    }
    /* after a failure, whatever is still posted (H7) */
    if (a->xs[0].r != NULL) {
        st = rset_wait(op, &a->xs[0], st);
    }
    if (a->xs[1].r != NULL) {
        st = rset_wait(op, &a->xs[1], st);
    }
    rset_free(&a->xs[0]);
    rset_free(&a->xs[1]);
    return st;
}

/* broadcast: the leader forwards chunk c to its child leaders as it
 * arrives and puts it in its slot; one round, the members copy it. */
static td_status_t
bc_seg(coll_op_t *op, shape_t *s, char *b, size_t nbytes)
{
    const coll_hostmap_t *m = s->m;
    coll_shm_t *hs = op->g->hshm;
    int root = op->desc.root, hr, vh, low, nkids = 0, kids[32];
    size_t per = seg_chunk(m), K = pieces(nbytes, per), off, len;
    rset_t in, out;
    td_status_t st = TD_OK;

    if (!s->leader) {
        for (size_t c = 0; c < K && st == TD_OK; c++) {
            st = seg_round(op, st);
            piece(c, per, nbytes, &off, &len);
            if (st == TD_OK && len > 0) {
                memcpy(b + off, coll_shm_read(hs, s->lidx), len);
            }
        }
        return st;
    }
    hr = m->host_of[root];
    vh = (s->my_h - hr + s->H) % s->H;
    low = vh == 0 ? s->H : vh & -vh;
    for (int mask = 1; mask < low && vh + mask < s->H && nkids < 32;
         mask <<= 1) {
        kids[nkids++] = coll_hier_leader(m, (vh + mask + hr) % s->H, root);
    }
    memset(&in, 0, sizeof(in));
    memset(&out, 0, sizeof(out));
    st = rset_init(&in, K);
    st = st == TD_OK ? rset_init(&out, K * ((size_t)nkids + 1)) : st;
    for (size_t c = 0; vh != 0 && c < K; c++) {
        int parent = coll_hier_leader(m, (vh - (vh & -vh) + hr) % s->H, root);

        piece(c, per, nbytes, &off, &len);
        st = rset_post(op, &in, st, 0, parent, TAG_X | (uint32_t)c, b + off,
                       len);
    }
    for (size_t c = 0; c < K && st == TD_OK; c++) {
        piece(c, per, nbytes, &off, &len);
        if (vh != 0) {
            coll_req_t *r = &in.r[c];

            st = coll_step_wait(op, &r, 1);
        }
        for (int k = 0; k < nkids; k++) {
            st = rset_post(op, &out, st, 1, kids[k], TAG_X | (uint32_t)c,
                           b + off, len);
        }
        if (st == TD_OK && hs != NULL) {
            seg_put(op, s->idx, b + off, len);
        }
        st = seg_round(op, st);
    }
    if (in.r != NULL) {
        st = rset_wait(op, &in, st);   /* after a failure: the rest (H7) */
    }
    if (out.r != NULL) {
        st = rset_wait(op, &out, st);
    }
    rset_free(&in);
    rset_free(&out);
    return st;
}

/* barrier: a round (the host has arrived), the leaders' dissemination,
 * a round (they may go). */
static td_status_t
bar_seg(coll_op_t *op, shape_t *s)
{
    const coll_hostmap_t *m = s->m;
    td_status_t st = seg_round(op, TD_OK);

    for (int k = 1, round = 0; s->leader && k < s->H && st == TD_OK;
         k <<= 1, round++) {
        st = coll_sendrecv(op, coll_hier_leader(m, (s->my_h + k) % s->H, -1),
                           NULL, 0,
                           coll_hier_leader(m, (s->my_h - k + s->H) % s->H,
                                            -1),
                           NULL, 0, TAG_BAR | (uint32_t)round);
    }
    return seg_round(op, st);
}

/* all_gather: first the host's blocks, chunk by chunk, one round each:
 * every member puts its chunk c in its slot and copies the others'; the
 * leader sends the host's chunks c to the other leaders at once. Then
 * the other hosts' chunks, each put in the leader's slot as it arrives
 * (all were posted first), one round each (H9). Chunk c of block j
 * travels between leaders as unit j x K + c (H14). */
static td_status_t
ag_seg(coll_op_t *op, shape_t *s, char *o, const void *in, size_t nbytes)
{
    const coll_hostmap_t *m = s->m;
    coll_shm_t *hs = op->g->hshm;
    int n = op->g->n;
    size_t per = seg_chunk(m), K = pieces(nbytes, per), off, len, nr = 0;
    size_t seg = xq_cut(per < nbytes ? per : nbytes, (size_t)n * K, s->H);
    rset_t r;
    int *rx = NULL;                 /* a unit's first step in R */
    td_status_t st;

    if (nbytes > 0) {
        memmove(o + (size_t)s->me * nbytes, in, nbytes);
    }
    if ((size_t)n * K > TAG_IDX) {
        return td_error(TD_ERR_INVALID, "coll: all_gather of %zu bytes a "
                        "rank in %d ranks: too many chunks", nbytes, n);
    }
    memset(&r, 0, sizeof(r));
    st = rset_init(&r, s->leader ? (size_t)n * K * (size_t)s->H *
                                   xq_n(seg, per) : 1);
    if (st == TD_OK && s->leader) {
        rx = calloc((size_t)n * K + 1, sizeof(*rx));
        if (rx == NULL) {
            rset_free(&r);
            return td_error(TD_ERR_NO_MEMORY, "coll: hier: out of memory");
        }
        /* every chunk of the other hosts' blocks, straight into place */
        for (int j = 0; j < n; j++) {
            int h = m->host_of[j];

            for (size_t c = 0; h != s->my_h && c < K; c++) {
                piece(c, per, nbytes, &off, &len);
                rx[nr++] = r.n;
                st = xq_post(op, &r, st, 0, coll_hier_leader(m, h, -1), seg,
                             (uint32_t)((size_t)j * K + c),
                             o + (size_t)j * nbytes + off, len);
            }
        }
    }
    /* this host's blocks */
    for (size_t c = 0; c < K && st == TD_OK; c++) {
        piece(c, per, nbytes, &off, &len);
        if (hs != NULL) {
            seg_put(op, s->idx, o + (size_t)s->me * nbytes + off, len);
        }
        st = seg_round(op, st);
        for (int i = 0; i < s->L && st == TD_OK; i++) {
            if (i != s->idx && len > 0) {
                memcpy(o + (size_t)s->who[i] * nbytes + off,
                       coll_shm_read(hs, i), len);
            }
        }
        for (int k = 1; s->leader && k < s->H; k++) {
            int h = (s->my_h + k) % s->H;

            for (int i = 0; i < s->L; i++) {
                int j = s->who[i];

                st = xq_post(op, &r, st, 1, coll_hier_leader(m, h, -1), seg,
                             (uint32_t)((size_t)j * K + c),
                             o + (size_t)j * nbytes + off, len);
            }
        }
    }
    /* the other hosts' blocks, as they arrive */
    for (int j = 0, q = 0; j < n && st == TD_OK; j++) {
        if (m->host_of[j] == s->my_h) {
            continue;
        }
        for (size_t c = 0; c < K && st == TD_OK; c++, q++) {
            piece(c, per, nbytes, &off, &len);
            if (s->leader) {
                st = xq_wait(op, &r, rx[q], seg, len);
                if (st == TD_OK && hs != NULL) {
                    seg_put(op, s->idx, o + (size_t)j * nbytes + off, len);
                }
            }
            st = seg_round(op, st);
            if (!s->leader && st == TD_OK && len > 0) {
                memcpy(o + (size_t)j * nbytes + off,
                       coll_shm_read(hs, s->lidx), len);
            }
        }
    }
    if (r.r != NULL) {
        st = rset_wait(op, &r, st);    /* after a failure: the rest (H7) */
    }
    rset_free(&r);
    free(rx);
    return st;
}

/* reduce_scatter: one unit (block j, chunk c) a round. Every member puts
 * its input's unit in its slot; the leader reduces it onto its own input
 * into ACC. A unit of another host's block goes to that host's leader at
 * once; a unit of this host's block waits for the other leaders' parts
 * (all posted first), reduced in host order (H5), and goes to its
 * member through the leader's slot in the next round. Units of other
 * hosts first, so the link starts early (H9). */
static td_status_t
rs_seg(coll_op_t *op, shape_t *s, void *out, const void *in, size_t count)
{
    const coll_hostmap_t *m = s->m;
    coll_shm_t *hs = op->g->hshm;
    int n = op->g->n, L = s->L, H = s->H;
    size_t es = op->esize, bytes = count * es, total = (size_t)n * bytes;
    size_t per = seg_chunk(m) / es, K, off, len, nu;
    const char *src = in;
    char *acc = NULL, *xr = NULL;
    int *order, prev = -1;          /* the member whose result is in the
                                     * leader's slot this round */
    size_t prev_off = 0, prev_len = 0;
    xq_t x;
    rset_t r;
    td_status_t st = TD_OK;

    per = per > 0 ? per : 1;
    K = pieces(count, per);
    xq_rs(&x, per, K, count, es, (size_t)n * K, H);
    if ((size_t)n * K > TAG_IDX) {
        return td_error(TD_ERR_INVALID, "coll: reduce_scatter of %zu "
                        "elements a rank in %d ranks: too many chunks", count,
                        n);
    }
    /* the blocks in the order their units go: other hosts', then mine */
    order = malloc(sizeof(int) * (size_t)n);
    if (order == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "coll: hier: out of memory");
    }
    for (int k = 1, q = 0; k <= H; k++) {
        int h = (s->my_h + k) % H;

        for (int i = 0; i < m->count[h]; i++) {
            order[q++] = m->members[m->first[h] + i];
        }
    }
    memset(&r, 0, sizeof(r));
    if (s->leader) {
        /* acc: the host's sums; xr: the other leaders' parts of this
         * host's blocks, by host then member */
        acc = coll_scratch(op->g, total + (size_t)H * (size_t)L * bytes + 1);
        if (acc == NULL) {
            free(order);
            return TD_ERR_NO_MEMORY;
        }
        xr = acc + total;
        st = rset_init(&r, (size_t)n * K * (size_t)H * x.np + 1);
        for (int h = 0; h < H && st == TD_OK; h++) {
            for (int i = 0; h != s->my_h && i < L; i++) {
                int j = s->who[i];

                for (size_t c = 0; c < K; c++) {
                    piece(c, per, count, &off, &len);
                    st = xq_post(op, &r, st, 0, coll_hier_leader(m, h, -1),
                                 x.seg, (uint32_t)((size_t)j * K + c),
                                 xr + ((size_t)h * (size_t)L + (size_t)i) *
                                 bytes + off * es, len * es);
                }
            }
        }
    }
    nu = (size_t)n * K;
    for (size_t u = 0; u <= nu && st == TD_OK; u++) {
        int j = u < nu ? order[u / K] : -1;
        size_t c = u % K;
        char *a;

        piece(c, per, count, &off, &len);
        if (j >= 0 && !s->leader) {
            seg_put(op, s->idx, src + (size_t)j * bytes + off * es, len * es);
        }
        st = seg_round(op, st);
        if (st != TD_OK) {
            break;
        }
        if (prev == s->me && prev_len > 0) {
            memcpy((char *)out + prev_off * es, coll_shm_read(hs, s->lidx),
                   prev_len * es);
        }
        prev = -1;
        if (j < 0) {
            continue;
        }
        if (!s->leader) {
            if (m->host_of[j] == s->my_h && j != s->lead) {
                prev = j;                /* its result: after next round */
                prev_off = off;
                prev_len = len;
            }
            continue;
        }
        /* the leader: the host's sum of unit (j, c) */
        a = acc + (size_t)j * bytes + off * es;
        host_sum(op, s, a, src + (size_t)j * bytes + off * es, hs, NULL, 0,
                 len);
        if (m->host_of[j] != s->my_h) {
            st = xq_post(op, &r, st, 1, coll_hier_leader(m, m->host_of[j], -1),
                         x.seg, (uint32_t)((size_t)j * K + c), a, len * es);
            continue;
        }
        /* this host's block: the other hosts' parts (H5, H6) */
        st = rs_block_finish(op, s, &r, &x, xr, bytes, j, c, a, off, len);
        if (st == TD_OK && j == s->me) {
            if (len > 0) {
                memcpy((char *)out + off * es, a, len * es);
            }
        } else if (st == TD_OK) {
            seg_put(op, s->idx, a, len * es);
        }
    }
    if (r.r != NULL) {
        st = rset_wait(op, &r, st);    /* after a failure: the rest (H7) */
    }
    rset_free(&r);
    free(order);
    return st;
}

/* ---- the entries -------------------------------------------------------------- */

td_status_t
coll_all_reduce_hier(coll_op_t *op, void *buf, size_t count)
{
    ar_t a;
    td_status_t st;

    memset(&a, 0, sizeof(a));
    st = shape_of(op, -1, &a.s);
    st = st == TD_OK ? seg_setup(op, &a.s) : st;
    if (st != TD_OK) {
        return st;
    }
    if (op->g->hshm_state != SHM_ON) {
        return all_reduce_tp(op, buf, count);
    }
    a.op = op;
    a.b = buf;
    a.count = count;
    a.es = op->esize;
    a.dt = (td_dtype_t)op->desc.dtype;
    a.rop = (td_reduce_op_t)op->desc.op;
    return ar_seg(&a);
}

td_status_t
coll_broadcast_hier(coll_op_t *op, void *buf, size_t nbytes)
{
    shape_t s;
    td_status_t st = shape_of(op, op->desc.root, &s);

    st = st == TD_OK ? seg_setup(op, &s) : st;
    if (st != TD_OK) {
        return st;
    }
    return op->g->hshm_state == SHM_ON ? bc_seg(op, &s, buf, nbytes)
                                       : broadcast_tp(op, buf, nbytes);
}

td_status_t
coll_all_gather_hier(coll_op_t *op, void *out, const void *in, size_t nbytes)
{
    shape_t s;
    td_status_t st = shape_of(op, -1, &s);

    st = st == TD_OK ? seg_setup(op, &s) : st;
    if (st != TD_OK) {
        return st;
    }
    return op->g->hshm_state == SHM_ON ? ag_seg(op, &s, out, in, nbytes)
                                       : all_gather_tp(op, out, in, nbytes);
}

td_status_t
coll_reduce_scatter_hier(coll_op_t *op, void *out, const void *in,
                         size_t count)
{
    shape_t s;
    td_status_t st = shape_of(op, -1, &s);

    st = st == TD_OK ? seg_setup(op, &s) : st;
    if (st != TD_OK) {
        return st;
    }
    return op->g->hshm_state == SHM_ON ? rs_seg(op, &s, out, in, count)
                                       : reduce_scatter_tp(op, out, in, count);
}

td_status_t
coll_barrier_hier(coll_op_t *op)
{
    shape_t s;
    td_status_t st = shape_of(op, -1, &s);

    st = st == TD_OK ? seg_setup(op, &s) : st;
    if (st != TD_OK) {
        return st;
    }
    return op->g->hshm_state == SHM_ON ? bar_seg(op, &s) : barrier_tp(op);
}

void
coll_hier_detach(td_group_t *g)
{
    if (g->hshm_state != SHM_UNTRIED) {
        td_log_debug("coll: group %u: hierarchical calls moved %llu bytes "
                     "through this host's segment and %llu bytes to members "
                     "of this host through the transport", g->id,
                     (unsigned long long)g->hier_seg_bytes,
                     (unsigned long long)g->hier_tp_bytes);
    }
    if (g->hier_xp_sent > 0) {
        td_log_debug("coll: group %u: all_reduce's leader exchange sent %llu "
                     "pieces of %zu B to other hosts (H12)", g->id,
                     (unsigned long long)g->hier_xp_sent, g->hier_xp_bytes);
    }
    if (g->hier_xq_sent > 0) {
        td_log_debug("coll: group %u: all_gather's and reduce_scatter's "
                     "leader units sent %llu pieces of %zu B to other hosts "
                     "(H14)", g->id, (unsigned long long)g->hier_xq_sent,
                     g->hier_xq_bytes);
    }
    coll_hostmap_free(g->hosts);
    g->hosts = NULL;
}
