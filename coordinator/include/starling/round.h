/*
 * starling/round.h - round engine: selection, deadlines, quorum, aggregation, recovery.
 *
 * Not implemented yet (issue 6). This header declares nothing, so that no
 * caller can link against behaviour that does not exist.
 */
#ifndef STARLING_ROUND_H
#define STARLING_ROUND_H

#include "starling/common.h"

#endif /* STARLING_ROUND_H */
