/* ops_norm.c - BatchNormalization, LayerNormalization: not in this build yet (the graph refuses a
 * spec that uses them). */
#include "graph_int.h"

const sl__op_impl *sl__ops_norm(sl__op op)
{
    (void)op;
    return NULL;
}
