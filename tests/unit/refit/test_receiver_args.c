/* What a receiver refuses at create, before it opens a directory or binds
 * anything: an unknown backend is named there, not at the first pull's
 * connect; every backend the library has is accepted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reshard/reshard.h"
#include "assert_status.h"

static rs_capture_h load_capture(void)
{
    static const char json[] =
        "{\"schema\": \"reshard.capture.v1\", \"params\": {\"p\": "
        "{\"shape\": [4], \"dtype\": \"f32\"}}, \"copies\": [{\"src\": "
        "\"w\", \"ops\": [], \"param\": \"p\", \"dest_offset\": 0, "
        "\"dest_shape\": [4], \"dest_stride\": [1], \"dest_dtype\": "
        "\"f32\"}]}";
    rs_capture_h cap = NULL;
    assert_int_equal(rs_capture_load_string(json, sizeof(json) - 1, "c.json",
                                            NULL, &cap), RS_OK);
    return cap;
}

static rs_status_t create(const char *dir, const char *backend,
                          rs_capture_h cap, rs_diag_t *d, rs_receiver_h *r_p)
{
    rs_receiver_params_t rp;
    rs_receiver_params_init(&rp);
    rp.directory = dir;
    rp.model = "m";
    rp.backend = backend;
    return rs_receiver_create(&rp, cap, d, r_p);
}

static void test_unknown_backend_refused_at_create(void **state)
{
    (void)state;
    rs_capture_h cap = load_capture();
    rs_diag_t d;
    rs_receiver_h r = NULL;
    ASSERT_ST(create("file:/nonexistent/reshard-dir", "nccl", cap, &d, &r),
              RS_ERR_INVALID_ARG, d);
    ASSERT_MSG_HAS(d, "receiver: backend 'nccl' is unknown");
    assert_null(r);
    rs_capture_destroy(cap);
}

static void test_known_backends_accepted(void **state)
{
    (void)state;
    char tmpl[] = "/tmp/rs-recv-args-XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    char url[64];
    snprintf(url, sizeof(url), "file:%s", tmpl);
    rs_capture_h cap = load_capture();
    static const char *const known[] = {"ucx", "cma", "local", "local-mt"};
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        rs_diag_t d;
        rs_receiver_h r = NULL;
        ASSERT_ST(create(url, known[i], cap, &d, &r), RS_OK, d);
        assert_non_null(r);
        rs_receiver_destroy(r);
    }
    rs_capture_destroy(cap);
    rmdir(tmpl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_backend_refused_at_create),
        cmocka_unit_test(test_known_backends_accepted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
