/* Slurm hostlist expressions and tasks-per-node strings. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <todist/world.h>
#include "tests/tap.h"

/* Expand EXPR and join the hosts with spaces, or return the error text. */
static const char *
expand(const char *expr)
{
    static char out[4096];
    char **hosts;
    size_t n;

    if (td_hostlist_expand(expr, 1000, &hosts, &n) != TD_OK) {
        snprintf(out, sizeof(out), "ERROR %s", td_last_error());
        return out;
    }
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        strcat(out, i ? " " : "");
        strcat(out, hosts[i]);
    }
    td_hostlist_free(hosts, n);
    return out;
}

static const char *
tpn(const char *expr)
{
    static char out[1024];
    int *c;
    size_t n;

    if (td_tasks_per_node_parse(expr, &c, &n) != TD_OK) {
        snprintf(out, sizeof(out), "ERROR %s", td_last_error());
        return out;
    }
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%d",
                 i ? " " : "", c[i]);
    }
    free(c);
    return out;
}

int
main(void)
{
    char first[64];

    plan(28);
    is_str(expand("node1"), "node1", "plain name");
    is_str(expand("a,b,c"), "a b c", "comma list");
    is_str(expand("n[1-3]"), "n1 n2 n3", "bracket range");
    is_str(expand("gpu[001-003,015]"), "gpu001 gpu002 gpu003 gpu015",
           "zero padding kept, range and single");
    is_str(expand("rack[1-2]-n[01-02]"),
           "rack1-n01 rack1-n02 rack2-n01 rack2-n02",
           "two bracket groups, first outermost");
    is_str(expand("x[8-10]"), "x8 x9 x10", "width grows past padding");
    is_str(expand("a[1-2],b,c[5]"), "a1 a2 b c5", "mixed list");
    is_str(expand("n[09-11]"), "n09 n10 n11", "padded range crossing digits");
    like(expand("n[1-3"), "unclosed '\\[' in 'n\\[1-3'", "unclosed bracket");
    like(expand("n[3-1]"), "range 3-1 is reversed in 'n\\[3-1\\]' at position 2",
         "reversed range names position");
    like(expand("n[a-b]"), "expected a number in 'n\\[a-b\\]' at position 2",
         "non-numeric range");
    like(expand("n1]"), "unmatched '\\]' in 'n1\\]' at position 2",
         "unmatched close");
    like(expand("a,,b"), "empty host name in 'a,,b' at position 2",
         "empty item");
    like(expand(""), "empty expression", "empty expression");
    like(expand("n[1-2,]"), "empty range", "trailing comma in brackets");
    like(expand("n[]"), "empty brackets|expected a number", "empty brackets");
    like(expand("n[[1]]"), "nested", "nested brackets");
    like(expand("n[1-100000]"), "more than 1000 hosts", "expansion bounded");
    like(expand("a b"), "whitespace", "whitespace rejected");
    is_int(td_hostlist_first("gpu[007-009],cpu1", first, sizeof(first)), TD_OK,
           "first host resolves");
    is_str(first, "gpu007", "first host of a range");

    is_str(tpn("4"), "4", "one node");
    is_str(tpn("2(x3),1"), "2 2 2 1", "compressed repeat");
    is_str(tpn("1,3(x2),2"), "1 3 3 2", "mixed");
    like(tpn("2(x0)"), "cannot parse '2\\(x0\\)' at position 2", "zero repeat");
    like(tpn("2(3)"), "cannot parse", "missing x");
    like(tpn("2,"), "cannot parse '2,'", "trailing comma");
    like(tpn("a"), "cannot parse 'a' at position 0", "non-numeric");
    return exit_status();
}
