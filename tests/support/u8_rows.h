/* A u8 tensor published by rows and read whole, for the tests of leases,
 * staging and memory kinds: `n` cma publishers (the ranks of a world of
 * n, no heartbeat), row i a malloc'd shard of publisher i % n, and the
 * capture of one parameter holding the whole tensor. */
#ifndef RS_TEST_U8_ROWS_H
#define RS_TEST_U8_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/reshard.h"

/* Creates pub[0..n) in directory `url` for `model` and registers rows
 * [0, nrows) of "w" [nrows, cols], each allocated into rows[i]. */
void u8_rows_open(rs_publisher_h *pub, int n, const char *url,
                  const char *model, uint8_t **rows, int nrows, int64_t cols);

/* Destroys the publishers and frees the rows; accepts a partial open. */
void u8_rows_close(rs_publisher_h *pub, int n, uint8_t **rows, int nrows);

/* One parameter `name` [rows, cols] u8, read whole from the tensor of the
 * same name. */
rs_capture_h u8_whole_capture(const char *name, int64_t rows, int64_t cols);

/* Byte i of the tensor in version v: every byte differs between versions
 * 1..8 (v * 101 mod 256 differs for each). */
uint8_t u8_rows_byte(uint64_t i, int64_t v);

/* Fills rows [0, nrows) of `cols` bytes with version v (u8_rows_byte) and
 * publishes v on each of pub[0..n). */
void u8_rows_publish(rs_publisher_h *pub, int n, uint8_t **rows, int nrows,
                     int64_t cols, int64_t v);

/* A destination of nbytes, every byte `fill` (the caller frees it). */
uint8_t *u8_filled(size_t nbytes, uint8_t fill);

#endif
