/* base/byteorder.h: big-endian (network order) integers in byte buffers,
 * as every frame of ours carries them. Callers check lengths first. */
#ifndef TD_BASE_BYTEORDER_H
#define TD_BASE_BYTEORDER_H

#include <stdint.h>
#include <string.h>

static inline void
td_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static inline uint32_t
td_get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | p[3];
}

static inline void
td_put_be64(uint8_t *p, uint64_t v)
{
    td_put_be32(p, v >> 32);
    td_put_be32(p + 4, (uint32_t)v);
}

static inline uint64_t
td_get_be64(const uint8_t *p)
{
    return (uint64_t)td_get_be32(p) << 32 | td_get_be32(p + 4);
}

/* little-endian, as the RPC wire carries them. One load or store each
 * (memcpy: no alignment assumed); GCC did not merge the byte-by-byte
 * form, which cost an RPC header's parse ~300 instructions. */
static inline void
td_put_le32(uint8_t *p, uint32_t v)
{
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    memcpy(p, &v, sizeof(v));
}

static inline uint32_t
td_get_le32(const uint8_t *p)
{
    uint32_t x;

    memcpy(&x, p, sizeof(x));
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    x = __builtin_bswap32(x);
#endif
    return x;
}

static inline void
td_put_le64(uint8_t *p, uint64_t v)
{
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, sizeof(v));
}

static inline uint64_t
td_get_le64(const uint8_t *p)
{
    uint64_t x;

    memcpy(&x, p, sizeof(x));
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    x = __builtin_bswap64(x);
#endif
    return x;
}

#endif /* TD_BASE_BYTEORDER_H */
