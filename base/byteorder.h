/* base/byteorder.h: big-endian (network order) integers in byte buffers,
 * as every frame of ours carries them. Callers check lengths first. */
#ifndef TD_BASE_BYTEORDER_H
#define TD_BASE_BYTEORDER_H

#include <stdint.h>

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

/* little-endian, as the RPC wire carries them (the hosts we run on are) */
static inline void
td_put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static inline uint32_t
td_get_le32(const uint8_t *p)
{
    uint32_t x = 0;

    for (int i = 0; i < 4; i++) {
        x |= (uint32_t)p[i] << (8 * i);
    }
    return x;
}

static inline void
td_put_le64(uint8_t *p, uint64_t v)
{
    td_put_le32(p, (uint32_t)v);
    td_put_le32(p + 4, (uint32_t)(v >> 32));
}

static inline uint64_t
td_get_le64(const uint8_t *p)
{
    return (uint64_t)td_get_le32(p) | (uint64_t)td_get_le32(p + 4) << 32;
}

#endif /* TD_BASE_BYTEORDER_H */
