/*
 * devlist.c - the list of device ids a partial sum covers, as both backends
 * store it (backend.h): each id in 8 bytes, little-endian. At the bottom of
 * the storage layers, beside db.c (store_int.h).
 */
#include <stdint.h>
#include <stdlib.h>

#include "backend.h"

int sl__devices_encode(const int64_t *devices, size_t n, uint8_t **out, size_t *len)
{
    uint8_t *b = malloc(n ? n * 8 : 1);
    if (b == NULL)
        return SL_ENOMEM;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 8; k++)
            b[8 * i + (size_t)k] = (uint8_t)((uint64_t)devices[i] >> (8 * k));
    *out = b;
    *len = n * 8;
    return SL_OK;
}

int sl__devices_decode(const void *data, size_t len, int64_t **out, size_t *n)
{
    const uint8_t *b = data;
    int64_t *d;
    if (len % 8 != 0)
        return SL_ECORRUPT;
    d = malloc(len ? len : 1);
    if (d == NULL)
        return SL_ENOMEM;
    for (size_t i = 0; i < len / 8; i++) {
        uint64_t v = 0;
        for (int k = 0; k < 8; k++)
            v |= (uint64_t)b[8 * i + (size_t)k] << (8 * k);
        d[i] = (int64_t)v;
    }
    *out = d;
    *n = len / 8;
    return SL_OK;
}
