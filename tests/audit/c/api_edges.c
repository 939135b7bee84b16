/* The C audit library's API edges, driven by tests/audit/test_audit_c.py: settings it refuses (one line,
 * NULL), tensors it cannot read (counted, never a crash), and a handle that keeps serving after them.
 * Prints one "name=value" per line for the test to assert on. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "rkdet_audit.h"

int main(int argc, char **argv) {
    rkdet_audit_settings s; rkdet_audit *a; char err[512]; rkdet_audit_counters c;
    uint64_t dims[2] = {1, 4}; float y[4] = {1, 2, 3, 4};
    rkdet_audit_tensor good = {"<f4", 2, dims, y, sizeof y}, no_dtype = {NULL, 2, dims, y, sizeof y},
                       no_data = {"<f4", 2, dims, NULL, sizeof y}, no_shape = {"<f4", 2, NULL, y, sizeof y};
    if (argc != 4) return 2;  /* LOG_DIR A_FILE BUILD */
    memset(&s, 0, sizeof s);
    s.log_dir = argv[2]; s.build = argv[3];
    printf("file_as_folder=%s\n", rkdet_audit_open(&s, err, sizeof err) ? "opened" : err);
    s.log_dir = argv[1]; s.build = "not-a-fingerprint";
    printf("bad_build=%s\n", rkdet_audit_open(&s, err, sizeof err) ? "opened" : err);
    s.build = argv[3];
    if (!(a = rkdet_audit_open(&s, err, sizeof err))) { printf("open=%s\n", err); return 1; }
    printf("null_dtype=%d\n", rkdet_audit_inference(a, &no_dtype, 1, &good, 1, 5));
    printf("null_data=%d\n", rkdet_audit_inference(a, &good, 1, &no_data, 1, 5));
    printf("null_shape=%d\n", rkdet_audit_inference(a, &no_shape, 1, &good, 1, 5));
    printf("null_list=%d\n", rkdet_audit_inference(a, NULL, 1, &good, 1, 5));
    printf("canary_null=%d\n", rkdet_audit_canary(a, NULL, 3, 1));
    printf("good=%d\n", rkdet_audit_inference(a, &good, 1, &good, 1, 5));
    printf("canary_baseline=%d\n", rkdet_audit_canary(a, &good, 1, 1));
    printf("canary_other_count=%d\n", rkdet_audit_canary(a, &good, 1, 0));
    rkdet_audit_get_counters(a, &c);
    printf("write_failures=%llu\ninferences=%llu\n", (unsigned long long)c.write_failures, (unsigned long long)c.inferences);
    rkdet_audit_close(a);
    rkdet_audit_close(NULL);
    {   /* the shadow's statistics on known numbers: three samples, one period */
        float x[4] = {0}, s1[4] = {0.5f, 2.0f, -1.0f, 0.25f}, c1[4] = {0.5f, 1.0f, 3.0f, 0.0f},
              s3[4] = {1, 2, 3, 4}, c3[4] = {1, 2, 3, 5};
        rkdet_audit_tensor tx = {"<f4", 2, dims, x, sizeof x}, ts1 = {"<f4", 2, dims, s1, sizeof s1},
                           tc1 = {"<f4", 2, dims, c1, sizeof c1}, ts3 = {"<f4", 2, dims, s3, sizeof s3},
                           tc3 = {"<f4", 2, dims, c3, sizeof c3};
        s.shadow_build = "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"; s.shadow_report_every = 3;
        if (!(a = rkdet_audit_open(&s, err, sizeof err))) { printf("open=%s\n", err); return 1; }
        printf("shadow_disagrees=%d\n", rkdet_audit_shadow(a, &tx, 1, &ts1, &tc1, 1));
        printf("shadow_same=%d\n", rkdet_audit_shadow(a, &tx, 1, &ts1, &ts1, 1));
        printf("shadow_agrees=%d\n", rkdet_audit_shadow(a, &tx, 1, &ts3, &tc3, 1));
        rkdet_audit_close(a);
    }
    return 0;
}
