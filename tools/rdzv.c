/* tools/rdzv.c: todist-run's restart rounds across nodes; see rdzv.h for
 * the keys and the invariants E1-E7. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/rdzv.h"
#include "todist/store.h"
#include "base/clock.h"

#define AGENTS_MAX 65536     /* ids the leader tracks */
#define NAME_MAX_  64

typedef struct {
    int64_t hb;              /* last heartbeat value seen */
    double  hb_at;           /* when it last changed (leader's clock) */
    int     info;            /* host name read */
    char    host[NAME_MAX_];
} agent_t;

struct rdzv {
    rdzv_opts_t        o;
    char               addr[256];
    char               token[TD_JOB_TOKEN_HEX + 1];
    char               host[NAME_MAX_];
    td_store_server_t *server;        /* the leader's */
    td_store_t        *st;
    int                k;             /* this agent's id */
    int64_t            hb;
    double             hb_next;
    /* the leader's view */
    agent_t           *ag;            /* ag[k - 1] */
    int                n_agents;
    double             last_arrival;
    int                form_round;    /* the round being formed, -1 */
    double             form_since;
    rdzv_plan_t       *prev;          /* the last plan published */
    int                have_prev;
    int                ended;
};

/* ---- the plan's text form ----------------------------------------------- */

int
rdzv_plan_encode(const rdzv_plan_t *p, char *buf, size_t cap)
{
    size_t n = 0;
    int w;

    w = snprintf(buf, cap, "todist-plan 1 %d %d %d %d %s\n", p->round,
                 p->restarts, p->world_size, p->nnodes, p->token);
    if (w < 0 || (size_t)w >= cap) {
        return -1;
    }
    n = (size_t)w;
    for (int i = 0; i < p->nnodes; i++) {
        w = snprintf(buf + n, cap - n, "%d %d %d %d\n", p->node[i].agent,
                     p->node[i].node_rank, p->node[i].first_rank,
                     p->node[i].nproc);
        if (w < 0 || (size_t)w >= cap - n) {
            return -1;
        }
        n += (size_t)w;
    }
    w = snprintf(buf + n, cap - n, "%s", p->reason);
    if (w < 0 || (size_t)w >= cap - n) {
        return -1;
    }
    return (int)(n + (size_t)w);
}

/* Read a decimal in [min, max] at *s, then the separator SEP. */
static int
take_int(const char **s, const char *end, long min, long max, char sep,
         int *v)
{
    const char *p = *s;
    long x = 0;
    int digits = 0;

    while (p < end && *p >= '0' && *p <= '9' && digits < 10) {
        x = x * 10 + (*p - '0');
        p++;
        digits++;
    }
    if (digits == 0 || p >= end || *p != sep || x < min || x > max) {
        return -1;
    }
    *v = (int)x;
    *s = p + 1;
    return 0;
}

td_status_t
rdzv_plan_decode(const char *buf, size_t len, rdzv_plan_t *p)
{
    static const char magic[] = "todist-plan 1 ";
    const char *s = buf, *end = buf + len;
    int next_rank = 0;

    if (len < sizeof(magic) - 1 || memcmp(buf, magic, sizeof(magic) - 1)) {
        return td_error(TD_ERR_PROTOCOL, "rdzv: a round plan without its "
                        "header (%zu bytes)", len);
    }
    s += sizeof(magic) - 1;
    if (take_int(&s, end, 0, 1 << 30, ' ', &p->round) ||
        take_int(&s, end, 0, 1 << 30, ' ', &p->restarts) ||
        take_int(&s, end, 1, 1 << 24, ' ', &p->world_size) ||
        take_int(&s, end, 1, RDZV_NODES_MAX, ' ', &p->nnodes)) {
        return td_error(TD_ERR_PROTOCOL, "rdzv: a round plan's header is "
                        "malformed");
    }
    if (end - s < TD_JOB_TOKEN_HEX + 1 || s[TD_JOB_TOKEN_HEX] != '\n') {
        return td_error(TD_ERR_PROTOCOL, "rdzv: round %d's plan has no "
                        "token", p->round);
    }
    memcpy(p->token, s, TD_JOB_TOKEN_HEX);
    p->token[TD_JOB_TOKEN_HEX] = '\0';
    if (!td_job_token_valid(p->token)) {
        return td_error(TD_ERR_PROTOCOL, "rdzv: round %d's plan has a "
                        "malformed token", p->round);
    }
    s += TD_JOB_TOKEN_HEX + 1;
    for (int i = 0; i < p->nnodes; i++) {
        rdzv_node_t *n = &p->node[i];
        if (take_int(&s, end, 1, AGENTS_MAX, ' ', &n->agent) ||
            take_int(&s, end, 0, RDZV_NODES_MAX - 1, ' ', &n->node_rank) ||
            take_int(&s, end, 0, 1 << 24, ' ', &n->first_rank) ||
            take_int(&s, end, 1, 1 << 24, '\n', &n->nproc)) {
            return td_error(TD_ERR_PROTOCOL, "rdzv: round %d's plan: node "
                            "line %d is malformed", p->round, i);
        }
        /* E2: node order, contiguous ranks, each agent once */
        if (n->node_rank != i || n->first_rank != next_rank) {
            return td_error(TD_ERR_PROTOCOL, "rdzv: round %d's plan: node "
                            "%d claims node rank %d, first rank %d (want "
                            "%d, %d)", p->round, i, n->node_rank,
                            n->first_rank, i, next_rank);
        }
        for (int j = 0; j < i; j++) {
            if (p->node[j].agent == n->agent) {
                return td_error(TD_ERR_PROTOCOL, "rdzv: round %d's plan "
                                "names agent %d twice", p->round, n->agent);
            }
        }
        next_rank += n->nproc;
        if (next_rank > p->world_size) {
            break;
        }
    }
    if (next_rank != p->world_size) {
        return td_error(TD_ERR_PROTOCOL, "rdzv: round %d's plan: its nodes "
                        "hold %d ranks, its world %d", p->round, next_rank,
                        p->world_size);
    }
    if ((size_t)(end - s) >= sizeof(p->reason)) {
        return td_error(TD_ERR_PROTOCOL, "rdzv: round %d's plan: a reason "
                        "of %zu bytes", p->round, (size_t)(end - s));
    }
    memcpy(p->reason, s, (size_t)(end - s));
    p->reason[end - s] = '\0';
    if (strlen(p->reason) != (size_t)(end - s)) {
        return td_error(TD_ERR_PROTOCOL, "rdzv: round %d's plan: a NUL in "
                        "its reason", p->round);
    }
    return TD_OK;
}

const rdzv_node_t *
rdzv_plan_find(const rdzv_plan_t *p, int agent)
{
    for (int i = 0; i < p->nnodes; i++) {
        if (p->node[i].agent == agent) {
            return &p->node[i];
        }
    }
    return NULL;
}

/* ---- store helpers -------------------------------------------------------- */

static void
keyf(char *key, size_t cap, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(key, cap, fmt, ap);
    va_end(ap);
}

/* KEY's value as text (malloc'ed, NUL-terminated) or *V_P NULL when absent. */
static td_status_t
get_opt(rdzv_t *r, const char *key, char **v_p, size_t *len_p)
{
    void *v = NULL;
    size_t len = 0;
    td_status_t status = td_store_get(r->st, key, 0, &v, &len);

    if (status == TD_ERR_NOT_FOUND) {
        td_error_clear();
        *v_p = NULL;
        return TD_OK;
    }
    if (status != TD_OK) {
        return status;
    }
    *v_p = v;
    if (len_p != NULL) {
        *len_p = len;
    }
    return TD_OK;
}

static td_status_t
exists(rdzv_t *r, const char *key, int *yes)
{
    char *v = NULL;
    td_status_t status = get_opt(r, key, &v, NULL);

    *yes = status == TD_OK && v != NULL;
    free(v);
    return status;
}

static td_status_t
counter(rdzv_t *r, const char *key, int64_t *v)
{
    return td_store_add(r->st, key, 0, v);
}

/* "CODE REST": the code and where the rest begins. */
static int
parse_code(const char *v, int *code, const char **rest)
{
    char *e;
    long c = strtol(v, &e, 10);

    if (e == v || *e != ' ' || c < 0 || c > 255) {
        return -1;
    }
    *code = (int)c;
    *rest = e + 1;
    return 0;
}

static td_status_t
heartbeat(rdzv_t *r)
{
    double now = td_now_s();
    double period = r->o.liveness > 0 ? r->o.liveness / 6 : 1.0;
    char key[64];

    if (now < r->hb_next) {
        return TD_OK;
    }
    r->hb_next = now + (period > 0.05 ? period : 0.05);
    keyf(key, sizeof(key), "e/hb/%d", r->k);
    return td_store_add(r->st, key, 1, &r->hb);
}

/* ---- open / close ------------------------------------------------------- */

td_status_t
rdzv_open(const rdzv_opts_t *o, rdzv_t **r_p)
{
    rdzv_t *r = calloc(1, sizeof(*r));
    td_status_t status;
    int64_t k;
    char key[64], val[128];

    if (r == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "rdzv: out of memory");
    }
    r->o = *o;
    snprintf(r->addr, sizeof(r->addr), "%s", o->addr);
    snprintf(r->token, sizeof(r->token), "%s", o->token ? o->token : "");
    snprintf(r->host, sizeof(r->host), "%s", o->host);
    r->o.addr = r->addr;
    r->o.token = r->token;
    r->o.host = r->host;
    r->form_round = -1;
    /* Whoever can listen on the address leads (the address is its own and
     * nobody serves there yet); everyone else connects. */
    if (td_store_server_start(r->addr, o->port, r->token, &r->server) !=
        TD_OK) {
        td_error_clear();
        r->server = NULL;
    }
    if (r->server != NULL) {
        r->o.port = td_store_server_port(r->server);   /* PORT 0: any */
    }
    status = td_store_connect(r->addr, r->o.port, r->token, o->timeout,
                              &r->st);
    if (status != TD_OK) {
        goto err;
    }
    status = td_store_add(r->st, "e/agents", 1, &k);
    if (status != TD_OK) {
        goto err;
    }
    if (k < 1 || k > AGENTS_MAX) {
        status = td_error(TD_ERR_RANGE, "rdzv: agent id %lld: more than %d "
                          "agents joined this job", (long long)k, AGENTS_MAX);
        goto err;
    }
    r->k = (int)k;
    keyf(key, sizeof(key), "e/agent/%d", r->k);
    snprintf(val, sizeof(val), "%s %d", r->host, o->nproc);
    status = td_store_set(r->st, key, val, strlen(val));
    if (status == TD_OK) {
        status = heartbeat(r);
    }
    if (status != TD_OK) {
        goto err;
    }
    if (r->server != NULL) {
        r->prev = calloc(1, sizeof(*r->prev));
        if (r->prev == NULL) {
            status = td_error(TD_ERR_NO_MEMORY, "rdzv: out of memory");
            goto err;
        }
    }
    *r_p = r;
    return TD_OK;

err:
    td_store_close(r->st);
    td_store_server_stop(r->server);
    free(r);
    return status;
}

int rdzv_is_leader(const rdzv_t *r) { return r->server != NULL; }
uint16_t rdzv_port(const rdzv_t *r) { return r->o.port; }
int rdzv_agent(const rdzv_t *r) { return r->k; }

td_status_t
rdzv_first_round(rdzv_t *r, int *round_p)
{
    char *v;
    td_status_t status = get_opt(r, "e/round", &v, NULL);

    if (status != TD_OK) {
        return status;
    }
    *round_p = v != NULL ? atoi(v) + 1 : 0;
    free(v);
    return TD_OK;
}

td_status_t
rdzv_join(rdzv_t *r, int round)
{
    char key[64], val[32];
    int64_t n;
    td_status_t status;

    keyf(key, sizeof(key), "e/r/%d/in/%d", round, r->k);
    snprintf(val, sizeof(val), "%d", r->o.nproc);
    status = td_store_set(r->st, key, val, strlen(val));
    if (status == TD_OK) {
        keyf(key, sizeof(key), "e/r/%d/n", round);
        status = td_store_add(r->st, key, 1, &n);
    }
    return status;
}

/* ---- the leader's view of the agents ------------------------------------ */

static td_status_t
agents_refresh(rdzv_t *r)
{
    double now = td_now_s();
    int64_t n;
    td_status_t status = counter(r, "e/agents", &n);
    char key[64], *v;

    if (status != TD_OK) {
        return status;
    }
    if (n > AGENTS_MAX) {
        n = AGENTS_MAX;
    }
    if (n > r->n_agents) {
        agent_t *ag = realloc(r->ag, (size_t)n * sizeof(*ag));
        if (ag == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "rdzv: out of memory");
        }
        for (int i = r->n_agents; i < n; i++) {
            ag[i] = (agent_t){ .hb = -1, .hb_at = now };
            snprintf(ag[i].host, sizeof(ag[i].host), "agent %d", i + 1);
        }
        r->ag = ag;
        r->n_agents = (int)n;
        r->last_arrival = now;
    }
    for (int i = 0; i < r->n_agents; i++) {
        agent_t *a = &r->ag[i];
        if (i + 1 == r->k) {
            a->hb_at = now;
            snprintf(a->host, sizeof(a->host), "%s", r->host);
            a->info = 1;
            continue;
        }
        keyf(key, sizeof(key), "e/hb/%d", i + 1);
        status = get_opt(r, key, &v, NULL);
        if (status != TD_OK) {
            return status;
        }
        if (v != NULL && strtoll(v, NULL, 10) != a->hb) {
            a->hb = strtoll(v, NULL, 10);
            a->hb_at = now;
        }
        free(v);
        if (!a->info) {
            keyf(key, sizeof(key), "e/agent/%d", i + 1);
            status = get_opt(r, key, &v, NULL);
            if (status != TD_OK) {
                return status;
            }
            if (v != NULL) {
                sscanf(v, "%63s", a->host);
                a->info = 1;
            }
            free(v);
        }
    }
    return TD_OK;
}

static int
agent_alive(const rdzv_t *r, int k)
{
    return k == r->k || r->o.liveness <= 0 ||
           td_now_s() - r->ag[k - 1].hb_at <= r->o.liveness;
}

static const char *
agent_host(const rdzv_t *r, int k)
{
    return k >= 1 && k <= r->n_agents ? r->ag[k - 1].host : "?";
}

/* "host H (node N, ranks A-B)" */
static void
node_name(const rdzv_t *r, const rdzv_node_t *n, char *buf, size_t cap)
{
    if (n->nproc == 1) {
        snprintf(buf, cap, "host %s (node %d, rank %d)", agent_host(r, n->agent),
                 n->node_rank, n->first_rank);
    } else {
        snprintf(buf, cap, "host %s (node %d, ranks %d-%d)",
                 agent_host(r, n->agent), n->node_rank, n->first_rank,
                 n->first_rank + n->nproc - 1);
    }
}

static void
append(char *buf, size_t cap, const char *fmt, ...)
{
    size_t n = strlen(buf);
    va_list ap;

    if (n + 1 >= cap) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

td_status_t
rdzv_end(rdzv_t *r, int code, const char *reason)
{
    char val[2 * RDZV_REASON_MAX];

    r->ended = 1;
    snprintf(val, sizeof(val), "%d %s", code, reason);
    return td_store_set(r->st, "e/end", val, strlen(val));
}

/* The leader: close ROUND if E6 allows, writing its plan. */
static td_status_t
form(rdzv_t *r, int round)
{
    double now = td_now_s();
    char key[64], *v, why[RDZV_REASON_MAX] = "";
    int *joined = NULL, *nproc = NULL, nj = 0, nlive = 0, code = 1;
    int kind_fail = 0;
    rdzv_plan_t *p = NULL;
    td_status_t status;

    if (r->have_prev && r->prev->round == round) {
        return TD_OK;           /* E1: once per round */
    }
    if (r->form_round != round) {
        r->form_round = round;
        r->form_since = now;
    }
    status = agents_refresh(r);
    if (status != TD_OK) {
        return status;
    }
    /* E7: what stopped the previous round decides whether there is one */
    if (round > 0) {
        const char *rest = "";
        keyf(key, sizeof(key), "e/r/%d/stop", round - 1);
        status = get_opt(r, key, &v, NULL);
        if (status != TD_OK) {
            return status;
        }
        if (v != NULL && parse_code(v, &code, &rest) == 0) {
            kind_fail = strncmp(rest, "fail ", 5) == 0;
            if (strncmp(rest, "abort ", 6) == 0) {
                status = rdzv_end(r, code, rest + 6);
                free(v);
                return status;
            }
            snprintf(why, sizeof(why), "%s", strchr(rest, ' ') ?
                     strchr(rest, ' ') + 1 : rest);
        }
        free(v);
        if (kind_fail && r->have_prev &&
            r->prev->restarts >= r->o.max_restarts) {
            char msg[RDZV_REASON_MAX + 64];
            snprintf(msg, sizeof(msg), "no restart left (--max-restarts %d) "
                     "after: %s", r->o.max_restarts, why);
            return rdzv_end(r, code != 0 ? code : 1, msg);
        }
    }
    joined = calloc((size_t)r->n_agents + 1, sizeof(*joined));
    nproc = calloc((size_t)r->n_agents + 1, sizeof(*nproc));
    if (joined == NULL || nproc == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "rdzv: out of memory");
        goto out;
    }
    for (int k = 1; k <= r->n_agents; k++) {
        int alive = agent_alive(r, k);
        nlive += alive;
        keyf(key, sizeof(key), "e/r/%d/in/%d", round, k);
        status = get_opt(r, key, &v, NULL);
        if (status != TD_OK) {
            goto out;
        }
        if (v != NULL && alive) {
            nproc[k] = atoi(v);
            joined[k] = nproc[k] >= 1 && nproc[k] <= (1 << 24);
            nj += joined[k];
        }
        free(v);
    }
    if (!joined[r->k]) {     /* the leader joins before it forms */
        goto out;
    }
    if (nj < r->o.min_nodes) {
        if (now - r->form_since > r->o.timeout) {
            char msg[256];
            snprintf(msg, sizeof(msg), "only %d of the %d nodes needed joined "
                     "round %d within %.0f s (--rdzv-timeout)", nj,
                     r->o.min_nodes, round, r->o.timeout);
            status = rdzv_end(r, 1, msg);
        }
        goto out;
    }
    if (nj < r->o.max_nodes &&
        (nj < nlive ||
         (round == 0 && now - r->last_arrival < r->o.last_call))) {
        goto out;       /* E6: wait for the live ones, or the last call */
    }

    /* Close: the leader first, then by agent id, at most MAX. */
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "rdzv: out of memory");
        goto out;
    }
    p->round = round;
    p->restarts = round == 0 || !r->have_prev ? 0
                  : r->prev->restarts + kind_fail;
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 1; k <= r->n_agents && p->nnodes < r->o.max_nodes; k++) {
            if (!joined[k] || (pass == 0) != (k == r->k)) {
                continue;
            }
            if (p->world_size + (int64_t)nproc[k] > (1 << 24)) {
                break;
            }
            p->node[p->nnodes] = (rdzv_node_t){ k, p->nnodes, p->world_size,
                                                nproc[k] };
            p->world_size += nproc[k];
            p->nnodes++;
        }
    }
    status = td_job_token_make(p->token, sizeof(p->token));
    if (status != TD_OK) {
        goto out;
    }
    /* The reason: every node's failure (else what stopped the round),
     * then who was lost, who left and who came. */
    if (round == 0) {
        snprintf(p->reason, sizeof(p->reason), "first round");
    }
    for (int i = 0; round > 0 && r->have_prev && i < r->prev->nnodes; i++) {
        keyf(key, sizeof(key), "e/r/%d/fail/%d", round - 1,
             r->prev->node[i].agent);
        status = get_opt(r, key, &v, NULL);
        if (status != TD_OK) {
            goto out;
        }
        if (v != NULL) {
            append(p->reason, sizeof(p->reason), "%s%s",
                   p->reason[0] ? "; " : "", v);
        }
        free(v);
    }
    for (int i = 0; r->have_prev && i < r->prev->nnodes; i++) {
        const rdzv_node_t *n = &r->prev->node[i];
        char name[160];
        if (rdzv_plan_find(p, n->agent) != NULL) {
            continue;
        }
        node_name(r, n, name, sizeof(name));
        if (!agent_alive(r, n->agent)) {
            append(p->reason, sizeof(p->reason), "%slost %s: no heartbeat "
                   "for %.1f s", p->reason[0] ? "; " : "", name,
                   now - r->ag[n->agent - 1].hb_at);
        } else {
            append(p->reason, sizeof(p->reason), "%sleft: %s",
                   p->reason[0] ? "; " : "", name);
        }
    }
    for (int i = 0; round > 0 && i < p->nnodes; i++) {
        if (!r->have_prev ||
            rdzv_plan_find(r->prev, p->node[i].agent) == NULL) {
            append(p->reason, sizeof(p->reason), "%sjoined: host %s",
                   p->reason[0] ? "; " : "", agent_host(r, p->node[i].agent));
        }
    }
    if (p->reason[0] == '\0') {
        snprintf(p->reason, sizeof(p->reason), "restart");
    }
    {
        char *buf = malloc(RDZV_NODES_MAX * 48 + RDZV_REASON_MAX + 256);
        int n;
        if (buf == NULL) {
            status = td_error(TD_ERR_NO_MEMORY, "rdzv: out of memory");
            goto out;
        }
        n = rdzv_plan_encode(p, buf, RDZV_NODES_MAX * 48 + RDZV_REASON_MAX +
                             256);
        keyf(key, sizeof(key), "e/r/%d/plan", round);
        status = n < 0 ? td_error(TD_ERR_RANGE, "rdzv: round %d's plan does "
                                  "not fit", round)
                       : td_store_set(r->st, key, buf, (size_t)n);
        free(buf);
        if (status == TD_OK) {
            char rs[32];
            snprintf(rs, sizeof(rs), "%d", round);
            status = td_store_set(r->st, "e/round", rs, strlen(rs));
        }
    }
    if (status == TD_OK) {
        *r->prev = *p;
        r->have_prev = 1;
    }
out:
    free(p);
    free(joined);
    free(nproc);
    return status;
}

/* e/end, if set: END with its code and reason. */
static td_status_t
check_end(rdzv_t *r, rdzv_event_t *ev, int *code, char *reason, size_t cap)
{
    char *v;
    const char *rest;
    td_status_t status = get_opt(r, "e/end", &v, NULL);

    if (status != TD_OK || v == NULL) {
        return status;
    }
    if (parse_code(v, code, &rest) != 0) {
        free(v);
        return td_error(TD_ERR_PROTOCOL, "rdzv: a malformed end mark");
    }
    snprintf(reason, cap, "%s", rest);
    *ev = RDZV_END;
    free(v);
    return TD_OK;
}

td_status_t
rdzv_wait_plan(rdzv_t *r, int round, rdzv_plan_t *plan, rdzv_event_t *ev,
               int *code, char *reason, size_t cap)
{
    char key[64], *v;
    size_t len = 0;
    td_status_t status = heartbeat(r);

    *ev = RDZV_WAITING;
    if (status == TD_OK && r->server != NULL && !r->ended) {
        status = form(r, round);
    }
    if (status == TD_OK) {
        status = check_end(r, ev, code, reason, cap);
    }
    if (status != TD_OK || *ev != RDZV_WAITING) {
        return status;
    }
    keyf(key, sizeof(key), "e/r/%d/plan", round);
    status = get_opt(r, key, &v, &len);
    if (status != TD_OK || v == NULL) {
        return status;
    }
    status = rdzv_plan_decode(v, len, plan);
    free(v);
    if (status == TD_OK && plan->round != round) {
        status = td_error(TD_ERR_PROTOCOL, "rdzv: round %d's key holds round "
                          "%d's plan", round, plan->round);
    }
    if (status == TD_OK) {
        *ev = RDZV_PLAN;
    }
    return status;
}

td_status_t
rdzv_stop(rdzv_t *r, int round, int code, const char *kind,
          const char *reason)
{
    char key[64], val[RDZV_REASON_MAX + 32];
    void *now = NULL;
    size_t len;
    td_status_t status;

    keyf(key, sizeof(key), "e/r/%d/stop", round);
    snprintf(val, sizeof(val), "%d %s %s", code, kind, reason);
    status = td_store_compare_set(r->st, key, NULL, 0, val, strlen(val), &now,
                                  &len);
    free(now);
    return status;
}

td_status_t
rdzv_fail(rdzv_t *r, int round, int code, const char *why)
{
    char key[64];
    td_status_t status;

    keyf(key, sizeof(key), "e/r/%d/fail/%d", round, r->k);
    status = td_store_set(r->st, key, why, strlen(why));
    if (status == TD_OK) {
        status = rdzv_stop(r, round, code, "fail", why);
    }
    return status;
}

td_status_t
rdzv_done(rdzv_t *r, int round)
{
    char key[64];

    keyf(key, sizeof(key), "e/r/%d/done/%d", round, r->k);
    return td_store_set(r->st, key, "", 0);
}

/* The leader, while round P runs: lost members, joiners, the end. */
static td_status_t
lead(rdzv_t *r, const rdzv_plan_t *p, rdzv_event_t *ev, int *code,
     char *reason, size_t cap)
{
    char key[64], name[160], msg[RDZV_REASON_MAX];
    int stopped = 0, done = 0;
    int64_t waiting;
    td_status_t status = agents_refresh(r);

    keyf(key, sizeof(key), "e/r/%d/stop", p->round);
    if (status == TD_OK) {
        status = exists(r, key, &stopped);
    }
    if (status != TD_OK || stopped) {
        return status;
    }
    for (int i = 0; i < p->nnodes; i++) {
        const rdzv_node_t *n = &p->node[i];
        int d = 0;
        if (!agent_alive(r, n->agent)) {
            node_name(r, n, name, sizeof(name));
            snprintf(msg, sizeof(msg), "lost %s: no heartbeat for %.1f s "
                     "(TODIST_LIVENESS=%g)", name,
                     td_now_s() - r->ag[n->agent - 1].hb_at, r->o.liveness);
            return rdzv_stop(r, p->round, 1, "fail", msg);
        }
        keyf(key, sizeof(key), "e/r/%d/done/%d", p->round, n->agent);
        status = exists(r, key, &d);
        if (status != TD_OK) {
            return status;
        }
        done += d;
    }
    if (done == p->nnodes) {
        status = rdzv_end(r, 0, "every rank exited 0");
        if (status == TD_OK) {
            status = check_end(r, ev, code, reason, cap);
        }
        return status;
    }
    keyf(key, sizeof(key), "e/r/%d/n", p->round + 1);
    status = counter(r, key, &waiting);
    if (status != TD_OK || waiting == 0 || p->nnodes >= r->o.max_nodes) {
        return status;
    }
    for (int k = 1; k <= r->n_agents; k++) {
        int in;
        if (rdzv_plan_find(p, k) != NULL || !agent_alive(r, k)) {
            continue;
        }
        keyf(key, sizeof(key), "e/r/%d/in/%d", p->round + 1, k);
        status = exists(r, key, &in);
        if (status != TD_OK) {
            return status;
        }
        if (in) {
            snprintf(msg, sizeof(msg), "host %s joined", agent_host(r, k));
            return rdzv_stop(r, p->round, 0, "join", msg);
        }
    }
    return TD_OK;
}

td_status_t
rdzv_watch(rdzv_t *r, const rdzv_plan_t *p, rdzv_event_t *ev, int *code,
           char *reason, size_t cap)
{
    char key[64], *v;
    const char *rest;
    td_status_t status = heartbeat(r);

    *ev = RDZV_WAITING;
    if (status == TD_OK && r->server != NULL && !r->ended) {
        status = lead(r, p, ev, code, reason, cap);
    }
    if (status == TD_OK && *ev == RDZV_WAITING) {
        status = check_end(r, ev, code, reason, cap);
    }
    if (status != TD_OK || *ev != RDZV_WAITING) {
        return status;
    }
    keyf(key, sizeof(key), "e/r/%d/stop", p->round);
    status = get_opt(r, key, &v, NULL);
    if (status != TD_OK || v == NULL) {
        return status;
    }
    if (parse_code(v, code, &rest) != 0) {
        free(v);
        return td_error(TD_ERR_PROTOCOL, "rdzv: round %d's stop mark is "
                        "malformed", p->round);
    }
    snprintf(reason, cap, "%s", strchr(rest, ' ') ? strchr(rest, ' ') + 1
                                                  : rest);
    *ev = RDZV_STOP;
    free(v);
    return TD_OK;
}

void
rdzv_close(rdzv_t *r)
{
    int64_t n;

    if (r == NULL) {
        return;
    }
    if (r->server == NULL) {
        td_store_add(r->st, "e/bye", 1, &n);
    } else {
        /* Serve until every live agent has seen the end (bounded: a dead
         * one stops counting once its heartbeat is stale). */
        double until = td_now_s() + (r->o.liveness > 0 ? r->o.liveness : 3) +
                       2;
        while (td_now_s() < until) {
            int live = 0;
            if (agents_refresh(r) != TD_OK ||
                counter(r, "e/bye", &n) != TD_OK) {
                break;
            }
            for (int k = 1; k <= r->n_agents; k++) {
                live += k != r->k && agent_alive(r, k);
            }
            if (n >= live) {
                break;
            }
            poll(NULL, 0, 50);
        }
    }
    td_store_close(r->st);
    td_store_server_stop(r->server);
    free(r->ag);
    free(r->prev);
    free(r);
}
