/* A caller of the rknnrt TEST DOUBLE (tests/runner_c/test_runner_c.py): checks rknn_outputs_get's documented
 * is_prealloc semantics in the double itself. It fetches output 0 three ways for the served input (the model's
 * own type/layout, float32 1x3x4x4 in the test, read from argv[2]): the library's own buffer; a caller's buffer
 * one byte too small (must be refused with RKNN_ERR_PARAM_INVALID and left untouched); a caller's buffer of the
 * right size (must be the one written, with the same bytes). Prints one line "small=RET untouched=0|1 exact=RET
 * same_buf=0|1 same_bytes=0|1"; exit 0 when it could run the calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rknn_api.h"

int main(int argc, char **argv) {
    rknn_context ctx = 0; rknn_input in; rknn_output own, small, exact; FILE *f; unsigned char x[192], *buf, *sbuf;
    size_t n; int ret, untouched = 1; uint32_t i;
    if (argc != 3 || !(f = fopen(argv[2], "rb")) || fread(x, 1, sizeof x, f) != sizeof x) { fputs("usage: prealloc_probe MODEL INPUT.bin\n", stderr); return 2; }
    fclose(f);
#ifdef RKDET_RKNPU1
    if (rknn_init(&ctx, argv[1], (uint32_t)strlen(argv[1]) + 1, 0) != RKNN_SUCC) return 3;
#else
    if (rknn_init(&ctx, argv[1], (uint32_t)strlen(argv[1]) + 1, 0, NULL) != RKNN_SUCC) return 3;
#endif
    memset(&in, 0, sizeof in); in.index = 0; in.buf = x; in.size = sizeof x; in.type = RKNN_TENSOR_FLOAT32; in.fmt = RKNN_TENSOR_NCHW;
    memset(&own, 0, sizeof own); own.want_float = 1;
    if (rknn_inputs_set(ctx, 1, &in) != RKNN_SUCC || rknn_run(ctx, NULL) != RKNN_SUCC || rknn_outputs_get(ctx, 1, &own, NULL) != RKNN_SUCC) return 4;
    n = own.size;
    sbuf = (unsigned char *)malloc(n); memset(sbuf, 0xA5, n);
    memset(&small, 0, sizeof small); small.want_float = 1; small.is_prealloc = 1; small.buf = sbuf; small.size = (uint32_t)n - 1;
    ret = rknn_outputs_get(ctx, 1, &small, NULL);
    for (i = 0; i < n; i++) if (sbuf[i] != 0xA5) untouched = 0;
    printf("small=%d untouched=%d ", ret, untouched);
    buf = (unsigned char *)malloc(n);
    memset(&exact, 0, sizeof exact); exact.want_float = 1; exact.is_prealloc = 1; exact.buf = buf; exact.size = (uint32_t)n;
    ret = rknn_outputs_get(ctx, 1, &exact, NULL);
    printf("exact=%d same_buf=%d same_bytes=%d\n", ret, exact.buf == buf, ret == RKNN_SUCC && exact.size == n && !memcmp(buf, own.buf, n));
    rknn_outputs_release(ctx, 1, &exact); rknn_outputs_release(ctx, 1, &own);
    rknn_destroy(ctx); free(buf); free(sbuf);
    return 0;
}
