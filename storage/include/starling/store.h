/*
 * starling/store.h - crash-safe SQLite store for models, rounds, devices and updates.
 *
 * Not implemented yet (issue 5). This header declares nothing, so that no
 * caller can link against behaviour that does not exist.
 */
#ifndef STARLING_STORE_H
#define STARLING_STORE_H

#include "starling/common.h"

#endif /* STARLING_STORE_H */
