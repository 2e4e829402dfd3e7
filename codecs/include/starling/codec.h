/*
 * starling/codec.h - wire formats, tensor layouts, top-k selection, error feedback, entropy coding.
 *
 * Not implemented yet (issue 3). This header declares nothing, so that no
 * caller can link against behaviour that does not exist.
 */
#ifndef STARLING_CODEC_H
#define STARLING_CODEC_H

#include "starling/common.h"

#endif /* STARLING_CODEC_H */
