/* ops_seq.c - GRU, LSTM, Embedding: not in this build yet (the graph refuses a spec that uses
 * them). */
#include "graph_int.h"

const sl__op_impl *sl__ops_seq(sl__op op)
{
    (void)op;
    return NULL;
}
