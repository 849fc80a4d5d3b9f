/* Limits every layer shares: the largest tensor rank a capture, a shard
 * table, a plan or a quantization block may carry. Plain constants; no
 * handles, no locking needed. */
#ifndef RESHARD_LIMITS_H
#define RESHARD_LIMITS_H

/* Largest tensor rank anywhere in a chain (source, intermediate, destination). */
#define RS_MAX_DIMS 16

#endif
