/* A u8 tensor published by rows and read whole (u8_rows.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "assert_status.h"
#include "u8_rows.h"

void u8_rows_open(rs_publisher_h *pub, int n, const char *url,
                  const char *model, uint8_t **rows, int nrows, int64_t cols)
{
    rs_diag_t d;
    const int64_t full[2] = {nrows, cols}, shape[2] = {1, cols};
    for (int p = 0; p < n; p++) {
        rs_publisher_params_t pp;
        rs_publisher_params_init(&pp);
        pp.directory = url;
        pp.model = model;
        pp.rank = p;
        pp.world = n;
        pp.backend = "cma";
        pp.heartbeat_s = 0;
        ASSERT_ST(rs_publisher_create(&pp, &d, &pub[p]), RS_OK, d);
    }
    for (int i = 0; i < nrows; i++) {
        const int64_t offset[2] = {i, 0};
        rows[i] = malloc((size_t)cols);
        assert_non_null(rows[i]);
        ASSERT_ST(rs_publisher_register(pub[i % n], "w", RS_DTYPE_U8, 2, full,
                                        offset, shape, rows[i], RS_MEM_HOST,
                                        &d), RS_OK, d);
    }
}

void u8_rows_close(rs_publisher_h *pub, int n, uint8_t **rows, int nrows)
{
    for (int p = 0; p < n; p++) {
        rs_publisher_destroy(pub[p]);
        pub[p] = NULL;
    }
    for (int i = 0; i < nrows; i++) {
        free(rows[i]);
        rows[i] = NULL;
    }
}

rs_capture_h u8_whole_capture(const char *name, int64_t rows, int64_t cols)
{
    rs_capture_h cap;
    rs_diag_t d;
    const int64_t shape[2] = {rows, cols}, stride[2] = {cols, 1};
    assert_int_equal(rs_capture_create(&cap), RS_OK);
    ASSERT_ST(rs_capture_add_param(cap, name, 2, shape, RS_DTYPE_U8, &d),
              RS_OK, d);
    rs_copy_desc_t c = {name, name, NULL, 0, 0, 2, shape, stride,
                        RS_DTYPE_U8};
    ASSERT_ST(rs_capture_add_copy(cap, &c, &d), RS_OK, d);
    return cap;
}

uint8_t *u8_filled(size_t nbytes, uint8_t fill)
{
    uint8_t *buf = malloc(nbytes ? nbytes : 1);
    assert_non_null(buf);
    memset(buf, fill, nbytes);
    return buf;
}

uint8_t u8_rows_byte(uint64_t i, int64_t v)
{
    return (uint8_t)(i * 31 + (i >> 8) + (uint64_t)v * 101);
}

void u8_rows_publish(rs_publisher_h *pub, int n, uint8_t **rows, int nrows,
                     int64_t cols, int64_t v)
{
    rs_diag_t d;
    for (int r = 0; r < nrows; r++)
        for (uint64_t j = 0; j < (uint64_t)cols; j++)
            rows[r][j] = u8_rows_byte((uint64_t)r * (uint64_t)cols + j, v);
    for (int p = 0; p < n; p++)
        ASSERT_ST(rs_publisher_publish(pub[p], v, &d), RS_OK, d);
}
