/*
 * bench_scale_int.h - internals of `starling bench scale`, shared by
 * bench_scale.c (--simulate: a fleet at size, one engine) and
 * bench_replicas.c (--replicas: durable uploads/s on SQLite and on
 * PostgreSQL with 1 to 3 replicas, and the leader's failover time).
 */
#ifndef STARLING_BENCH_SCALE_INT_H
#define STARLING_BENCH_SCALE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "starling/codec.h"

/* Device @i's sparse update of @layout for (round, version): @density of the parameters at
 * random positions (top-k over the model), small values in @values' encoding; a frame to
 * free(). SL_OK or an encoder error. */
int sl__bench_sparse_update(const sl_layout *layout, double density, sl_value_mode values, size_t i,
                            int64_t round_id, int64_t version, uint64_t seed, void **frame,
                            size_t *len);

/* `starling bench scale --replicas ...` (bench_replicas.c). */
int sl__bench_replicas(int argc, char **argv);

#endif /* STARLING_BENCH_SCALE_INT_H */
