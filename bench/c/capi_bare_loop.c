/* bench/capi_overhead.py's peer: the bare C loop an application runs over the runtime, and nothing else:
 * rknn_init once, then per inference rknn_inputs_set, rknn_run, rknn_outputs_get, rknn_outputs_release.
 * No hashing, no files, no index. Built against the same header and linked to the same library (the
 * test double) as rkdet-run-c in the same bench run.
 * usage: capi_bare_loop MODEL INPUT_RAW_FILE... REPEATS   (prints the inferences done) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rknn_api.h"

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb"); unsigned char *b; long size;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END); size = ftell(f); fseek(f, 0, SEEK_SET);
    b = malloc((size_t)size); *n = fread(b, 1, (size_t)size, f); fclose(f); return b;
}

int main(int argc, char **argv) {
    rknn_context ctx; rknn_input_output_num io; rknn_output outs[16]; size_t msize, n_in = (size_t)argc - 3, i;
    unsigned char *model, **in; size_t *in_size; long repeats, r; uint32_t k; rknn_tensor_attr attr;
    if (argc < 4) { fprintf(stderr, "usage: capi_bare_loop MODEL INPUT_RAW... REPEATS\n"); return 2; }
    repeats = atol(argv[argc - 1]);
    model = slurp(argv[1], &msize);
    in = calloc(n_in, sizeof *in); in_size = calloc(n_in, sizeof *in_size);
    for (i = 0; i < n_in; i++) in[i] = slurp(argv[2 + i], &in_size[i]);
#ifdef RKDET_RKNPU1
    if (rknn_init(&ctx, model, (uint32_t)msize, 0)) return 3;
#else
    if (rknn_init(&ctx, model, (uint32_t)msize, 0, NULL)) return 3;
#endif
    if (rknn_query(ctx, RKNN_QUERY_IN_OUT_NUM, &io, sizeof io) || io.n_output > 16) return 3;
    memset(&attr, 0, sizeof attr);
    if (rknn_query(ctx, RKNN_QUERY_INPUT_ATTR, &attr, sizeof attr)) return 3;
    for (r = 0; r < repeats; r++) for (i = 0; i < n_in; i++) {
        rknn_input x; memset(&x, 0, sizeof x); memset(outs, 0, sizeof outs);
        x.index = 0; x.buf = in[i]; x.size = (uint32_t)in_size[i]; x.type = attr.type; x.fmt = attr.fmt;
        for (k = 0; k < io.n_output; k++) { outs[k].want_float = 1; outs[k].index = k; }
        if (rknn_inputs_set(ctx, 1, &x) || rknn_run(ctx, NULL) || rknn_outputs_get(ctx, io.n_output, outs, NULL)) return 3;
        rknn_outputs_release(ctx, io.n_output, outs);
    }
    rknn_destroy(ctx);
    printf("%ld\n", repeats * (long)n_in);
    return 0;
}
