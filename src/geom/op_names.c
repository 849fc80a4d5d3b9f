/* Names of the view ops as captures write them ("narrow"), for the capture
 * reader and writer and for messages naming an op. */
#include <stddef.h>

#include "reshard/view.h"

static const char *const op_names[] = {
    [RS_OP_NARROW] = "narrow",       [RS_OP_SLICE] = "slice",
    [RS_OP_SELECT] = "select",       [RS_OP_GETITEM] = "getitem",
    [RS_OP_TRANSPOSE] = "transpose", [RS_OP_T] = "t",
    [RS_OP_PERMUTE] = "permute",     [RS_OP_VIEW] = "view",
    [RS_OP_RESHAPE] = "reshape",     [RS_OP_FLATTEN] = "flatten",
    [RS_OP_UNFLATTEN] = "unflatten", [RS_OP_UNSQUEEZE] = "unsqueeze",
    [RS_OP_SQUEEZE] = "squeeze",     [RS_OP_CHUNK] = "chunk",
    [RS_OP_SPLIT] = "split",         [RS_OP_UNBIND] = "unbind",
    [RS_OP_CONTIGUOUS] = "contiguous",
};

const char *rs_op_name(rs_op_kind_t kind)
{
    if ((int)kind <= 0 || (size_t)kind >= sizeof(op_names) / sizeof(op_names[0]))
        return "?";
    return op_names[kind];
}
