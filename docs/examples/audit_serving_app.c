/* A small serving app on the C runtime using rkdet's C audit library (docs/AUDIT.md, "The C library").
 *
 * On a board the inference is rknn_run() of the user's SDK; here it is a tiny fixed float32 MLP
 * (8 -> 16 -> 4, weights from a fixed LCG), an emulated runtime, a test double named as such: real
 * computation, never an NPU result. The audit calls are what an app on the C runtime adds:
 * rkdet_audit_open, rkdet_audit_inference per request, rkdet_audit_canary every N, rkdet_audit_shadow on a
 * sample, rkdet_audit_close.
 *
 *   cc -O2 -pthread -I rkdet/onboard/c docs/examples/audit_serving_app.c rkdet/onboard/c/rkdet_audit.c -lm
 *   ./a.out --log DIR --build HEX64 [--prom DIR] [--count N] [--canary-every N] [--max-file-bytes N]
 *           [--max-files N] [--drift-after N] [--background QUEUE] [--shadow PERTURB]
 *           [--bench-bytes N [--bench-out-bytes M] [--count ROUNDS]]
 *
 * --background QUEUE: a recorder thread hashes and appends (the app's thread copies onto a queue of QUEUE).
 * --shadow PERTURB: every 10th input also runs on a candidate whose weights moved by PERTURB (0: the same).
 * --drift-after N plants a fault: after N inferences the runtime's outputs change (the canary must find it).
 * --bench-bytes N: instead of serving, time the audit record of an N-byte uint8 input and an M-byte (default N)
 * float32 output, ROUNDS times (default 20), 10 ms apart (an inference's time: a recorder thread drains
 * meanwhile); bench/audit_c_overhead.py reads the line it prints. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rkdet_audit.h"

#define BACKEND "emulated-c"  /* what made the outputs */

static float W1[8][16], W2[16][4], W2_CANDIDATE[16][4];
static unsigned long calls, drift_after;

static void init_weights(void) {
    unsigned long s = 12345; int i, j;
    for (i = 0; i < 8; i++) for (j = 0; j < 16; j++) { s = s * 1103515245u + 12345u; W1[i][j] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f; }
    for (i = 0; i < 16; i++) for (j = 0; j < 4; j++) { s = s * 1103515245u + 12345u; W2[i][j] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f; }
}
static void mlp(const float x[8], float y[4], float w2[16][4]) {
    float h[16]; int i, j;
    for (j = 0; j < 16; j++) { h[j] = 0; for (i = 0; i < 8; i++) h[j] += x[i] * W1[i][j]; if (h[j] < 0) h[j] = 0; }
    for (j = 0; j < 4; j++) { y[j] = 0; for (i = 0; i < 16; i++) y[j] += h[i] * w2[i][j]; }
}
/* the emulated runtime: what rknn_run + rknn_outputs_get give on a board */
static void infer(const float x[8], float y[4]) {
    calls++;
    mlp(x, y, W2);
    if (drift_after && calls > drift_after) y[0] += 1e-3f;  /* the planted fault */
}
/* the candidate build (the shadow): the same weights, W2 moved by PERTURB toward larger magnitude */
static void candidate_init(float perturb) {
    int i, j;
    for (i = 0; i < 16; i++) for (j = 0; j < 4; j++) W2_CANDIDATE[i][j] = W2[i][j] + (W2[i][j] > 0 ? perturb : W2[i][j] < 0 ? -perturb : 0);
}
static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec / 1e9; }
static float rnd(unsigned long *s) { *s = *s * 6364136223846793005ul + 1442695040888963407ul; return (float)((*s >> 33) % 20001) / 10000.0f - 1.0f; }

static double cpu_s(void) { struct timespec ts; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); return ts.tv_sec + ts.tv_nsec / 1e9; }
static int cmp_double(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

static int bench(rkdet_audit *a, size_t in_bytes, size_t out_bytes, int rounds) {
    /* the audit record of a uint8 input and a float32 output of these sizes: this thread's CPU per record
     * (median) and the best wall time */
    unsigned char *in = malloc(in_bytes ? in_bytes : 1); float *out = malloc(out_bytes / 4 * 4 + 4); size_t i;
    uint64_t in_shape[4] = {1, 1, 1, in_bytes}, out_shape[2] = {1, out_bytes / 4};
    rkdet_audit_tensor ti = {"|u1", 4, in_shape, NULL, in_bytes}, to = {"<f4", 2, out_shape, NULL, out_bytes / 4 * 4};
    double *cpu = malloc(sizeof(double) * (size_t)rounds), best = 1e9; int k;
    if (!in || !out || !cpu || rounds < 1) return 1;
    for (i = 0; i < in_bytes; i++) in[i] = (unsigned char)i;
    for (i = 0; i < out_bytes / 4; i++) out[i] = (float)i;
    ti.data = in; to.data = out;
    for (k = 0; k < rounds; k++) {
        double w0 = now_s(), c0 = cpu_s();
        rkdet_audit_inference(a, &ti, 1, &to, 1, 1000);
        cpu[k] = cpu_s() - c0;
        if (now_s() - w0 < best) best = now_s() - w0;
        { struct timespec gap = {0, 10 * 1000 * 1000}; nanosleep(&gap, NULL); }  /* the next inference's time */
    }
    qsort(cpu, (size_t)rounds, sizeof *cpu, cmp_double);
    printf("bench bytes=%lu out_bytes=%lu record_cpu_s=%.9f record_wall_best_s=%.9f sha256=%s\n", (unsigned long)in_bytes,
           (unsigned long)(out_bytes / 4 * 4), cpu[rounds / 2], best, rkdet_audit_hash_impl());
    free(in); free(out); free(cpu);
    return 0;
}

int main(int argc, char **argv) {
    rkdet_audit_settings s; rkdet_audit *a; char err[512]; int i;
    unsigned long count = 2000, canary_every = 500, served = 0, seed = 1, bench_bytes = 0, bench_out = 0;
    float perturb = -1;  /* < 0: no shadow */
    float golden[3][8], golden_out[3][4];
    memset(&s, 0, sizeof s);
    for (i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--log")) s.log_dir = v; else if (!strcmp(k, "--prom")) s.prom_dir = v;
        else if (!strcmp(k, "--build")) s.build = v; else if (!strcmp(k, "--count")) count = strtoul(v, NULL, 10);
        else if (!strcmp(k, "--canary-every")) canary_every = strtoul(v, NULL, 10);
        else if (!strcmp(k, "--max-file-bytes")) s.max_file_bytes = strtoul(v, NULL, 10);
        else if (!strcmp(k, "--max-files")) s.max_files = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--drift-after")) drift_after = strtoul(v, NULL, 10);
        else if (!strcmp(k, "--bench-bytes")) bench_bytes = strtoul(v, NULL, 10);
        else if (!strcmp(k, "--bench-out-bytes")) bench_out = strtoul(v, NULL, 10);
        else if (!strcmp(k, "--background")) s.background_queue = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(k, "--shadow")) perturb = strtof(v, NULL);
        else { fprintf(stderr, "audit_serving_app: unknown option %s\n", k); return 2; }
    }
    if (i < argc) { fprintf(stderr, "audit_serving_app: %s needs a value\n", argv[i]); return 2; }
    if (perturb >= 0) { s.shadow_build = "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"; s.shadow_report_every = 50; }
    a = rkdet_audit_open(&s, err, sizeof err);
    if (!a) { fprintf(stderr, "%s\n", err); return 2; }  /* this app refuses to serve unaudited */
    if (bench_bytes) {
        i = bench(a, bench_bytes, bench_out ? bench_out : bench_bytes, count < 2000 ? (int)count : 20);
        rkdet_audit_close(a);
        return i;
    }
    init_weights();
    candidate_init(perturb > 0 ? perturb : 0);
    for (i = 0; i < 3; i++) { int j; for (j = 0; j < 8; j++) golden[i][j] = rnd(&seed); }
    {
        uint64_t xs[2] = {1, 8}, ys[2] = {1, 4};
        rkdet_audit_tensor gt[3];
        unsigned long n;
        for (i = 0; i < 3; i++) { infer(golden[i], golden_out[i]); gt[i] = (rkdet_audit_tensor){"<f4", 2, ys, golden_out[i], sizeof golden_out[i]}; }
        rkdet_audit_canary(a, gt, 3, 1);  /* the baseline: the first run after start */
        for (n = 1; n <= count; n++) {
            float x[8], y[4]; double t0; int j;
            for (j = 0; j < 8; j++) x[j] = rnd(&seed);
            t0 = now_s(); infer(x, y);
            {
                rkdet_audit_tensor ti = {"<f4", 2, xs, x, sizeof x}, to = {"<f4", 2, ys, y, sizeof y};
                rkdet_audit_inference(a, &ti, 1, &to, 1, (uint64_t)((now_s() - t0) * 1e6));  /* status ignored: serving goes on */
            }
            served++;
            if (perturb >= 0 && n % 10 == 0) {  /* the shadow: every 10th live input also runs on the candidate */
                float yc[4]; rkdet_audit_tensor ti = {"<f4", 2, xs, x, sizeof x}, to = {"<f4", 2, ys, y, sizeof y},
                                                tc = {"<f4", 2, ys, yc, sizeof yc};
                mlp(x, yc, W2_CANDIDATE);
                rkdet_audit_shadow(a, &ti, 1, &to, &tc, 1);  /* the candidate's answer goes nowhere else */
            }
            if (canary_every && n % canary_every == 0) {
                for (i = 0; i < 3; i++) { infer(golden[i], golden_out[i]); gt[i].data = golden_out[i]; }
                rkdet_audit_canary(a, gt, 3, 1);
            }
        }
    }
    {
        rkdet_audit_counters c; rkdet_audit_get_counters(a, &c);
        rkdet_audit_close(a);
        printf("served %lu inferences (%s); canary failures %llu; audit records lost %llu\n", served, BACKEND,
               (unsigned long long)c.canary_failures, (unsigned long long)c.write_failures);
    }
    return 0;
}
