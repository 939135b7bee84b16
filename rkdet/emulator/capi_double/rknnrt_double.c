/* A TEST DOUBLE of librknnrt.so (rkdet's own code, never Rockchip's): the emulated board loads it in
 * place of the runtime so the real, cross-compiled rkdet-run-c runs under qemu-user in tests.
 *
 * It implements the calls rkdet-run-c uses with the documented semantics: every query checks the
 * struct size it is given (RKNN_ERR_PARAM_INVALID, ret=-5, as a runner built against another header
 * meets); inputs are converted to the model's type and layout unless pass_through (NCHW<->NHWC
 * transposed for 4-D tensors); want_float dequantises an affine output with its scale and zero
 * point; a core mask naming a core the SoC lacks is refused; an output with is_prealloc is written into the
 * caller's buffer, and one smaller than the output is refused (RKNN_ERR_PARAM_INVALID) before anything is written. It computes NO model: the numbers come
 * from the emulator's computation, which the emulated board leaves in $RKDET_RKNN_DOUBLE/:
 *   model.txt        one line per tensor:  input NAME TYPE FMT NDIMS D...
 *                                         output NAME TYPE ZP SCALE NDIMS D...
 *                    and "cores N", "custom TEXT" (the model's custom string), "version TEXT",
 *                    "reject OP" (TEST CONTROL: rknn_init refuses the model over an op it lacks, #448),
 *                    "flip K" (TEST CONTROL: the K-th rknn_run of the process, from 0, flips the lowest bit
 *                    of the first output's first byte: a runtime that is not repeatable; up to MAXFLIPS
 *                    "flip" lines, each its own call),
 *                    "ignore_prealloc" (TEST CONTROL: outputs go to the library's own buffers even
 *                    when the caller set is_prealloc, as a runtime that does not honour it would),
 *                    "npu_us N" (BENCH CONTROL: rknn_run takes at least N microseconds, sleeping the rest,
 *                    as a real runtime's caller waits in the driver while the NPU computes; bench/capi_overhead.py)
 *   outputs/KEY.bin  every output's native bytes, concatenated, for the input whose native bytes
 *                    have FNV-1a 64 hash KEY (16 hex digits)
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "rknn_api.h"

#define MAXT 16
#define MAXFLIPS 64
#ifndef RKDET_DOUBLE_VERSION
#define RKDET_DOUBLE_VERSION "2.5.0"
#endif
/* the version string a runtime library carries (what probe.sh and `rkdet runner build` read from the file) */
#ifdef RKDET_RKNPU1
__attribute__((used)) const char rkdet_double_version_string[] = "librknn_api version: " RKDET_DOUBLE_VERSION " (rkdet-test-double)";
#else
__attribute__((used)) const char rkdet_double_version_string[] = "librknnrt version: " RKDET_DOUBLE_VERSION " (rkdet-test-double)";
#endif
typedef struct { char name[RKNN_MAX_NAME_LEN]; int type, fmt; int32_t zp; float scale; uint32_t n_dims, dims[RKNN_MAX_DIMS]; } tensor_t;
static struct {
    int ready, cores, n_flips, ignore_prealloc; long runs, flips[MAXFLIPS], npu_us; char dir[1024], custom[1024], version[256], reject[256];
    tensor_t in, out[MAXT]; int n_out; unsigned char *input; size_t input_size; unsigned char *result; size_t result_size;
} M;

static size_t type_size(int t) {
    switch (t) { case RKNN_TENSOR_FLOAT32: case RKNN_TENSOR_INT32: case RKNN_TENSOR_UINT32: return 4;
                 case RKNN_TENSOR_FLOAT16: case RKNN_TENSOR_INT16: case RKNN_TENSOR_UINT16: return 2;
                 case RKNN_TENSOR_INT64: return 8; default: return 1; }
}
static uint32_t elems(const tensor_t *t) { uint32_t n = 1, i; for (i = 0; i < t->n_dims; i++) n *= t->dims[i]; return n; }
static int read_dims(char **p, tensor_t *t) {
    char *end; uint32_t i; t->n_dims = (uint32_t)strtoul(*p, &end, 10); *p = end;
    if (t->n_dims > RKNN_MAX_DIMS) return -1;
    for (i = 0; i < t->n_dims; i++) { t->dims[i] = (uint32_t)strtoul(*p, &end, 10); *p = end; }
    return 0;
}

#ifdef RKDET_RKNPU1
int rknn_init(rknn_context *context, void *model, uint32_t size, uint32_t flag) {
    void *extend = NULL;
#else
int rknn_init(rknn_context *context, void *model, uint32_t size, uint32_t flag, rknn_init_extend *extend) {
#endif
    const char *dir = getenv("RKDET_RKNN_DOUBLE"); char path[1100], line[2048]; FILE *f;
    (void)flag; (void)extend;
    if (!context || !model || !size) return RKNN_ERR_PARAM_INVALID;
    if (!dir) { fprintf(stderr, "rknnrt test double: RKDET_RKNN_DOUBLE is not set (the emulated board sets it)\n"); return RKNN_ERR_MODEL_INVALID; }
    memset(&M, 0, sizeof M); M.cores = 3; snprintf(M.dir, sizeof M.dir, "%s", dir);
    snprintf(M.version, sizeof M.version, "%s (rkdet-test-double)", RKDET_DOUBLE_VERSION);
    snprintf(path, sizeof path, "%s/model.txt", dir);
    if (!(f = fopen(path, "r"))) return RKNN_ERR_MODEL_INVALID;
    while (fgets(line, sizeof line, f)) {
        char *p = line, word[32]; int n = 0;
        line[strcspn(line, "\n")] = 0;
        if (sscanf(p, "%31s %n", word, &n) != 1) continue;
        p += n;
        if (!strcmp(word, "input")) { tensor_t *t = &M.in; if (sscanf(p, "%255s %d %d %n", t->name, &t->type, &t->fmt, &n) != 3) break; p += n; read_dims(&p, t); }
        else if (!strcmp(word, "output") && M.n_out < MAXT) { tensor_t *t = &M.out[M.n_out++];
            if (sscanf(p, "%255s %d %d %f %n", t->name, &t->type, &t->zp, &t->scale, &n) != 4) break; p += n; read_dims(&p, t); t->fmt = RKNN_TENSOR_NCHW; }
        else if (!strcmp(word, "cores")) M.cores = atoi(p);
        else if (!strcmp(word, "custom")) snprintf(M.custom, sizeof M.custom, "%s", p);
        else if (!strcmp(word, "version")) snprintf(M.version, sizeof M.version, "%s", p);
        else if (!strcmp(word, "reject")) snprintf(M.reject, sizeof M.reject, "%s", p);
        else if (!strcmp(word, "flip") && M.n_flips < MAXFLIPS) M.flips[M.n_flips++] = atol(p);
        else if (!strcmp(word, "npu_us")) M.npu_us = atol(p);
        else if (!strcmp(word, "ignore_prealloc")) M.ignore_prealloc = 1;
    }
    fclose(f);
    if (M.reject[0]) {
        fprintf(stderr, "rknnrt test double: op %s is not supported by this runtime (TEST CONTROL, rknn-toolkit2#448)\n", M.reject);
        return RKNN_ERR_MODEL_INVALID;
    }
    if (!M.n_out || !M.in.n_dims) return RKNN_ERR_MODEL_INVALID;
    M.ready = 1; *context = 1; return RKNN_SUCC;
}
int rknn_destroy(rknn_context c) { (void)c; free(M.input); free(M.result); memset(&M, 0, sizeof M); return RKNN_SUCC; }

static void fill_attr(rknn_tensor_attr *a, const tensor_t *t, uint32_t index) {
    memset(a, 0, sizeof *a); a->index = index; a->n_dims = t->n_dims;
    memcpy(a->dims, t->dims, sizeof t->dims[0] * t->n_dims); snprintf(a->name, sizeof a->name, "%s", t->name);
#ifdef RKDET_RKNPU1  /* RKNPU1 reports dims innermost first ([W, H, C, N]) */
    { uint32_t i; for (i = 0; i < t->n_dims; i++) a->dims[i] = t->dims[t->n_dims - 1 - i]; }
#endif
    a->n_elems = elems(t); a->size = a->n_elems * (uint32_t)type_size(t->type);
#ifndef RKDET_RKNPU1  /* RKNPU1's attributes have no strides */
    a->size_with_stride = a->size;
#endif
    a->fmt = (rknn_tensor_format)t->fmt; a->type = (rknn_tensor_type)t->type; a->zp = t->zp; a->scale = t->scale;
    a->qnt_type = (t->type == RKNN_TENSOR_INT8 || t->type == RKNN_TENSOR_UINT8) ? RKNN_TENSOR_QNT_AFFINE_ASYMMETRIC : RKNN_TENSOR_QNT_NONE;
}
int rknn_query(rknn_context c, rknn_query_cmd cmd, void *info, uint32_t size) {
    if (!M.ready || c != 1) return RKNN_ERR_CTX_INVALID;
    if (!info) return RKNN_ERR_PARAM_INVALID;
    switch (cmd) {
    case RKNN_QUERY_IN_OUT_NUM: { rknn_input_output_num *n = (rknn_input_output_num *)info;
        if (size != sizeof *n) return RKNN_ERR_PARAM_INVALID; n->n_input = 1; n->n_output = (uint32_t)M.n_out; return RKNN_SUCC; }
    case RKNN_QUERY_INPUT_ATTR: case RKNN_QUERY_OUTPUT_ATTR: { rknn_tensor_attr *a = (rknn_tensor_attr *)info; uint32_t i;
        if (size != sizeof *a) return RKNN_ERR_PARAM_INVALID;
        i = a->index;
        if (cmd == RKNN_QUERY_INPUT_ATTR) { if (i != 0) return RKNN_ERR_PARAM_INVALID; fill_attr(a, &M.in, 0); }
        else { if (i >= (uint32_t)M.n_out) return RKNN_ERR_PARAM_INVALID; fill_attr(a, &M.out[i], i); }
        return RKNN_SUCC; }
    case RKNN_QUERY_SDK_VERSION: { rknn_sdk_version *v = (rknn_sdk_version *)info;
        if (size != sizeof *v) return RKNN_ERR_PARAM_INVALID;
        snprintf(v->api_version, sizeof v->api_version, "%s", M.version); snprintf(v->drv_version, sizeof v->drv_version, "0.9.8"); return RKNN_SUCC; }
#ifndef RKDET_RKNPU1  /* RKNPU1 has no custom-string query */
    case RKNN_QUERY_CUSTOM_STRING: { rknn_custom_string *s = (rknn_custom_string *)info;
        if (size != sizeof *s) return RKNN_ERR_PARAM_INVALID; snprintf(s->string, sizeof s->string, "%s", M.custom); return RKNN_SUCC; }
#endif
    default: return RKNN_ERR_PARAM_INVALID;
    }
}
#ifndef RKDET_RKNPU1
int rknn_set_core_mask(rknn_context c, rknn_core_mask mask) {
    int i;
    if (!M.ready || c != 1) return RKNN_ERR_CTX_INVALID;
    if (mask == RKNN_NPU_CORE_AUTO || mask == RKNN_NPU_CORE_ALL) return RKNN_SUCC;
    for (i = 0; i < 16; i++) if (((unsigned)mask >> i & 1u) && i >= M.cores) {
        fprintf(stderr, "rknnrt test double: core mask %d names core %d; this SoC has %d NPU core(s)\n", (int)mask, i, M.cores);
        return RKNN_ERR_FAIL;
    }
    return RKNN_SUCC;
}
#endif

static double get_value(const unsigned char *p, int type) {
    switch (type) {
    case RKNN_TENSOR_FLOAT32: { float v; memcpy(&v, p, 4); return v; }
    case RKNN_TENSOR_INT8: return (int8_t)*p;
    case RKNN_TENSOR_UINT8: return *p;
    case RKNN_TENSOR_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    default: return 0;
    }
}
static void put_value(unsigned char *p, int type, double v) {
    switch (type) {
    case RKNN_TENSOR_FLOAT32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case RKNN_TENSOR_INT8: { double r = v < -128 ? -128 : v > 127 ? 127 : v; *p = (unsigned char)(int8_t)(r < 0 ? r - 0.5 : r + 0.5); break; }
    case RKNN_TENSOR_UINT8: { double r = v < 0 ? 0 : v > 255 ? 255 : v; *p = (unsigned char)(r + 0.5); break; }
    case RKNN_TENSOR_INT32: { int32_t i = (int32_t)v; memcpy(p, &i, 4); break; }
    default: break;
    }
}
int rknn_inputs_set(rknn_context c, uint32_t n, rknn_input in[]) {
    uint32_t count, i; size_t es = type_size(M.in.type), is;
    unsigned char *conv;
    if (!M.ready || c != 1) return RKNN_ERR_CTX_INVALID;
    if (n != 1 || !in || in[0].index != 0 || !in[0].buf) return RKNN_ERR_PARAM_INVALID;
    count = elems(&M.in);
    if (in[0].pass_through) {  /* fed as the model's own type and layout, untouched */
        if (in[0].size != count * es) return RKNN_ERR_INPUT_INVALID;
        free(M.input); M.input = malloc(in[0].size); memcpy(M.input, in[0].buf, in[0].size); M.input_size = in[0].size; return RKNN_SUCC;
    }
    is = type_size(in[0].type);
    if (in[0].size != count * is) return RKNN_ERR_INPUT_INVALID;
    conv = malloc(count * es);
    for (i = 0; i < count; i++) put_value(conv + i * es, M.in.type, get_value((const unsigned char *)in[0].buf + i * is, in[0].type));
    if (M.in.n_dims == 4 && (int)in[0].fmt != M.in.fmt && (in[0].fmt == RKNN_TENSOR_NCHW || in[0].fmt == RKNN_TENSOR_NHWC)) {
        /* the model's dims are in its own layout; transpose the given layout into it */
        unsigned char *t = malloc(count * es); uint32_t N = M.in.dims[0], a, b2, cc, d, C, H, W;
        if (M.in.fmt == RKNN_TENSOR_NHWC) { H = M.in.dims[1]; W = M.in.dims[2]; C = M.in.dims[3]; } else { C = M.in.dims[1]; H = M.in.dims[2]; W = M.in.dims[3]; }
        for (a = 0; a < N; a++) for (cc = 0; cc < C; cc++) for (b2 = 0; b2 < H; b2++) for (d = 0; d < W; d++) {
            size_t nchw = (((size_t)a * C + cc) * H + b2) * W + d, nhwc = (((size_t)a * H + b2) * W + d) * C + cc;
            size_t from = in[0].fmt == RKNN_TENSOR_NCHW ? nchw : nhwc, to = M.in.fmt == RKNN_TENSOR_NCHW ? nchw : nhwc;
            memcpy(t + to * es, conv + from * es, es);
        }
        free(conv); conv = t;
    }
    free(M.input); M.input = conv; M.input_size = count * es; return RKNN_SUCC;
}
int rknn_run(rknn_context c, rknn_run_extend *e) {
    uint64_t h = 1469598103934665603ULL; size_t i, want = 0; int k; char path[1200]; FILE *f; struct timespec t0, t1;
    (void)e;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!M.ready || c != 1) return RKNN_ERR_CTX_INVALID;
    if (!M.input) return RKNN_ERR_INPUT_INVALID;
    for (i = 0; i < M.input_size; i++) { h ^= M.input[i]; h *= 1099511628211ULL; }
    for (k = 0; k < M.n_out; k++) want += elems(&M.out[k]) * type_size(M.out[k].type);
    snprintf(path, sizeof path, "%s/outputs/%016llx.bin", M.dir, (unsigned long long)h);
    free(M.result); M.result = malloc(want); M.result_size = want;
    if (!(f = fopen(path, "rb")) || fread(M.result, 1, want, f) != want) {
        if (f) fclose(f);
        fprintf(stderr, "rknnrt test double: the emulator computed no outputs for input %016llx\n", (unsigned long long)h);
        return RKNN_ERR_FAIL;
    }
    fclose(f);
    for (k = 0; k < M.n_flips; k++) if (M.flips[k] == M.runs && want) { M.result[0] ^= 1u; break; }
    M.runs++;
    if (M.npu_us > 0) {  /* the NPU's compute time: the caller waits, its CPU idle */
        long long left;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        left = M.npu_us * 1000LL - ((long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
        if (left > 0) { struct timespec d; d.tv_sec = (time_t)(left / 1000000000LL); d.tv_nsec = (long)(left % 1000000000LL);
                        while (nanosleep(&d, &d) != 0 && errno == EINTR) { } }
    }
    return RKNN_SUCC;
}
int rknn_outputs_get(rknn_context c, uint32_t n, rknn_output out[], rknn_output_extend *e) {
    uint32_t k, i; size_t off = 0;
    (void)e;
    if (!M.ready || c != 1) return RKNN_ERR_CTX_INVALID;
    if (!M.result || n != (uint32_t)M.n_out) return RKNN_ERR_PARAM_INVALID;
    for (k = 0; k < n; k++) {  /* every caller's buffer checked before any is written */
        const tensor_t *t = &M.out[out[k].index < n ? out[k].index : 0];
        size_t size = out[k].want_float ? elems(t) * 4 : elems(t) * type_size(t->type);
        if (out[k].is_prealloc && !M.ignore_prealloc && (!out[k].buf || out[k].size < size)) return RKNN_ERR_PARAM_INVALID;
    }
    for (k = 0; k < n; k++) {
        const tensor_t *t = &M.out[out[k].index < n ? out[k].index : 0]; uint32_t cnt = elems(t); size_t es = type_size(t->type);
        size_t size = out[k].want_float ? cnt * 4 : cnt * es; unsigned char *dst;
        if (out[k].is_prealloc && !M.ignore_prealloc) dst = out[k].buf;  /* the caller's buffer */
        else { dst = malloc(size); out[k].is_prealloc = 0; }  /* released by rknn_outputs_release */
        if (out[k].want_float && t->type != RKNN_TENSOR_FLOAT32) {  /* affine dequantisation: (q - zp) * scale */
            for (i = 0; i < cnt; i++) { float v = (float)((get_value(M.result + off + i * es, t->type) - t->zp) * t->scale); memcpy(dst + i * 4, &v, 4); }
        } else memcpy(dst, M.result + off, size);
        out[k].buf = dst; out[k].size = (uint32_t)size; off += cnt * es;
    }
    return RKNN_SUCC;
}
int rknn_outputs_release(rknn_context c, uint32_t n, rknn_output out[]) {
    uint32_t k; (void)c;
    for (k = 0; k < n; k++) if (!out[k].is_prealloc) { free(out[k].buf); out[k].buf = NULL; }
    return RKNN_SUCC;
}
