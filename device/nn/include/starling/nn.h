/*
 * starling/nn.h - tensors, layers, models, optimisers and SIMD kernels for on-device training.
 *
 * Not implemented yet (issue 4). This header declares nothing, so that no
 * caller can link against behaviour that does not exist.
 */
#ifndef STARLING_NN_H
#define STARLING_NN_H

#include "starling/common.h"

#endif /* STARLING_NN_H */
