/* test_rdzv: todist-run's restart rounds (tools/rdzv.c), in one process.
 *
 * The plan's codec: a round trip, and every malformed plan rejected (E2).
 * Then agents driven by hand on one loopback store: round 0 closes with
 * every agent (E6); the first failure stops a round and a later one does
 * not replace it (E4); the next round waits for the live agents, drops
 * the one whose heartbeat stopped and names it, and has a fresh token
 * (E3, E6); a node that joins stops the round without using a restart,
 * a failure with no restart left ends the job with its code (E7); a round
 * whose agents are all done ends the job with 0. --nnodes MIN:MAX (E6):
 * with MIN 2 the leader alone forms no round, and once --rdzv-timeout has
 * passed without a second agent it ends the job naming the count; with
 * MAX 2 and three agents, round 0 takes the leader and the lowest other
 * agent only, and the one left out, waiting for round 1, does not stop a
 * round that is full. */
#include "config.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/rdzv.h"
#include "tests/tap.h"

static rdzv_plan_t plan_a, plan_b;

static void
sample(rdzv_plan_t *p)
{
    memset(p, 0, sizeof(*p));
    p->round = 3;
    p->restarts = 1;
    p->world_size = 5;
    p->nnodes = 2;
    memset(p->token, 'a', TD_JOB_TOKEN_HEX);
    p->node[0] = (rdzv_node_t){ 1, 0, 0, 2 };
    p->node[1] = (rdzv_node_t){ 4, 1, 2, 3 };
    snprintf(p->reason, sizeof(p->reason), "lost host h2 (node 1, ranks 2-3)");
}

/* Decode TEXT; 1 when it is rejected with TD_ERR_PROTOCOL. */
static int
rejected(const char *text, size_t len)
{
    return rdzv_plan_decode(text, len, &plan_b) == TD_ERR_PROTOCOL;
}

static void
test_codec(void)
{
    char buf[4096], bad[4096];
    int n;
    const char *tok = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    sample(&plan_a);
    n = rdzv_plan_encode(&plan_a, buf, sizeof(buf));
    ok(n > 0, "a plan encodes (%d bytes)", n);
    is_int(rdzv_plan_decode(buf, (size_t)n, &plan_b), TD_OK,
           "and decodes: %s", td_last_error());
    ok(plan_b.round == 3 && plan_b.restarts == 1 && plan_b.world_size == 5 &&
       plan_b.nnodes == 2 && plan_b.node[1].agent == 4 &&
       plan_b.node[1].first_rank == 2 && plan_b.node[1].nproc == 3 &&
       strcmp(plan_b.token, plan_a.token) == 0 &&
       strcmp(plan_b.reason, plan_a.reason) == 0,
       "the round trip keeps every field");
    ok(rdzv_plan_find(&plan_b, 4) == &plan_b.node[1] &&
       rdzv_plan_find(&plan_b, 2) == NULL, "find by agent id");
    is_int(rdzv_plan_encode(&plan_a, buf, 40), -1,
           "encoding into too small a buffer fails");

    ok(rejected("", 0), "an empty plan is rejected");
    snprintf(bad, sizeof(bad), "todist-plan 2 3 1 5 2 %s\n1 0 0 2\n4 1 2 3\n", tok);
    ok(rejected(bad, strlen(bad)), "another version is rejected");
    snprintf(bad, sizeof(bad), "todist-plan 1 3 1 6 2 %s\n1 0 0 2\n4 1 2 3\n", tok);
    ok(rejected(bad, strlen(bad)) && strstr(td_last_error(), "world 6"),
       "a world that is not the nodes' sum is rejected: %s", td_last_error());
    snprintf(bad, sizeof(bad), "todist-plan 1 3 1 5 2 %s\n4 1 0 2\n1 0 2 3\n", tok);
    ok(rejected(bad, strlen(bad)), "nodes out of order are rejected");
    snprintf(bad, sizeof(bad), "todist-plan 1 3 1 5 2 %s\n1 0 0 2\n4 1 3 3\n", tok);
    ok(rejected(bad, strlen(bad)), "a gap between nodes' ranks is rejected");
    snprintf(bad, sizeof(bad), "todist-plan 1 3 1 5 2 %s\n1 0 0 2\n1 1 2 3\n", tok);
    ok(rejected(bad, strlen(bad)) && strstr(td_last_error(), "twice"),
       "an agent named twice is rejected");
    snprintf(bad, sizeof(bad), "todist-plan 1 3 1 5 2 %.63s\n1 0 0 2\n4 1 2 3\n", tok);
    ok(rejected(bad, strlen(bad)), "a short token is rejected");
    snprintf(bad, sizeof(bad), "todist-plan 1 3 1 5 2 %s\n1 0 0 2\n4 1 2", tok);
    ok(rejected(bad, strlen(bad)), "a truncated node line is rejected");
    snprintf(bad, sizeof(bad), "todist-plan 1 3 1 5 2 %s\n1 0 0 2\n4 1 2 3\nab", tok);
    n = (int)strlen(bad);
    bad[n - 1] = '\0';
    ok(rejected(bad, (size_t)n), "a NUL in the reason is rejected");
    snprintf(bad, sizeof(bad), "todist-plan 1 3 1 5 2000 %s\n", tok);
    ok(rejected(bad, strlen(bad)), "more than RDZV_NODES_MAX nodes is rejected");
}

static rdzv_opts_t
opts(const char *host, int nproc, uint16_t port)
{
    rdzv_opts_t o;

    memset(&o, 0, sizeof(o));
    o.addr = "127.0.0.1";
    o.port = port;
    o.token = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    o.host = host;
    o.nproc = nproc;
    o.min_nodes = 1;
    o.max_nodes = 3;
    o.max_restarts = 1;
    o.liveness = 3;
    o.last_call = 0;
    o.timeout = 60;
    return o;
}

/* Tick the agents R[0..N-1] waiting for ROUND until R[0..N-1] all have
 * its plan or the end (bounded: 30 s). Returns the events. */
static void
wait_all(rdzv_t **r, int n, int round, rdzv_plan_t *p, rdzv_event_t *ev,
         int *code, char (*why)[RDZV_REASON_MAX])
{
    for (int i = 0; i < n; i++) {
        ev[i] = RDZV_WAITING;
    }
    for (int t = 0; t < 1500; t++) {
        int waiting = 0;
        for (int i = 0; i < n; i++) {
            if (ev[i] == RDZV_WAITING &&
                rdzv_wait_plan(r[i], round, &p[i], &ev[i], &code[i], why[i],
                               RDZV_REASON_MAX) != TD_OK) {
                diag("wait_plan: %s", td_last_error());
                return;
            }
            waiting += ev[i] == RDZV_WAITING;
        }
        if (waiting == 0) {
            return;
        }
        poll(NULL, 0, 20);
    }
}

static void
test_rounds(void)
{
    rdzv_opts_t oa = opts("hA", 2, 0), ob, oc, od;
    rdzv_t *a = NULL, *b = NULL, *c = NULL, *d = NULL, *r[3];
    static rdzv_plan_t p[3], p0;
    rdzv_event_t ev[3];
    int code[3], round;
    char why[3][RDZV_REASON_MAX];

    if (rdzv_open(&oa, &a) != TD_OK) {
        diag("open: %s", td_last_error());
        skip(21, "no loopback store");
        return;
    }
    ob = opts("hB", 1, rdzv_port(a));
    oc = opts("hC", 1, rdzv_port(a));
    ok(rdzv_open(&ob, &b) == TD_OK && rdzv_open(&oc, &c) == TD_OK,
       "two more agents meet at the leader's store");
    ok(rdzv_is_leader(a) && !rdzv_is_leader(b) && !rdzv_is_leader(c),
       "the first to listen leads, the others connect");
    rdzv_first_round(c, &round);
    is_int(round, 0, "before any plan, agents join round 0");

    /* round 0: everyone */
    rdzv_join(a, 0); rdzv_join(b, 0); rdzv_join(c, 0);
    r[0] = a; r[1] = b; r[2] = c;
    wait_all(r, 3, 0, p, ev, code, why);
    ok(ev[0] == RDZV_PLAN && ev[1] == RDZV_PLAN && ev[2] == RDZV_PLAN,
       "round 0's plan reaches every agent");
    ok(p[0].nnodes == 3 && p[0].world_size == 4 &&
       p[0].node[0].agent == rdzv_agent(a) && p[0].node[1].first_rank == 2 &&
       p[0].restarts == 0 && !strcmp(p[0].reason, "first round"),
       "round 0: 3 nodes, 4 ranks, the leader is node 0 (reason '%s')",
       p[0].reason);
    ok(!memcmp(&p[0], &p[2], sizeof(p[0])), "every agent reads the same plan");
    p0 = p[0];

    /* B's rank fails, then C's: B's stops the round (E4) */
    rdzv_fail(b, 0, 1, "rank 2 (pid 7) exited with code 1 on host hB");
    rdzv_fail(c, 0, 9, "rank 3 (pid 8) was killed by signal 9 (Killed) on host hC");
    rdzv_watch(a, &p0, &ev[0], &code[0], why[0], RDZV_REASON_MAX);
    ok(ev[0] == RDZV_STOP && code[0] == 1 &&
       strstr(why[0], "rank 2 (pid 7)") != NULL,
       "the first failure stops round 0 (code %d, '%s')", code[0], why[0]);

    /* round 1: C is gone (it never ticks again) */
    rdzv_join(a, 1);
    rdzv_wait_plan(a, 1, &p[0], &ev[0], &code[0], why[0], RDZV_REASON_MAX);
    is_int(ev[0], RDZV_WAITING, "round 1 waits while B and C may still come");
    rdzv_join(b, 1);
    wait_all(r, 2, 1, p, ev, code, why);
    ok(ev[0] == RDZV_PLAN && ev[1] == RDZV_PLAN, "round 1 closes without C");
    ok(p[0].nnodes == 2 && p[0].world_size == 3 && p[0].restarts == 1 &&
       rdzv_plan_find(&p[0], rdzv_agent(c)) == NULL,
       "round 1: 2 nodes, 3 ranks, restart 1 (%d nodes, %d ranks)",
       p[0].nnodes, p[0].world_size);
    like(p[0].reason, "rank 2 \\(pid 7\\) exited with code 1 on host hB; "
         "rank 3 \\(pid 8\\) was killed by signal 9 \\(Killed\\) on host hC; "
         "lost host hC \\(node 2, rank 3\\): no heartbeat for [0-9.]+ s",
         "round 1's reason lists every failure and the lost host");
    ok(strcmp(p[0].token, p0.token) != 0 && td_job_token_valid(p[0].token),
       "round 1 has a fresh token (E3)");
    p0 = p[0];

    /* D joins: the round stops, no restart is used (E7) */
    od = opts("hD", 1, rdzv_port(a));
    ok(rdzv_open(&od, &d) == TD_OK, "a fourth agent arrives");
    rdzv_first_round(d, &round);
    is_int(round, 2, "it joins the round after the last planned");
    rdzv_join(d, 2);
    rdzv_watch(a, &p0, &ev[0], &code[0], why[0], RDZV_REASON_MAX);
    rdzv_watch(b, &p0, &ev[1], &code[1], why[1], RDZV_REASON_MAX);
    ok(ev[0] == RDZV_STOP && ev[1] == RDZV_STOP && code[0] == 0 &&
       !strcmp(why[1], "host hD joined"),
       "a joining node stops round 1 ('%s')", why[1]);
    rdzv_join(a, 2); rdzv_join(b, 2);
    r[2] = d;
    wait_all(r, 3, 2, p, ev, code, why);
    ok(ev[0] == RDZV_PLAN && ev[2] == RDZV_PLAN && p[0].world_size == 4 &&
       p[0].nnodes == 3 && p[0].restarts == 1 &&
       !strcmp(p[0].reason, "joined: host hD"),
       "round 2: 4 ranks on 3 nodes, still restart 1 ('%s')", p[0].reason);
    ok(p[2].node[2].agent == rdzv_agent(d) && p[2].node[2].first_rank == 3,
       "the newcomer is the last node");
    p0 = p[0];

    /* a failure with no restart left ends the job with its code */
    rdzv_fail(d, 2, 3, "rank 3 (pid 9) exited with code 3 on host hD");
    rdzv_join(a, 3); rdzv_join(b, 3); rdzv_join(d, 3);
    wait_all(r, 3, 3, p, ev, code, why);
    ok(ev[0] == RDZV_END && ev[1] == RDZV_END && ev[2] == RDZV_END &&
       code[1] == 3, "no restart left: the job ends with code 3 (%d)",
       code[1]);
    like(why[1], "no restart left \\(--max-restarts 1\\) after: rank 3 "
         "\\(pid 9\\) exited with code 3", "and says why");
    rdzv_close(d);
    rdzv_close(c);
    rdzv_close(b);
    rdzv_close(a);

    /* every agent done: the job ends with 0 */
    oa = opts("hA", 1, 0);
    a = NULL;
    ok(rdzv_open(&oa, &a) == TD_OK, "a job of one node");
    if (a != NULL) {
        rdzv_join(a, 0);
        r[0] = a;
        wait_all(r, 1, 0, p, ev, code, why);
        rdzv_done(a, 0);
        rdzv_watch(a, &p[0], &ev[0], &code[0], why[0], RDZV_REASON_MAX);
        ok(ev[0] == RDZV_END && code[0] == 0,
           "every agent done: the job ends with 0 ('%s')", why[0]);
        rdzv_close(a);
    } else {
        skip(1, "no store");
    }
}

/* --nnodes 2:2 (E6): MIN waited for, up to the timeout; at most MAX. */
static void
test_min_max(void)
{
    rdzv_opts_t oa = opts("hA", 1, 0), ob, oc;
    rdzv_t *a = NULL, *b = NULL, *c = NULL, *r[2];
    static rdzv_plan_t p[3];
    rdzv_event_t ev[3];
    int code[3], waiting = 1;
    char why[3][RDZV_REASON_MAX];

    oa.min_nodes = oa.max_nodes = 2;
    if (rdzv_open(&oa, &a) != TD_OK) {
        diag("open: %s", td_last_error());
        skip(7, "no loopback store");
        return;
    }
    rdzv_join(a, 0);
    for (int t = 0; t < 10 && waiting; t++) {   /* 0.2 s of 60 */
        rdzv_wait_plan(a, 0, &p[0], &ev[0], &code[0], why[0],
                       RDZV_REASON_MAX);
        waiting = ev[0] == RDZV_WAITING;
        poll(NULL, 0, 20);
    }
    ok(waiting, "MIN 2: the leader alone forms no round");
    ob = opts("hB", 1, rdzv_port(a));
    oc = opts("hC", 1, rdzv_port(a));
    ob.min_nodes = ob.max_nodes = oc.min_nodes = oc.max_nodes = 2;
    ok(rdzv_open(&ob, &b) == TD_OK && rdzv_open(&oc, &c) == TD_OK,
       "two more agents arrive");
    rdzv_join(b, 0);
    rdzv_join(c, 0);
    r[0] = a;
    r[1] = b;
    wait_all(r, 2, 0, p, ev, code, why);
    ok(ev[0] == RDZV_PLAN && ev[1] == RDZV_PLAN && p[0].nnodes == 2 &&
       p[0].world_size == 2 && p[0].node[0].agent == rdzv_agent(a) &&
       p[0].node[1].agent == rdzv_agent(b),
       "MAX 2: round 0 takes the leader and the first other agent (%d "
       "nodes)", p[0].nnodes);
    rdzv_wait_plan(c, 0, &p[2], &ev[2], &code[2], why[2], RDZV_REASON_MAX);
    ok(ev[2] == RDZV_PLAN && rdzv_plan_find(&p[2], rdzv_agent(c)) == NULL,
       "the third agent reads the plan, which leaves it out");
    rdzv_join(c, 1);                /* it waits for the next round */
    rdzv_watch(a, &p[0], &ev[0], &code[0], why[0], RDZV_REASON_MAX);
    is_int(ev[0], RDZV_WAITING, "an agent waiting beyond MAX does not stop "
           "the full round");
    rdzv_close(c);
    rdzv_close(b);
    rdzv_close(a);

    /* MIN never reached: the job ends after --rdzv-timeout */
    oa = opts("hA", 1, 0);
    oa.min_nodes = oa.max_nodes = 2;
    oa.timeout = 0.2;
    a = NULL;
    if (rdzv_open(&oa, &a) != TD_OK) {
        skip(2, "no store");
        return;
    }
    rdzv_join(a, 0);
    ev[0] = RDZV_WAITING;
    for (int t = 0; t < 1500 && ev[0] == RDZV_WAITING; t++) {
        rdzv_wait_plan(a, 0, &p[0], &ev[0], &code[0], why[0],
                       RDZV_REASON_MAX);
        poll(NULL, 0, 20);
    }
    ok(ev[0] == RDZV_END && code[0] == 1,
       "MIN 2, one agent: the job ends after the timeout (code %d)", code[0]);
    like(why[0], "only 1 of the 2 nodes needed joined round 0 within 0 s "
         "\\(--rdzv-timeout\\)", "and names the count and the option");
    rdzv_close(a);
}

int
main(void)
{
    plan(43);
    test_codec();
    test_rounds();
    test_min_max();
    return exit_status();
}
