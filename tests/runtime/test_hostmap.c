/* test_hostmap: host ids (runtime/hostmap.h) and their place in front of a
 * published worker address: equal only for one boot id and PID namespace,
 * unknown (0) without a boot id, a round trip through pack and unpack
 * (network addresses included), and every malformed value refused naming
 * the rank. Across real hosts,
 * tests/hosts/test_hosts.sh. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"
#include "runtime/hostmap.h"

int
main(void)
{
    const char *b1 = "d62b66f9-cb51-41b2-9f8a-a281353ebc40";
    const char *b2 = "8683d8fe-89fe-401a-a51e-5789bb77ca50";
    uint8_t ucx[40], bad[64];
    void *v = NULL;
    size_t len = 0, alen = 0;
    const void *a = NULL;
    uint64_t host = 0;
    char name[HOSTMAP_NAME_MAX];
    char longname[200];
    hostmap_ips_t ips = { 0 }, got;

    plan(25);
    ok(hostmap_id(b1, 4, 4026531836u) == hostmap_id(b1, 4, 4026531836u),
       "one boot id and PID namespace: one host");
    ok(hostmap_id(b1, 4, 4026531836u) != hostmap_id(b2, 4, 4026531836u),
       "another boot id: another host");
    ok(hostmap_id(b1, 4, 4026531836u) != hostmap_id(b1, 4, 4026532100u),
       "another PID namespace of one kernel: another host");
    ok(hostmap_id(b1, 4, 1) != hostmap_id(b1, 5, 1),
       "another namespace device: another host");
    is_int(hostmap_id("", 4, 1), 0, "no boot id: unknown (0)");
    is_int(hostmap_id(NULL, 4, 1), 0, "NULL boot id: unknown (0)");
    ok(hostmap_self() != 0 && hostmap_self() == hostmap_self(),
       "this process has a host id, the same each time");

    for (size_t i = 0; i < sizeof(ucx); i++) {
        ucx[i] = (uint8_t)(i * 7 + 1);
    }
    ips.n = 2;
    ips.family[0] = 4;
    memcpy(ips.a[0], (uint8_t[]){ 10, 91, 0, 2 }, 4);
    ips.family[1] = 6;
    for (int i = 0; i < 16; i++) {
        ips.a[1][i] = (uint8_t)(0xf0 + i);
    }
    is_int(hostmap_pack(ucx, sizeof(ucx), 0x1122334455667788ull, "node7",
                        &ips, &v, &len), TD_OK, "pack");
    is_int(hostmap_unpack(3, v, len, &a, &alen, &host, name, &got), TD_OK,
           "unpack");
    ok(got.n == 2 && got.family[0] == 4 && got.family[1] == 6 &&
       memcmp(got.a[0], ips.a[0], 4) == 0 &&
       memcmp(got.a[1], ips.a[1], 16) == 0,
       "the host's two network addresses come back");
    ok(host == 0x1122334455667788ull && alen == sizeof(ucx) &&
       memcmp(a, ucx, sizeof(ucx)) == 0,
       "the host id and the address come back unchanged");
    is_str(name, "node7", "the host's name comes back");

    is_int(hostmap_unpack(3, v, HOSTMAP_HDR + 5, &a, &alen, &host, name,
                          &got),
           TD_ERR_PROTOCOL, "a header and name with no address is refused");
    is_int(hostmap_unpack(3, v, HOSTMAP_HDR + 5 + 1 + 2 * HOSTMAP_IP_LEN,
                          &a, &alen, &host, name, &got),
           TD_ERR_PROTOCOL, "...and with the addresses but no worker address");
    memcpy(bad, v, len < sizeof(bad) ? len : sizeof(bad));
    bad[HOSTMAP_HDR + 5] = HOSTMAP_IPS_MAX + 1;
    is_int(hostmap_unpack(5, bad, len, &a, &alen, &host, name, &got),
           TD_ERR_PROTOCOL, "more addresses than HOSTMAP_IPS_MAX are refused");
    memcpy(bad, v, len < sizeof(bad) ? len : sizeof(bad));
    bad[HOSTMAP_HDR + 5 + 1] = 5;
    is_int(hostmap_unpack(5, bad, len, &a, &alen, &host, name, &got),
           TD_ERR_PROTOCOL, "an address family other than 4 and 6 is refused");
    like(td_last_error(), "rank 5 published a network address of family 5",
         "...naming the rank and the family");
    memcpy(bad, v, len < sizeof(bad) ? len : sizeof(bad));
    bad[0] ^= 1;
    is_int(hostmap_unpack(5, bad, len, &a, &alen, &host, name, &got),
           TD_ERR_PROTOCOL,
           "a bad magic (a bare UCX address, another version) is refused");
    like(td_last_error(), "rank 5 published", "...naming the rank");
    is_int(hostmap_unpack(5, NULL, 0, &a, &alen, &host, name, &got),
           TD_ERR_PROTOCOL, "nothing at all is refused");
    memcpy(bad, v, len < sizeof(bad) ? len : sizeof(bad));
    bad[12] = 200;
    is_int(hostmap_unpack(5, bad, len, &a, &alen, &host, name, &got),
           TD_ERR_PROTOCOL, "a name longer than the value is refused");
    free(v);
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    is_int(hostmap_pack(ucx, sizeof(ucx), 1, longname, NULL, &v, &len), TD_OK,
           "pack with a 199-byte name and no addresses");
    is_int(hostmap_unpack(3, v, len, &a, &alen, &host, name, &got), TD_OK,
           "...unpacks");
    ok(got.n == 0 && alen == sizeof(ucx) && memcmp(a, ucx, alen) == 0,
       "...with no addresses and the worker address whole");
    is_int(strlen(name), HOSTMAP_NAME_MAX - 1, "...its name cut to fit");
    free(v);
    return exit_status();
}
