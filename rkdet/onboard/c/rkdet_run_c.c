/* rkdet-run-c: rkdet-run's job through Rockchip's C API (librknnrt), for boards without Python.
 *
 * rkdet's own source (plain C99 and POSIX threads, no dependency but the SDK's rknn_api.h, which rkdet never
 * ships: `rkdet runner build --sdk DIR` compiles this file against the header in the user's SDK, -pthread).
 * The main thread only infers, into runner-owned output buffers (is_prealloc); one recorder thread does the
 * result work below for each inference while the next one runs (the ring, RING_SLOTS).
 * It writes the same result set as rkdet-run (docs/FORMATS.md "Result set"): run.json, index.jsonl
 * (one whole line written per inference; fsync'd as INDEX_FSYNC_S says), snapshots.jsonl, outputs/<hash>.npy (each distinct output
 * once, named by THE output hash: sha256(dtype.str "|" shape "|" C-order bytes)) and summary.json.
 * Every file is written to a temporary name in the same folder, fsync'd and renamed; an output file
 * exists before the index line naming it, so a SIGKILL leaves every recorded inference readable and loses
 * at most the RING_SLOTS inferred but not yet recorded, never part of a line or file (a killed process's
 * writes stay in the page cache; only a power cut needs the index's fsync).
 * It records every setting lite2 chooses implicitly: input type/fmt/pass_through, want_float, the
 * core mask, the runtime's API and driver versions and the model's custom string (docs/RUNNER_C.md).
 *
 * Exit codes as rkdet-run: 0 deterministic, 1 diverged, 2 bad input, 3 runtime trouble,
 * 5 model refused (fingerprint/sha256), 130 interrupted. Errors are one line on stderr.
 */
#define _GNU_SOURCE  /* sched_setaffinity */
#define _FILE_OFFSET_BITS 64  /* armhf: readdir/stat on 64-bit inodes and sizes (EOVERFLOW otherwise) */
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <pthread.h>
#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "rknn_api.h"

#define EXIT_OK 0
#define EXIT_DIFFERENT 1
#define EXIT_BAD_INPUT 2
#define EXIT_BOARD 3
#define EXIT_REFUSED 5
#define EXIT_INTERRUPTED 130
#define MAX_INPUT_FILES 4096
#define MAX_OUTPUTS 64
#define MAX_FILE_BYTES ((size_t)1 << 31)
/* THE index durability policy, rkdet-run's INDEX_FSYNC_S (rkdet/onboard/resultset.py; a test checks they are
 * equal): index.jsonl is fsync'd at the first line at least this many seconds after the previous fsync, at
 * the end and on SIGINT/SIGTERM; --index-fsync-s 0 fsyncs every line. A power cut can lose this many
 * seconds' worth of index lines; a SIGKILL loses none. Recorded in run.json "index_fsync_s". */
#define INDEX_FSYNC_S 1.0

static volatile sig_atomic_t g_stop = 0;
static void on_stop(int sig) { (void)sig; g_stop = 1; }

/* ---------- failure: one line, the run record closed as failed ---------- */
static char g_run_path[4096];
static char g_error[1024];
static int fail(int code, const char *fmt, ...);

/* ---------- sha256: the one C definition (rkdet_sha256.h, beside this file; the CPU's sha256 instructions
 * where it has them) ---------- */
#include "rkdet_sha256.h"
typedef rkdet_sha256_ctx sha256_ctx;
#define sha256_init rkdet_sha256_init
#define sha256_update rkdet_sha256_update
#define sha256_hex rkdet_sha256_hex

/* ---------- a growing string, and JSON text ---------- */
typedef struct { char *s; size_t n, cap; } buf_t;
static void b_add(buf_t *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        b->s = (char *)realloc(b->s, cap);
        if (!b->s) { fputs("rkdet-run-c: out of memory\n", stderr); exit(EXIT_BOARD); }
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n); b->n += n; b->s[b->n] = 0;
}
static void b_puts(buf_t *b, const char *s) { b_add(b, s, strlen(s)); }
static void b_printf(buf_t *b, const char *fmt, ...) {
    char tmp[512]; va_list ap; int n;
    va_start(ap, fmt); n = vsnprintf(tmp, sizeof tmp, fmt, ap); va_end(ap);
    if (n > 0) b_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}
/* a JSON string (control characters and non-ASCII bytes escaped as \u00XX: a board's text never
   reaches a terminal raw and the file stays ASCII whatever the runtime's strings hold) */
static void b_jstr(buf_t *b, const char *s) {
    b_puts(b, "\"");
    if (s == NULL) s = "";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"') b_puts(b, "\\\""); else if (c == '\\') b_puts(b, "\\\\");
        else if (c < 0x20 || c >= 0x7f) b_printf(b, "\\u%04x", c);
        else b_add(b, (const char *)&c, 1);
    }
    b_puts(b, "\"");
}
static void b_jstr_or_null(buf_t *b, const char *s) { if (s) b_jstr(b, s); else b_puts(b, "null"); }

/* ---------- files: atomic replace, append one whole line ---------- */
static int write_atomic(const char *path, const void *data, size_t n) {
    char tmp[4200]; int fd; size_t done = 0; unsigned attempt;
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) { errno = EEXIST; return -1; } /* never rename over a link/device/FIFO */
    for (attempt = 0; ; attempt++) {
        snprintf(tmp, sizeof tmp, "%s.tmp-%ld-%u", path, (long)getpid(), attempt);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd >= 0 || errno != EEXIST || attempt > 100) break;
    }
    if (fd < 0) return -1;
    while (done < n) {
        ssize_t w = write(fd, (const char *)data + done, n - done);
        if (w < 0) { if (errno == EINTR) continue; goto bad; }
        done += (size_t)w;
    }
    if (fsync(fd) != 0) goto bad;
    if (close(fd) != 0) { fd = -1; goto bad; }
    if (rename(tmp, path) != 0) { fd = -1; goto bad; }
    return 0;
bad: { int e = errno; if (fd >= 0) close(fd); unlink(tmp); errno = e; }
    return -1;
}
/* index.jsonl: its descriptor, its size after the last whole line (cut back to it on a failed write), and
 * whether lines were written since the last fsync (INDEX_FSYNC_S) */
static int g_idx_fd = -1;
static off_t g_idx_size;
static int g_idx_unsynced;
static double g_idx_synced_at;
static int index_sync(void) {
    if (g_idx_fd < 0 || !g_idx_unsynced) return 0;
    if (fsync(g_idx_fd) != 0) return -1;
    g_idx_unsynced = 0; return 0;
}
static int append_line(const char *line, size_t n, double now, double fsync_every_s) {
    size_t done = 0; errno = 0;
    while (done < n) {
        ssize_t w = write(g_idx_fd, line + done, n - done);
        if (w < 0) { if (errno == EINTR) continue; break; }
        done += (size_t)w;
    }
    if (done == n) {
        g_idx_unsynced = 1;
        if (fsync_every_s > 0 && now - g_idx_synced_at < fsync_every_s) { g_idx_size += (off_t)n; return 0; }
        if (index_sync() == 0) { g_idx_synced_at = now; g_idx_size += (off_t)n; return 0; }
    }
    { int e = errno ? errno : ENOSPC; if (ftruncate(g_idx_fd, g_idx_size) != 0) { /* keep the first error */ } errno = e; }
    return -1;
}
static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb"); unsigned char *data; struct stat st;
    if (!f) return NULL;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > MAX_FILE_BYTES) { fclose(f); errno = EFBIG; return NULL; }
    data = (unsigned char *)malloc((size_t)st.st_size + 1);
    if (!data || fread(data, 1, (size_t)st.st_size, f) != (size_t)st.st_size) { free(data); fclose(f); errno = EIO; return NULL; }
    fclose(f); *size = (size_t)st.st_size; return data;
}
static void sha256_of(const void *data, size_t n, char out[65]) {
    sha256_ctx c; sha256_init(&c); sha256_update(&c, data, n); sha256_hex(&c, out);
}

/* ---------- dtypes: rknn tensor types as numpy names them ---------- */
typedef struct { int type; const char *str; const char *name; size_t size; } dtype_t;
static const dtype_t DTYPES[] = {
    {RKNN_TENSOR_FLOAT32, "<f4", "float32", 4}, {RKNN_TENSOR_FLOAT16, "<f2", "float16", 2},
    {RKNN_TENSOR_INT8, "|i1", "int8", 1}, {RKNN_TENSOR_UINT8, "|u1", "uint8", 1},
    {RKNN_TENSOR_INT16, "<i2", "int16", 2}, {RKNN_TENSOR_UINT16, "<u2", "uint16", 2},
    {RKNN_TENSOR_INT32, "<i4", "int32", 4}, {RKNN_TENSOR_UINT32, "<u4", "uint32", 4},
    {RKNN_TENSOR_INT64, "<i8", "int64", 8}, {RKNN_TENSOR_BOOL, "|b1", "bool", 1}};
static const dtype_t *dtype_by_type(int type) {
    size_t i; for (i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++) if (DTYPES[i].type == type) return &DTYPES[i];
    return NULL;
}
static const dtype_t *dtype_by_str(const char *s) {
    size_t i;
    for (i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++) {
        const char *d = DTYPES[i].str;
        if (!strcmp(s, d) || (d[0] == '|' && (s[0] == '<' || s[0] == '>' || s[0] == '=') && !strcmp(s + 1, d + 1))) return &DTYPES[i];
    }
    return NULL;
}
static const char *fmt_name(int fmt) {
    return fmt == RKNN_TENSOR_NCHW ? "nchw" : fmt == RKNN_TENSOR_NHWC ? "nhwc" : fmt == RKNN_TENSOR_NC1HWC2 ? "nc1hwc2" : "undefined";
}

/* ---------- .npy (format 1.0/2.0/3.0, C order, little-endian) ---------- */
typedef struct {
    char name[256]; char file[256]; char sha256[65];
    const dtype_t *dtype; uint32_t ndim; uint64_t shape[RKNN_MAX_DIMS];
    unsigned char *raw; size_t raw_size; unsigned char *data; size_t nbytes;
} sample_t;

static int parse_npy(sample_t *s, const char *path) {
    const unsigned char *p = s->raw; size_t hlen, off; char header[4096], descr[16] = {0}; const char *q;
    uint64_t count = 1; uint32_t i;
    if (s->raw_size < 10 || memcmp(p, "\x93NUMPY", 6) != 0) return fail(EXIT_BAD_INPUT, "%s: not a numpy .npy file (no NUMPY magic)", path);
    if (p[6] == 1) { hlen = (size_t)p[8] | (size_t)p[9] << 8; off = 10; }
    else if (p[6] == 2 || p[6] == 3) { if (s->raw_size < 12) return fail(EXIT_BAD_INPUT, "%s: truncated .npy header", path);
        hlen = (size_t)p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24; off = 12; }
    else return fail(EXIT_BAD_INPUT, "%s: .npy format version %d is not supported", path, p[6]);
    if (hlen >= sizeof header || off + hlen > s->raw_size) return fail(EXIT_BAD_INPUT, "%s: .npy header too long or truncated", path);
    memcpy(header, p + off, hlen); header[hlen] = 0;
    q = strstr(header, "'descr':");
    if (!q || sscanf(q + 8, " '%15[^']'", descr) != 1 || !(s->dtype = dtype_by_str(descr)))
        return fail(EXIT_BAD_INPUT, "%s: dtype %s is not one the runtime takes", path, descr[0] ? descr : "?");
    if (descr[0] == '>') return fail(EXIT_BAD_INPUT, "%s: big-endian arrays are not supported; save it little-endian", path);
    q = strstr(header, "'fortran_order':");
    if (!q || strncmp(q + 16 + strspn(q + 16, " "), "False", 5) != 0) return fail(EXIT_BAD_INPUT, "%s: Fortran-order arrays are not supported; save it C-contiguous", path);
    q = strstr(header, "'shape':");
    if (!q || !(q = strchr(q, '('))) return fail(EXIT_BAD_INPUT, "%s: .npy header has no shape", path);
    q++; s->ndim = 0;
    for (;;) {
        char *end; unsigned long long v;
        q += strspn(q, " ,");
        if (*q == ')') break;
        v = strtoull(q, &end, 10);
        if (end == q || s->ndim >= RKNN_MAX_DIMS) return fail(EXIT_BAD_INPUT, "%s: unreadable .npy shape", path);
        if (v && count > (uint64_t)MAX_FILE_BYTES / v) return fail(EXIT_BAD_INPUT, "%s: .npy shape is larger than the file can hold", path);
        s->shape[s->ndim++] = v; count *= v; q = end;
    }
    for (i = 0; i < s->ndim; i++) if (s->shape[i] == 0) count = 0;
    s->data = s->raw + off + hlen; s->nbytes = (size_t)(count * s->dtype->size);
    if (off + hlen + s->nbytes != s->raw_size) return fail(EXIT_BAD_INPUT, "%s: holds %lu data bytes, its header says %lu", path,
                                                         (unsigned long)(s->raw_size - off - hlen), (unsigned long)s->nbytes);
    return 0;
}

/* the .npy bytes numpy's np.save writes for a C-order array (format 1.0, header padded to 64) */
static void npy_bytes(buf_t *out, const dtype_t *dt, uint32_t ndim, const uint64_t *shape, const void *data, size_t n) {
    buf_t h = {0}; uint32_t i; size_t total; unsigned char pre[10];
    b_printf(&h, "{'descr': '%s', 'fortran_order': False, 'shape': (", dt->str);
    for (i = 0; i < ndim; i++) b_printf(&h, i + 1 == ndim && ndim == 1 ? "%llu," : (i + 1 < ndim ? "%llu, " : "%llu"), (unsigned long long)shape[i]);
    b_puts(&h, "), }");
    total = 10 + h.n + 1;
    while (total % 64) { b_puts(&h, " "); total++; }
    b_puts(&h, "\n");
    memcpy(pre, "\x93NUMPY\x01\x00", 8); pre[8] = (unsigned char)(h.n & 0xff); pre[9] = (unsigned char)(h.n >> 8);
    b_add(out, (const char *)pre, 10); b_add(out, h.s, h.n); b_add(out, (const char *)data, n);
    free(h.s);
}
/* THE output hash (rkdet/onboard/hashing.py output_hash): sha256(dtype.str "|" dims "," "|" bytes) */
static void output_hash(const dtype_t *dt, uint32_t ndim, const uint64_t *shape, const void *data, size_t n, char out[65]) {
    sha256_ctx c; buf_t h = {0}; uint32_t i;
    b_puts(&h, dt->str); b_puts(&h, "|");
    for (i = 0; i < ndim; i++) b_printf(&h, i ? ",%llu" : "%llu", (unsigned long long)shape[i]);
    b_puts(&h, "|");
    sha256_init(&c); sha256_update(&c, h.s, h.n); sha256_update(&c, data, n); sha256_hex(&c, out);
    free(h.s);
}

/* Each input's previous outputs, kept so that a repeat equal byte for byte reuses its hash (a memcmp, not a
 * sha256 of megabytes): what rkdet-run's recorder does. Bounded: past SEEN_BUDGET bytes, outputs are hashed. */
#define SEEN_BUDGET ((size_t)256 << 20)
typedef struct { unsigned char *buf; size_t n; char hash[65]; } seen_t;
static size_t g_seen_bytes;
/* returns 1 when the hash was reused (the output file was written when it was first hashed), else 0 */
static int hash_or_reuse(seen_t *sv, const dtype_t *dt, uint32_t ndim, const uint64_t *shape, const void *data, size_t n,
                         char out[65]) {
    if (sv->buf && sv->n == n && !memcmp(sv->buf, data, n)) { memcpy(out, sv->hash, 65); return 1; }
    output_hash(dt, ndim, shape, data, n, out);
    if (!sv->buf && g_seen_bytes + n <= SEEN_BUDGET && (sv->buf = (unsigned char *)malloc(n ? n : 1)) != NULL) {
        g_seen_bytes += n; sv->n = n;
    }
    if (sv->buf && sv->n == n) { memcpy(sv->buf, data, n); memcpy(sv->hash, out, 65); }
    return 0;
}

/* ---------- settings ---------- */
typedef struct {
    const char *model, *inputs, *out, *core_mask, *expect_fp, *expect_sha, *input_fmt, *cpu_affinity;
    long repeats, warmup, snapshot_every, npu_cores; int want_float, pass_through; double index_fsync_s;
} args_t;

static const char *USAGE =
"usage: rkdet-run-c --model M.rknn --inputs DIR --repeats N --out DIR [--warmup N] [--core-mask auto|0|1|2|0_1|0_1_2]\n"
"                   [--want-float 1|0] [--pass-through 0|1] [--input-fmt model|nchw|nhwc] [--snapshot-every K]\n"
"                   [--expect-fingerprint HEX64] [--expect-sha256 HEX64] [--cpu-affinity 4,5] [--npu-cores N]\n"
"                   [--index-fsync-s S]   (fsync index.jsonl at most every S s, at the end and on SIGINT/SIGTERM;\n"
"                                          0: every line; default 1.0: a power cut can lose S s of lines)\n"
"exit codes: 0 deterministic, 1 diverged, 2 bad input, 3 runtime trouble, 5 model refused, 130 interrupted\n";

static int is_hex64(const char *s) {
    size_t i; if (strlen(s) != 64) return 0;
    for (i = 0; i < 64; i++) if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}
static int parse_long(const char *flag, const char *v, long min, long *out) {
    char *end; long x; errno = 0; x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < min) return fail(EXIT_BAD_INPUT, "%s %s: expected an integer >= %ld", flag, v, min);
    *out = x; return 0;
}
static int parse_args(int argc, char **argv, args_t *a) {
    int i;
    memset(a, 0, sizeof *a); a->core_mask = "auto"; a->input_fmt = "model"; a->want_float = 1; a->repeats = -1; a->snapshot_every = 10;
    a->index_fsync_s = INDEX_FSYNC_S;
    for (i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) { fputs(USAGE, stdout); exit(EXIT_OK); }
        if (!v) return fail(EXIT_BAD_INPUT, "%s: expects a value", k);
        i++;
        if (!strcmp(k, "--model")) a->model = v; else if (!strcmp(k, "--inputs")) a->inputs = v;
        else if (!strcmp(k, "--out")) a->out = v; else if (!strcmp(k, "--core-mask")) a->core_mask = v;
        else if (!strcmp(k, "--expect-fingerprint")) a->expect_fp = v; else if (!strcmp(k, "--expect-sha256")) a->expect_sha = v;
        else if (!strcmp(k, "--input-fmt")) a->input_fmt = v;
        else if (!strcmp(k, "--cpu-affinity")) a->cpu_affinity = v;
        else if (!strcmp(k, "--npu-cores")) { if (parse_long(k, v, 1, &a->npu_cores)) return -1; }
        else if (!strcmp(k, "--contexts")) { if (strcmp(v, "1")) return fail(EXIT_BAD_INPUT, "--contexts %s: rkdet-run-c runs one context", v); }
        else if (!strcmp(k, "--repeats")) { if (parse_long(k, v, 1, &a->repeats)) return -1; }
        else if (!strcmp(k, "--warmup")) { if (parse_long(k, v, 0, &a->warmup)) return -1; }
        else if (!strcmp(k, "--snapshot-every")) { if (parse_long(k, v, 0, &a->snapshot_every)) return -1; }
        else if (!strcmp(k, "--index-fsync-s")) {
            char *end; errno = 0; a->index_fsync_s = strtod(v, &end);
            if (errno || *end || end == v || !(a->index_fsync_s >= 0) || a->index_fsync_s > 1e9)
                return fail(EXIT_BAD_INPUT, "--index-fsync-s %s: expected a number of seconds >= 0 (0: fsync every line)", v);
        }
        else if (!strcmp(k, "--want-float") || !strcmp(k, "--pass-through")) {
            if (strcmp(v, "0") && strcmp(v, "1")) return fail(EXIT_BAD_INPUT, "%s %s: expected 0 or 1", k, v);
            if (k[2] == 'w') a->want_float = v[0] == '1'; else a->pass_through = v[0] == '1';
        }
        else if (!strcmp(k, "--backend")) { if (strcmp(v, "rknn_c")) return fail(EXIT_BAD_INPUT, "--backend %s: rkdet-run-c drives only rknn_c", v); }
        else return fail(EXIT_BAD_INPUT, "%s: unknown flag (see --help)", k);
    }
    if (!a->model || !a->inputs || !a->out || a->repeats < 1) return fail(EXIT_BAD_INPUT, "--model, --inputs, --repeats and --out are required (see --help)");
    if (strcmp(a->input_fmt, "model") && strcmp(a->input_fmt, "nchw") && strcmp(a->input_fmt, "nhwc"))
        return fail(EXIT_BAD_INPUT, "--input-fmt %s: expected model, nchw or nhwc", a->input_fmt);
    if ((a->expect_fp && !is_hex64(a->expect_fp)) || (a->expect_sha && !is_hex64(a->expect_sha)))
        return fail(EXIT_BAD_INPUT, "--expect-fingerprint/--expect-sha256 want 64 lowercase hex digits");
    return 0;
}
static int core_mask_value(const char *m, int *out) {
    static const struct { const char *name; int v; } M[] = {  /* the documented RKNN_NPU_CORE_* values */
        {"auto", 0}, {"0", 1}, {"1", 2}, {"2", 4}, {"0_1", 3}, {"0_1_2", 7}};
    size_t i; for (i = 0; i < sizeof M / sizeof M[0]; i++) if (!strcmp(M[i].name, m)) { *out = M[i].v; return 0; }
    return fail(EXIT_BAD_INPUT, "--core-mask %s: expected one of auto, 0, 1, 2, 0_1, 0_1_2 (one mask per run)", m);
}

/* ---------- --cpu-affinity: pin, and record what the kernel applied ---------- */
static void pin_cpus(const char *text, char *applied, size_t room) {
    cpu_set_t set; const char *p = text; int cpu, any = 0, n = 0; buf_t b = {0};
    CPU_ZERO(&set);
    while (*p) {
        char *end; long c = strtol(p, &end, 10);
        if (end == p || c < 0 || c >= CPU_SETSIZE) fail(EXIT_BAD_INPUT, "--cpu-affinity %s: expected CPU numbers separated by commas, e.g. 4,5", text);
        CPU_SET((int)c, &set); any = 1; p = end + (*end == ',');
        if (*end && *end != ',') fail(EXIT_BAD_INPUT, "--cpu-affinity %s: expected CPU numbers separated by commas, e.g. 4,5", text);
    }
    if (!any) fail(EXIT_BAD_INPUT, "--cpu-affinity %s: no CPU named", text);
    if (sched_setaffinity(0, sizeof set, &set) != 0) fail(EXIT_BAD_INPUT, "--cpu-affinity %s: the kernel refused (%s); list CPUs this board has online", text, strerror(errno));
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    b_puts(&b, "[");
    for (cpu = 0; cpu < CPU_SETSIZE; cpu++) if (CPU_ISSET(cpu, &set)) b_printf(&b, n++ ? ", %d" : "%d", cpu);
    b_puts(&b, "]");
    snprintf(applied, room, "%s", b.s); free(b.s);
}

/* ---------- run.json ---------- */
typedef struct {
    args_t *a; char model_sha[65]; char api[300], drv[300]; char custom[1100]; char fp[65]; int have_custom;
    buf_t check; sample_t *samples; int n_samples; rknn_tensor_attr *in_attr, *out_attr; uint32_t n_in, n_out;
    int in_type, in_fmt, emulated, emulates_npu; double started; char affinity[600];
    char names[MAX_OUTPUTS][RKNN_MAX_NAME_LEN + 16];
} run_t;

static double now_unix(void) { struct timespec t; clock_gettime(CLOCK_REALTIME, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static double now_mono(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static void run_json(run_t *r, buf_t *b, const char *status, double finished) {
    struct utsname u; int i; uint32_t k;
    b->n = 0; b_puts(b, "{");
    b_printf(b, "\"affinity\": %s, \"backend\": \"rknn_c\", \"backend_detail\": ", r->affinity[0] ? r->affinity : "null");
#ifdef RKDET_RKNPU1
    { char detail[700]; snprintf(detail, sizeof detail, "rkdet-run-c on librknn_api (RKNPU1) %s (driver %s)", r->api, r->drv); b_jstr(b, detail); }
#else
    { char detail[700]; snprintf(detail, sizeof detail, "rkdet-run-c on librknnrt %s (driver %s)", r->api, r->drv); b_jstr(b, detail); }
#endif
    b_printf(b, ", \"backend_options\": {\"core_mask\": "); b_jstr(b, r->a->core_mask);
    b_printf(b, ", \"input_fmt\": \"%s\", \"input_type\": \"%s\", \"pass_through\": %d, \"want_float\": %d}",
             fmt_name(r->in_fmt), dtype_by_type(r->in_type) ? dtype_by_type(r->in_type)->name : "?", r->a->pass_through, r->a->want_float);
    b_printf(b, ", \"contexts\": 1, \"core_mask\": "); b_jstr(b, r->a->core_mask);
    b_puts(b, ", \"embedded_fingerprint\": "); b_jstr_or_null(b, r->fp[0] ? r->fp : NULL);
    b_printf(b, ", \"emulated\": %s, \"emulates_npu\": %s, \"error\": ", r->emulated ? "true" : "false",
             r->emulates_npu ? "true" : "false");
    b_jstr_or_null(b, g_error[0] ? g_error : NULL);
    if (finished > 0) b_printf(b, ", \"finished_unix\": %.6f", finished); else b_puts(b, ", \"finished_unix\": null");
    { char num[40]; snprintf(num, sizeof num, "%.17g", r->a->index_fsync_s);  /* a JSON float, as rkdet-run's */
      b_printf(b, ", \"index_fsync_s\": %s%s", num, strpbrk(num, ".eE") ? "" : ".0"); }
    b_puts(b, ", \"inputs\": [");
    for (i = 0; i < r->n_samples; i++) {
        sample_t *s = &r->samples[i];
        b_puts(b, i ? ", {\"dtype\": " : "{\"dtype\": "); b_jstr(b, s->dtype->name);
        b_puts(b, ", \"file\": "); b_jstr(b, s->file); b_puts(b, ", \"name\": "); b_jstr(b, s->name);
        b_puts(b, ", \"sha256\": "); b_jstr(b, s->sha256); b_puts(b, ", \"shape\": [");
        for (k = 0; k < s->ndim; k++) b_printf(b, k ? ", %llu" : "%llu", (unsigned long long)s->shape[k]);
        b_puts(b, "]}");
    }
    b_puts(b, "], \"model\": {\"path\": ");
    { const char *base = strrchr(r->a->model, '/'); b_jstr(b, base ? base + 1 : r->a->model); }
    b_puts(b, ", \"sha256\": "); b_jstr(b, r->model_sha); b_puts(b, "}, \"model_check\": ");
    b_add(b, r->check.s, r->check.n);
    b_puts(b, ", \"outputs\": [");
    for (k = 0; k < r->n_out; k++) { if (k) b_puts(b, ", "); b_jstr(b, r->names[k]); }
    b_puts(b, "], \"platform\": ");
    if (uname(&u) == 0) { char p[800]; snprintf(p, sizeof p, "%s-%s-%s", u.sysname, u.release, u.machine); b_jstr(b, p); } else b_puts(b, "null");
    b_printf(b, ", \"python\": null, \"repeats\": %ld, \"schema\": \"rkdet.run/1\", \"snapshot_every\": %ld", r->a->repeats, r->a->snapshot_every);
    b_printf(b, ", \"stack\": {\"custom_string\": "); b_jstr_or_null(b, r->have_custom ? r->custom : NULL);
    b_puts(b, ", \"runner\": \"rkdet-run-c\", \"runtime_api_version\": "); b_jstr(b, r->api);
    b_puts(b, ", \"runtime_driver_version\": "); b_jstr(b, r->drv);
    b_printf(b, "}, \"started_unix\": %.6f, \"status\": \"%s\", \"warmup\": %ld}\n", r->started, status, r->a->warmup);
}

/* ---------- the recorder's ring: inference on the main thread, result work on one worker ----------
 * The runtime writes each inference's outputs into a slot of runner-owned buffers (rknn_output.is_prealloc);
 * one recorder thread compares them with the input's previous repeat, hashes, writes the content-addressed
 * files and the index line, in inference order, while the main thread runs the next inference. The main
 * thread waits only while every slot is still being recorded. Memory: RING_SLOTS x one inference's output
 * bytes (3 x 2.5 MB for the default yolov8n model), besides the kept previous repeats (SEEN_BUDGET). A
 * SIGKILL loses at most the RING_SLOTS inferences not yet recorded (never a half-written line or file);
 * SIGINT/SIGTERM and every failure on the main thread drain the ring first: what was inferred is recorded. */
#define RING_SLOTS 3
typedef struct { const dtype_t *dt; uint32_t ndim; uint64_t shape[RKNN_MAX_DIMS]; size_t nbytes; } out_meta_t;
typedef struct { int sample; long run; double latency_ms, t_unix, t_mono; unsigned char *buf[MAX_OUTPUTS]; } slot_t;
static struct {
    pthread_mutex_t lock; pthread_cond_t filled, freed; pthread_t thread;
    slot_t slots[RING_SLOTS];
    int head, count, ready, pending, closing, running;  /* head: the next slot to fill; count: filled, not yet recorded; ready:
                                                          * of those, handed to the recorder; pending: filled, handed at the next flush */
} g_ring = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER};
static pthread_t g_main_thread;
static pthread_mutex_t g_fail_lock = PTHREAD_MUTEX_INITIALIZER;
/* (lock held) the filled slots become the recorder's */
static void ring_hand_over(void) {
    if (g_ring.pending) { g_ring.ready += g_ring.pending; g_ring.pending = 0; pthread_cond_signal(&g_ring.filled); }
}
/* main thread: hand the filled slots to the recorder: called just before rknn_run, so that its CPU work
 * overlaps the NPU's compute rather than the CPU work of the next rknn_inputs_set */
static void ring_flush(void) {
    if (!g_ring.pending) return;
    pthread_mutex_lock(&g_ring.lock); ring_hand_over(); pthread_mutex_unlock(&g_ring.lock);
}
/* main thread: the recorder records every filled slot, then ends (joined) */
static void ring_drain(void) {
    if (!g_ring.running) return;
    g_ring.running = 0;
    pthread_mutex_lock(&g_ring.lock); ring_hand_over(); g_ring.closing = 1; pthread_cond_signal(&g_ring.filled);
    pthread_mutex_unlock(&g_ring.lock);
    pthread_join(g_ring.thread, NULL);
}
/* main thread: the slot the next inference writes into (waits while the recorder holds all of them) */
static slot_t *ring_free_slot(void) {
    slot_t *s;
    pthread_mutex_lock(&g_ring.lock);
    if (g_ring.count == RING_SLOTS) ring_hand_over();
    while (g_ring.count == RING_SLOTS) pthread_cond_wait(&g_ring.freed, &g_ring.lock);
    s = &g_ring.slots[g_ring.head];
    pthread_mutex_unlock(&g_ring.lock);
    return s;
}
/* main thread: the slot ring_free_slot gave is filled (handed to the recorder at the next flush) */
static void ring_publish(void) {
    pthread_mutex_lock(&g_ring.lock);
    g_ring.head = (g_ring.head + 1) % RING_SLOTS; g_ring.count++; g_ring.pending++;
    pthread_mutex_unlock(&g_ring.lock);
}

static run_t *g_run;
static int fail(int code, const char *fmt, ...) {
    char msg[sizeof g_error]; va_list ap;
    va_start(ap, fmt); vsnprintf(msg, sizeof msg, fmt, ap); va_end(ap);
    if (pthread_equal(pthread_self(), g_main_thread)) ring_drain();  /* what was inferred is recorded first */
    pthread_mutex_lock(&g_fail_lock);  /* one thread reports and exits; a second failing meanwhile waits for that exit */
    memcpy(g_error, msg, sizeof g_error);
    fprintf(stderr, "rkdet-run-c: %s\n", g_error);
    index_sync();  /* the lines written so far made durable (SIGINT/SIGTERM, a failure), as at the end */
    if (g_run && g_run_path[0]) { buf_t b = {0}; run_json(g_run, &b, "failed", now_unix()); write_atomic(g_run_path, b.s, b.n); free(b.s); }
    exit(code);
    return -1;
}

/* ---------- inputs ---------- */
static int by_name(const void *x, const void *y) { return strcmp(*(const char *const *)x, *(const char *const *)y); }
static int load_inputs(const char *dir, sample_t **out) {
    DIR *d = opendir(dir); struct dirent *e; char *names[MAX_INPUT_FILES]; int n = 0, i, npz = 0;
    if (!d) return fail(EXIT_BAD_INPUT, "%s: inputs folder not found; pass --inputs DIR holding *.npy", dir);
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".npz")) npz = 1;
        if (l > 4 && l < 250 && !strcmp(e->d_name + l - 4, ".npy")) {
            if (n >= MAX_INPUT_FILES) { closedir(d); return fail(EXIT_BAD_INPUT, "%s: more than %d inputs", dir, MAX_INPUT_FILES); }
            names[n++] = strdup(e->d_name);
        }
    }
    closedir(d);
    if (npz) return fail(EXIT_BAD_INPUT, "%s: holds .npz inputs; rkdet-run-c takes single-input models fed *.npy", dir);
    if (!n) return fail(EXIT_BAD_INPUT, "%s: no *.npy inputs found", dir);
    qsort(names, (size_t)n, sizeof names[0], by_name);
    *out = (sample_t *)calloc((size_t)n, sizeof(sample_t));
    for (i = 0; i < n; i++) {
        sample_t *s = &(*out)[i]; char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(s->file, sizeof s->file, "%s", names[i]);
        snprintf(s->name, sizeof s->name, "%.*s", (int)(strlen(names[i]) - 4), names[i]);
        if (!(s->raw = read_file(path, &s->raw_size))) return fail(EXIT_BAD_INPUT, "%s: unreadable (%s)", path, strerror(errno));
        sha256_of(s->raw, s->raw_size, s->sha256);
        parse_npy(s, path);
        if (i && (s->dtype != (*out)[0].dtype || s->ndim != (*out)[0].ndim || memcmp(s->shape, (*out)[0].shape, s->ndim * sizeof s->shape[0])))
            return fail(EXIT_BAD_INPUT, "%s: dtype/shape differ from %s's; every sample must match the model", path, (*out)[0].file);
        free(names[i]);
    }
    return n;
}

/* ---------- per-input distinct output sets (summary.json) ---------- */
typedef struct { char **sets; int n_sets; long runs; long div_run; int div_out; } track_t;

/* ---------- the recorder thread: one slot's result work, exactly what the single-threaded runner did after
 * rknn_outputs_get (same index line, same files, same order) ---------- */
typedef struct { run_t *r; track_t *track; seen_t *seen; const out_meta_t *meta; buf_t line, set; } recorder_t;
static void record(recorder_t *rec, const slot_t *sl) {
    run_t *r = rec->r; const args_t *a = r->a; sample_t *s = &r->samples[sl->sample]; uint32_t k; char path[4400];
    buf_t *line = &rec->line, *set = &rec->set;
    line->n = 0; set->n = 0;  /* reused: grown once, not allocated per inference */
    b_printf(line, "{\"backend\": \"rknn_c\", \"input\": "); b_jstr(line, s->name);
    b_printf(line, ", \"latency_ms\": %.4f, \"outputs\": [", sl->latency_ms);
    for (k = 0; k < r->n_out; k++) {
        const out_meta_t *m = &rec->meta[k]; uint32_t d; char h[65]; struct stat st;
        /* a reused hash's file was written when it was first hashed: no stat again */
        if (!hash_or_reuse(&rec->seen[(size_t)sl->sample * r->n_out + k], m->dt, m->ndim, m->shape, sl->buf[k], m->nbytes, h)
            && (snprintf(path, sizeof path, "%s/outputs/%s.npy", a->out, h), stat(path, &st) != 0)) {
            /* content-addressed: each distinct output once, before its index line */
            buf_t npy = {0}; npy_bytes(&npy, m->dt, m->ndim, m->shape, sl->buf[k], m->nbytes);
            if (write_atomic(path, npy.s, npy.n)) fail(EXIT_BOARD, "%s: %s; completed runs stay readable", path, strerror(errno));
            free(npy.s);
        }
        b_printf(line, k ? ", {\"dtype\": \"%s\", \"hash\": \"%s\", \"name\": " : "{\"dtype\": \"%s\", \"hash\": \"%s\", \"name\": ", m->dt->name, h);
        b_jstr(line, r->names[k]); b_puts(line, ", \"shape\": [");
        for (d = 0; d < m->ndim; d++) b_printf(line, d ? ", %llu" : "%llu", (unsigned long long)m->shape[d]);
        b_puts(line, "]}");
        b_puts(set, h); b_puts(set, r->names[k]);
    }
    b_printf(line, "], \"run\": %ld, \"t_unix\": %.6f}\n", sl->run, sl->t_unix);
    if (append_line(line->s, line->n, sl->t_mono, a->index_fsync_s)) fail(EXIT_BOARD, "%s/index.jsonl: %s; completed runs stay readable", a->out, strerror(errno));
    { track_t *t = &rec->track[sl->sample]; int j, known = 0;
      t->runs++;
      for (j = 0; j < t->n_sets; j++) if (!strcmp(t->sets[j], set->s)) known = 1;
      if (!known) {
          if (t->n_sets && !t->div_run) {  /* the first run whose outputs differ from run 0's */
              uint32_t o; size_t off = 0;
              t->div_run = sl->run + 1; t->div_out = -1;
              for (o = 0; o < r->n_out; off += 64 + strlen(r->names[o]), o++)
                  if (strncmp(t->sets[0] + off, set->s + off, 64)) { t->div_out = (int)o; break; }
          }
          t->sets = (char **)realloc(t->sets, (size_t)(t->n_sets + 1) * sizeof(char *)); t->sets[t->n_sets++] = strdup(set->s);
      }
    }
}
static void *recorder_main(void *arg) {
    recorder_t *rec = (recorder_t *)arg;
    { struct sched_param none; memset(&none, 0, sizeof none);
      /* SCHED_BATCH: being woken does not preempt the main thread, which runs on to rknn_run (else, on a busy
       * CPU, the handover costs the main thread the recorder's whole compare); no privilege needed, and where a
       * kernel refuses it the recorder runs as before */
      pthread_setschedparam(pthread_self(), SCHED_BATCH, &none); }
    for (;;) {
        const slot_t *sl;
        pthread_mutex_lock(&g_ring.lock);
        while (!g_ring.ready && !g_ring.closing) pthread_cond_wait(&g_ring.filled, &g_ring.lock);
        if (!g_ring.ready) { pthread_mutex_unlock(&g_ring.lock); break; }  /* closing and drained */
        sl = &g_ring.slots[(g_ring.head + RING_SLOTS - g_ring.count) % RING_SLOTS];  /* the oldest filled */
        pthread_mutex_unlock(&g_ring.lock);
        record(rec, sl);  /* the main thread never writes a filled slot */
        pthread_mutex_lock(&g_ring.lock); g_ring.count--; g_ring.ready--; pthread_cond_signal(&g_ring.freed); pthread_mutex_unlock(&g_ring.lock);
    }
    free(rec->line.s); free(rec->set.s); rec->line.s = rec->set.s = NULL;
    return NULL;
}
/* the slots' buffers (RING_SLOTS x the outputs' bytes) and the recorder thread, which takes no SIGINT/SIGTERM:
 * they reach the main thread, which stops inferring and drains the ring */
static void ring_start(recorder_t *rec) {
    sigset_t stop, old; int j; uint32_t k;
    for (j = 0; j < RING_SLOTS; j++) for (k = 0; k < rec->r->n_out; k++)
        if (!(g_ring.slots[j].buf[k] = (unsigned char *)malloc(rec->meta[k].nbytes ? rec->meta[k].nbytes : 1)))
            fail(EXIT_BOARD, "out of memory for %d x %u output buffers", RING_SLOTS, rec->r->n_out);
    sigemptyset(&stop); sigaddset(&stop, SIGINT); sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    if ((j = pthread_create(&g_ring.thread, NULL, recorder_main, rec)) != 0) fail(EXIT_BOARD, "cannot start the recorder thread (%s)", strerror(j));
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    g_ring.running = 1;
}

static int rk(const char *what, int ret) {
    if (ret != RKNN_SUCC) fail(EXIT_BOARD, "%s failed (ret=%d%s)", what, ret,
                               ret == RKNN_ERR_PARAM_INVALID ? ": the runtime refused a struct or parameter; was rkdet-run-c built against this runtime's rknn_api.h?" : "");
    return ret;
}

int main(int argc, char **argv) {
    args_t a; run_t r; rknn_context ctx = 0; rknn_input_output_num io; int mask;
    unsigned char *model; size_t model_size; buf_t b = {0}; char path[4400]; int idx_fd, snap_fd, i, code;
    uint32_t k; long run; track_t *track; seen_t *seen; rknn_output outs[MAX_OUTPUTS]; struct sigaction sa;
    out_meta_t meta[MAX_OUTPUTS]; recorder_t rec;
    memset(&r, 0, sizeof r); memset(&rec, 0, sizeof rec); g_main_thread = pthread_self();
    if (parse_args(argc, argv, &a)) return EXIT_BAD_INPUT;
    r.a = &a;
    core_mask_value(a.core_mask, &mask);
    if (a.npu_cores && mask != 0 && (unsigned)mask >> a.npu_cores)
        fail(EXIT_BAD_INPUT, "--core-mask %s: this SoC has %ld NPU core(s)", a.core_mask, a.npu_cores);
    if (a.cpu_affinity) pin_cpus(a.cpu_affinity, r.affinity, sizeof r.affinity);
    memset(&sa, 0, sizeof sa); sa.sa_handler = on_stop; sigaction(SIGINT, &sa, NULL); sigaction(SIGTERM, &sa, NULL);
    if (!(model = read_file(a.model, &model_size))) return fail(EXIT_BAD_INPUT, "%s: model file not readable (%s)", a.model, strerror(errno));
    sha256_of(model, model_size, r.model_sha);
    r.n_samples = load_inputs(a.inputs, &r.samples);

#ifdef RKDET_RKNPU1  /* RV1126/RV1109: RKNPU1's API, 4-argument rknn_init, no custom string, no core mask */
    rk("rknn_init", rknn_init(&ctx, model, (uint32_t)model_size, 0));
#else
    rk("rknn_init", rknn_init(&ctx, model, (uint32_t)model_size, 0, NULL));
#endif
    { rknn_sdk_version v; memset(&v, 0, sizeof v);
      rk("rknn_query(RKNN_QUERY_SDK_VERSION)", rknn_query(ctx, RKNN_QUERY_SDK_VERSION, &v, sizeof v));
      snprintf(r.api, sizeof r.api, "%.256s", v.api_version); snprintf(r.drv, sizeof r.drv, "%.256s", v.drv_version);
      r.emulated = strstr(r.api, "rkdet-test-double") != NULL;
      /* only rkdet's double says it serves the emulated NPU (the build's INT8 emulation): judged by the simulator */
      r.emulates_npu = r.emulated && strstr(r.api, "emulates-npu") != NULL; }
#ifndef RKDET_RKNPU1  /* RKNPU1 has no custom-string query: the identity check rests on the model's sha256 */
    { rknn_custom_string cs; memset(&cs, 0, sizeof cs);
      if (rknn_query(ctx, RKNN_QUERY_CUSTOM_STRING, &cs, sizeof cs) == RKNN_SUCC) {
          const char *p = cs.string, *last = NULL;
          r.have_custom = 1; snprintf(r.custom, sizeof r.custom, "%.1023s", cs.string);
          while ((p = strstr(p, "rkdet-fp=")) != NULL) { last = p + 9; p += 9; }
          if (last && strlen(last) >= 64) { memcpy(r.fp, last, 64); r.fp[64] = 0; if (!is_hex64(r.fp)) r.fp[0] = 0; }
      } }
#endif
    /* the model check, as rkdet-run's identity.check_model */
    if (a.expect_fp && r.fp[0]) {
        if (strcmp(a.expect_fp, r.fp)) fail(EXIT_REFUSED, "%s: refused: it carries build fingerprint %.16s, expected %.16s: not the build deploy pushed; deploy it again", a.model, r.fp, a.expect_fp);
        b_printf(&r.check, "{\"by\": \"embedded-fingerprint\", \"expected\": \"%s\", \"found\": \"%s\"}", a.expect_fp, r.fp);
    } else if (a.expect_sha) {
        const char *why = !a.expect_fp ? "no --expect-fingerprint" : "the model carries no rkdet build fingerprint";
        if (strcmp(a.expect_sha, r.model_sha)) fail(EXIT_REFUSED, "%s: refused: sha256 %.16s, expected %.16s (%s): not the file deploy pushed; deploy it again", a.model, r.model_sha, a.expect_sha, why);
        b_printf(&r.check, "{\"by\": \"sha256\", \"expected\": \"%s\", \"found\": \"%s\", \"why\": \"%s\"}", a.expect_sha, r.model_sha, why);
    } else b_puts(&r.check, "{\"by\": \"none\", \"why\": \"nothing expected (no --expect-fingerprint or --expect-sha256)\"}");

    rk("rknn_query(RKNN_QUERY_IN_OUT_NUM)", rknn_query(ctx, RKNN_QUERY_IN_OUT_NUM, &io, sizeof io));
    if (io.n_input != 1) fail(EXIT_BAD_INPUT, "%s: the model has %u inputs; rkdet-run-c runs single-input models", a.model, io.n_input);
    if (io.n_output < 1 || io.n_output > MAX_OUTPUTS) fail(EXIT_BOARD, "%s: the runtime reports %u outputs (1..%d handled)", a.model, io.n_output, MAX_OUTPUTS);
    r.n_in = io.n_input; r.n_out = io.n_output;
    r.in_attr = (rknn_tensor_attr *)calloc(r.n_in, sizeof(rknn_tensor_attr));
    r.out_attr = (rknn_tensor_attr *)calloc(r.n_out, sizeof(rknn_tensor_attr));
    r.in_attr[0].index = 0;
    rk("rknn_query(RKNN_QUERY_INPUT_ATTR)", rknn_query(ctx, RKNN_QUERY_INPUT_ATTR, &r.in_attr[0], sizeof(rknn_tensor_attr)));
    for (k = 0; k < r.n_out; k++) {
        r.out_attr[k].index = k;
        rk("rknn_query(RKNN_QUERY_OUTPUT_ATTR)", rknn_query(ctx, RKNN_QUERY_OUTPUT_ATTR, &r.out_attr[k], sizeof(rknn_tensor_attr)));
        if (r.out_attr[k].name[0]) snprintf(r.names[k], sizeof r.names[k], "%.*s", RKNN_MAX_NAME_LEN - 1, r.out_attr[k].name);
        else snprintf(r.names[k], sizeof r.names[k], "output%u", k);
        if (r.out_attr[k].n_dims > RKNN_MAX_DIMS) fail(EXIT_BOARD, "output %u: the runtime reports %u dims", k, r.out_attr[k].n_dims);
    }
    for (k = 0; k < r.n_out; k++) {  /* each output's dtype, numpy shape and bytes: what its ring buffers hold */
        rknn_tensor_attr *at = &r.out_attr[k]; out_meta_t *m = &meta[k]; uint64_t count = 1; uint32_t d;
        if (!(m->dt = dtype_by_type(a.want_float ? RKNN_TENSOR_FLOAT32 : at->type)))
            fail(EXIT_BOARD, "output %s: tensor type %d has no numpy dtype", r.names[k], at->type);
        m->ndim = at->n_dims;
        for (d = 0; d < at->n_dims; d++) {
#ifdef RKDET_RKNPU1  /* RKNPU1 lists dims innermost first ([W, H, C, N]); numpy's order is outermost first */
            m->shape[d] = at->dims[at->n_dims - 1 - d];
#else
            m->shape[d] = at->dims[d];
#endif
            if (m->shape[d] && count > (uint64_t)UINT32_MAX / m->shape[d]) fail(EXIT_BOARD, "output %s: the runtime reports a shape over 4 GiB", r.names[k]);
            count *= m->shape[d];
        }
        if (count * m->dt->size > (uint64_t)UINT32_MAX) fail(EXIT_BOARD, "output %s: the runtime reports a shape over 4 GiB", r.names[k]);
        m->nbytes = (size_t)(count * m->dt->size);
    }
    r.in_type = r.samples[0].dtype->type;
    r.in_fmt = !strcmp(a.input_fmt, "nchw") ? RKNN_TENSOR_NCHW : !strcmp(a.input_fmt, "nhwc") ? RKNN_TENSOR_NHWC : (int)r.in_attr[0].fmt;
    if (a.pass_through && r.in_type != (int)r.in_attr[0].type)
        fail(EXIT_BAD_INPUT, "%s: --pass-through 1 feeds the runtime's own type %s, the inputs are %s", a.inputs,
             dtype_by_type(r.in_attr[0].type) ? dtype_by_type(r.in_attr[0].type)->name : "?", r.samples[0].dtype->name);
    if (r.samples[0].nbytes / r.samples[0].dtype->size != r.in_attr[0].n_elems)
        fail(EXIT_BAD_INPUT, "%s: input '%s' has %lu elements, the model wants %u", r.samples[0].file, r.in_attr[0].name,
             (unsigned long)(r.samples[0].nbytes / r.samples[0].dtype->size), r.in_attr[0].n_elems);
#ifdef RKDET_RKNPU1
    if (strcmp(a.core_mask, "auto")) fail(EXIT_BAD_INPUT, "--core-mask %s: RKNPU1 (RV1126/RV1109) has one NPU core and no core mask; use auto", a.core_mask);
#else
    if (mask != 0) rk("rknn_set_core_mask", rknn_set_core_mask(ctx, (rknn_core_mask)mask));
#endif

    /* the result folder: new or empty, outputs/ created, run.json first */
    { struct stat st; DIR *d;
      if (stat(a.out, &st) == 0) { struct dirent *e; int files = 0;
          if (!S_ISDIR(st.st_mode) || !(d = opendir(a.out))) fail(EXIT_BAD_INPUT, "%s: not a writable folder; pick another --out", a.out);
          while ((e = readdir(d)) != NULL) if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) files++;
          closedir(d);
          if (files) fail(EXIT_BAD_INPUT, "%s: already holds files; choose a new --out so results never mix", a.out);
      } else if (mkdir(a.out, 0755) != 0) fail(EXIT_BAD_INPUT, "%s: cannot create the result folder (%s)", a.out, strerror(errno));
      snprintf(path, sizeof path, "%s/outputs", a.out);
      if (mkdir(path, 0755) != 0) fail(EXIT_BAD_INPUT, "%s: cannot write the result folder (%s)", a.out, strerror(errno)); }
    snprintf(g_run_path, sizeof g_run_path, "%s/run.json", a.out);
    r.started = now_unix(); g_run = &r;
    run_json(&r, &b, "running", 0);
    if (write_atomic(g_run_path, b.s, b.n)) fail(EXIT_BOARD, "%s: %s", g_run_path, strerror(errno));
    snprintf(path, sizeof path, "%s/index.jsonl", a.out);
    if ((idx_fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644)) < 0) fail(EXIT_BOARD, "%s: %s", path, strerror(errno));
    g_idx_fd = idx_fd; g_idx_size = 0; g_idx_synced_at = now_mono();
    snprintf(path, sizeof path, "%s/snapshots.jsonl", a.out);  /* rkdet-run-c takes no board snapshots (probe.sh does) */
    if ((snap_fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644)) < 0) fail(EXIT_BOARD, "%s: %s", path, strerror(errno));
    close(snap_fd);

    track = (track_t *)calloc((size_t)r.n_samples, sizeof(track_t));
    seen = (seen_t *)calloc((size_t)r.n_samples * r.n_out, sizeof(seen_t));
    if (!track || !seen) fail(EXIT_BOARD, "out of memory for %d inputs", r.n_samples);
    rec.r = &r; rec.track = track; rec.seen = seen; rec.meta = meta;
    ring_start(&rec);
    for (run = -a.warmup; run < a.repeats; run++) {
        for (i = 0; i < r.n_samples; i++) {
            sample_t *s = &r.samples[i]; rknn_input in; double t0, t1, tu; slot_t *slot;
            if (g_stop) { fail(EXIT_INTERRUPTED, "interrupted: SIGINT/SIGTERM; completed runs stay readable"); }
            slot = ring_free_slot();  /* waits only while the recorder holds every slot */
            if (g_stop) { fail(EXIT_INTERRUPTED, "interrupted: SIGINT/SIGTERM; completed runs stay readable"); }
            memset(&in, 0, sizeof in); memset(outs, 0, sizeof outs);
            in.index = 0; in.buf = s->data; in.size = (uint32_t)s->nbytes; in.pass_through = (uint8_t)a.pass_through;
            in.type = (rknn_tensor_type)r.in_type; in.fmt = (rknn_tensor_format)r.in_fmt;
            for (k = 0; k < r.n_out; k++) {  /* the runtime writes into the slot's buffers (the documented is_prealloc) */
                outs[k].want_float = (uint8_t)a.want_float; outs[k].index = k; outs[k].is_prealloc = 1;
                outs[k].buf = slot->buf[k]; outs[k].size = (uint32_t)meta[k].nbytes;
            }
            t0 = now_mono();
            rk("rknn_inputs_set", rknn_inputs_set(ctx, 1, &in));
            ring_flush();  /* the previous inference's result work runs while the NPU computes this one */
            rk("rknn_run", rknn_run(ctx, NULL));
            rk("rknn_outputs_get", rknn_outputs_get(ctx, r.n_out, outs, NULL));
            t1 = now_mono(); tu = now_unix();
            for (k = 0; k < r.n_out; k++) {
                if (outs[k].buf != slot->buf[k])
                    fail(EXIT_BOARD, "output %s: the runtime did not write into the runner's buffer (is_prealloc=1); this runtime does not honour rknn_output.is_prealloc", r.names[k]);
                if (outs[k].size != meta[k].nbytes)
                    fail(EXIT_BOARD, "output %s: the runtime returned %u bytes, %s wants %llu", r.names[k], outs[k].size,
                         meta[k].dt->name, (unsigned long long)meta[k].nbytes);
            }
            rk("rknn_outputs_release", rknn_outputs_release(ctx, r.n_out, outs));
            if (run < 0) continue;  /* warmup: the slot stays free */
            slot->sample = i; slot->run = run; slot->latency_ms = (t1 - t0) * 1000.0; slot->t_unix = tu; slot->t_mono = t1;
            ring_publish();  /* the recorder compares/hashes/writes it while the next inference runs */
        }
    }
    ring_drain();  /* every inferred set recorded, in order */
    if (index_sync() != 0) fail(EXIT_BOARD, "%s/index.jsonl: %s (fsync); completed runs stay readable", a.out, strerror(errno));
    g_idx_fd = -1; close(idx_fd);
    rknn_destroy(ctx);
    /* summary.json, then run.json "complete" */
    { buf_t s = {0}; int det = 1; long runs = 0;
      b_puts(&s, "{\"backend\": \"rknn_c\", \"deterministic\": ");
      for (i = 0; i < r.n_samples; i++) { if (track[i].n_sets != 1) det = 0; if (track[i].runs > runs) runs = track[i].runs; }
      b_puts(&s, det ? "true" : "false"); b_puts(&s, ", \"inputs\": {");
      for (i = 0; i < r.n_samples; i++) {
          track_t *t = &track[i];
          if (i) b_puts(&s, ", ");
          b_jstr(&s, r.samples[i].name); b_printf(&s, ": {\"distinct\": %d, \"first_divergence\": ", t->n_sets);
          if (t->div_run > 0) { b_printf(&s, "{\"output\": "); b_jstr_or_null(&s, t->div_out >= 0 ? r.names[t->div_out] : NULL); b_printf(&s, ", \"run\": %ld}", t->div_run - 1); }
          else b_puts(&s, "null");
          b_printf(&s, ", \"runs\": %ld}", t->runs);
      }
      b_printf(&s, "}, \"runs\": %ld, \"schema\": \"rkdet.summary/1\"}\n", runs);
      snprintf(path, sizeof path, "%s/summary.json", a.out);
      if (write_atomic(path, s.s, s.n)) fail(EXIT_BOARD, "%s: %s", path, strerror(errno));
      code = det ? EXIT_OK : EXIT_DIFFERENT; free(s.s); }
    run_json(&r, &b, "complete", now_unix());
    if (write_atomic(g_run_path, b.s, b.n)) { g_run = NULL; fail(EXIT_BOARD, "%s: %s", g_run_path, strerror(errno)); }
    return code;
}
