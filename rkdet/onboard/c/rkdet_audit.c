/* rkdet_audit.c: the serving audit log for apps on the RKNN C runtime (API and why: rkdet_audit.h).
 *
 * The same records, byte rules and file rules as rkdet/onboard/audit_chain.py (docs/AUDIT.md): canonical
 * JSON lines (keys sorted, no spaces, ASCII, floats as Python's repr), `prev` = sha256 of the previous
 * line's bytes (GENESIS = 64 zeros), audit-NNNNNNNN.jsonl rotated at max_file_bytes, a start always in a
 * new file whose `open` record declares a torn tail, the oldest files beyond max_files removed. Each
 * record is one write() of the whole line on an O_APPEND descriptor; a short write is cut back
 * (ftruncate) so no torn line is left, and the record is counted as lost. POSIX C99 + pthreads. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* getauxval */
#include "rkdet_audit.h"
#include "rkdet_sha256.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_LINE (64 * 1024)              /* audit_chain.MAX_LINE: the verifier refuses longer lines */
#define DEFAULT_MAX_FILE_BYTES (8u << 20) /* audit_chain.DEFAULT_MAX_FILE_BYTES */
#define DEFAULT_MAX_FILES 64u
#define SCHEMA "rkdet.audit/1"
#define PROM_FILE "rkdet_audit.prom"
#define MAX_FIELDS 16
#define SHADOW_MAX_SAMPLES 20000  /* audit_watch.MAX_SAMPLES_PER_PERIOD: abs errors kept per output and period */
#define SHADOW_MAX_OUTPUTS 16     /* outputs whose errors are kept (decisions cover every output) */
#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

typedef struct { char *s; size_t n, cap; int oom; } buf_t;
typedef struct { char *dtype; uint32_t ndim; uint64_t *shape; unsigned char *data; size_t size; } kept_t;

typedef struct {  /* one inference's tensors, copied by the app's thread for the recorder thread */
    rkdet_audit_tensor *t; size_t n_inputs, n_outputs, cap; uint64_t latency_us;
} job_t;
#define SPARE_JOBS 4  /* written jobs kept for reuse: no fresh pages (faults) for every copy */

struct rkdet_audit {
    pthread_mutex_t lock;                 /* the chain, the counters, the textfile */
    pthread_mutex_t qlock; pthread_cond_t qcond; pthread_t thread;  /* the recorder thread and its queue */
    job_t **queue; unsigned qcap, qhead, qlen; int stopping, threaded;
    job_t *spare[SPARE_JOBS]; unsigned nspare;
    char *dir, *prom_dir, build[65], core_mask[32];
    size_t max_file_bytes; unsigned max_files, fsync_every, prom_every;
    int fd; unsigned index; size_t size; unsigned unsynced;
    char prev[65]; uint64_t seq, lost;
    rkdet_audit_counters c;
    kept_t *baseline; size_t base_golden, base_outputs;
    unsigned alarms, shadow_alarms;
    char shadow_build[65]; unsigned shadow_report_every;  /* the shadow: its period's statistics */
    uint64_t shadow_samples, shadow_disagreements, period_samples, period_disagreements;
    double *errors[SHADOW_MAX_OUTPUTS]; size_t n_errors[SHADOW_MAX_OUTPUTS]; size_t shadow_outputs;
};

/* ---------- text ---------- */
static void b_add(buf_t *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256; char *p;
        while (cap < b->n + n + 1) cap *= 2;
        p = (char *)realloc(b->s, cap);
        if (!p) { b->oom = 1; return; }
        b->s = p; b->cap = cap;
    }
    memcpy(b->s + b->n, s, n); b->n += n; b->s[b->n] = 0;
}
static void b_puts(buf_t *b, const char *s) { b_add(b, s, strlen(s)); }
static void b_printf(buf_t *b, const char *fmt, ...) {
    char tmp[512]; va_list ap; int n;
    va_start(ap, fmt); n = vsnprintf(tmp, sizeof tmp, fmt, ap); va_end(ap);
    if (n > 0) b_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}
/* a JSON string as Python's json.dumps(ensure_ascii=True) writes it */
static void b_jstr(buf_t *b, const char *s) {
    b_puts(b, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"') b_puts(b, "\\\""); else if (ch == '\\') b_puts(b, "\\\\");
        else if (ch == '\n') b_puts(b, "\\n"); else if (ch == '\r') b_puts(b, "\\r"); else if (ch == '\t') b_puts(b, "\\t");
        else if (ch == '\b') b_puts(b, "\\b"); else if (ch == '\f') b_puts(b, "\\f");
        else if (ch < 0x20 || ch >= 0x7f) b_printf(b, "\\u%04x", ch);
        else b_add(b, (const char *)&ch, 1);
    }
    b_puts(b, "\"");
}
/* a finite double as Python's repr(float) writes it: the shortest digits that read back the same,
 * fixed notation for exponents -4..15, else d.ddde+XX */
static void b_float(buf_t *b, double v) {
    char sci[40], out[64]; int p, exp10;
    if (v == 0) { b_puts(b, signbit(v) ? "-0.0" : "0.0"); return; }
    for (p = 1; p <= 17; p++) {
        snprintf(sci, sizeof sci, "%.*e", p - 1, v);
        if (strtod(sci, NULL) == v) break;
    }
    exp10 = atoi(strchr(sci, 'e') + 1);
    if (exp10 < -4 || exp10 >= 16) { b_puts(b, sci); return; }
    snprintf(out, sizeof out, "%.*f", p - 1 - exp10 > 0 ? p - 1 - exp10 : 0, v);
    b_puts(b, out);
    if (!strchr(out, '.')) b_puts(b, ".0");
}

/* ---------- hashes: THE output hash, the input hash, the record hash ---------- */
static void output_hash(const rkdet_audit_tensor *t, char out[65]) {
    rkdet_sha256_ctx c; char dim[24]; uint32_t i;
    rkdet_sha256_init(&c);
    rkdet_sha256_update(&c, t->dtype, strlen(t->dtype));
    rkdet_sha256_update(&c, "|", 1);
    for (i = 0; i < t->ndim; i++) {
        int n = snprintf(dim, sizeof dim, i ? ",%llu" : "%llu", (unsigned long long)t->shape[i]);
        rkdet_sha256_update(&c, dim, (size_t)n);
    }
    rkdet_sha256_update(&c, "|", 1);
    if (t->size) rkdet_sha256_update(&c, t->data, t->size);
    rkdet_sha256_hex(&c, out);
}
static void sha256_of(const void *data, size_t n, char out[65]) {
    rkdet_sha256_ctx c; rkdet_sha256_init(&c); rkdet_sha256_update(&c, data, n); rkdet_sha256_hex(&c, out);
}
static double thread_cpu(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---------- one record: fields sorted by key as json.dumps(sort_keys=True) ---------- */
typedef struct { const char *key; buf_t val; } field_t;
typedef struct { field_t f[MAX_FIELDS]; int n; } record_t;

static buf_t *rec_field(record_t *r, const char *key) {
    field_t *f = &r->f[r->n < MAX_FIELDS ? r->n++ : MAX_FIELDS - 1];
    f->key = key; memset(&f->val, 0, sizeof f->val);
    return &f->val;
}
static void rec_str(record_t *r, const char *key, const char *v) { buf_t *b = rec_field(r, key); if (v) b_jstr(b, v); else b_puts(b, "null"); }
static void rec_u64(record_t *r, const char *key, uint64_t v) { b_printf(rec_field(r, key), "%llu", (unsigned long long)v); }
/* a record's "input" (sha256 over the inputs' output hashes, in order) and "outputs" (each output's hash) */
static void rec_hashes(record_t *r, const rkdet_audit_tensor *inputs, size_t n_inputs,
                       const rkdet_audit_tensor *outputs, size_t n_outputs) {
    rkdet_sha256_ctx ic; char h[65]; size_t i; buf_t *outs;
    rkdet_sha256_init(&ic);
    for (i = 0; i < n_inputs; i++) { output_hash(&inputs[i], h); rkdet_sha256_update(&ic, h, 64); }
    rkdet_sha256_hex(&ic, h);
    rec_str(r, "input", h);
    outs = rec_field(r, "outputs");
    b_puts(outs, "[");
    for (i = 0; i < n_outputs; i++) { output_hash(&outputs[i], h); if (i) b_puts(outs, ","); b_jstr(outs, h); }
    b_puts(outs, "]");
}
static void rec_free(record_t *r) { int i; for (i = 0; i < r->n; i++) free(r->f[i].val.s); r->n = 0; }
static int by_key(const void *a, const void *b) { return strcmp(((const field_t *)a)->key, ((const field_t *)b)->key); }

static double now_rounded(void) {
    struct timespec ts; double t;
    clock_gettime(CLOCK_REALTIME, &ts);
    t = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    return floor(t * 1e6 + 0.5) / 1e6;  /* round(time.time(), 6) */
}

static int render(record_t *r, buf_t *line) {
    int i;
    qsort(r->f, (size_t)r->n, sizeof r->f[0], by_key);
    b_puts(line, "{");
    for (i = 0; i < r->n; i++) {
        if (i) b_puts(line, ",");
        b_jstr(line, r->f[i].key); b_puts(line, ":");
        if (r->f[i].val.oom || !r->f[i].val.s) { line->oom = 1; break; }
        b_add(line, r->f[i].val.s, r->f[i].val.n);
    }
    b_puts(line, "}");
    return line->oom ? -1 : 0;
}

static void *recorder(void *arg);
static int open_file(rkdet_audit *a, const char *reason, const char *torn_file, long torn_bytes, const char *unreadable);

/* Append one record (consumes r); 0 written, -1 dropped and counted. The caller holds the lock. */
static int append(rkdet_audit *a, const char *kind, record_t *r) {
    buf_t line = {0}; int ok = -1; double now = now_rounded();
    ssize_t w; size_t before = a->size;
    rec_str(r, "kind", kind); rec_u64(r, "seq", a->seq); rec_str(r, "prev", a->prev);
    b_float(rec_field(r, "t"), now);
    if (a->lost) rec_u64(r, "lost_before", a->lost);
    if (render(r, &line) == 0 && line.n > MAX_LINE) {  /* audit_chain: a record too long becomes a note */
        record_t note = {0}; char text[128];
        snprintf(text, sizeof text, "record too long (%lu bytes) for kind %s", (unsigned long)line.n, kind);
        free(line.s); memset(&line, 0, sizeof line);
        rec_str(&note, "kind", "note"); rec_u64(&note, "seq", a->seq); rec_str(&note, "prev", a->prev);
        b_float(rec_field(&note, "t"), now); rec_str(&note, "note", text);
        render(&note, &line); rec_free(&note);
    }
    rec_free(r);
    if (!line.oom && a->fd >= 0) {
        b_puts(&line, "\n");
        do { w = write(a->fd, line.s, line.n); } while (w < 0 && errno == EINTR);
        if (w == (ssize_t)line.n) ok = 0;
        else if (w > 0 && ftruncate(a->fd, (off_t)before) != 0) { /* a torn line stays: the next start declares it */ }
    }
    if (ok != 0 || line.oom) {
        a->c.write_failures++; a->lost++;
        free(line.s);
        return -1;
    }
    sha256_of(line.s, line.n - 1, a->prev);
    free(line.s);
    a->seq++; a->lost = 0; a->size += line.n; a->c.records_written++;
    if (a->fsync_every && ++a->unsynced >= a->fsync_every) { fsync(a->fd); a->unsynced = 0; }
    if (a->size >= a->max_file_bytes && strcmp(kind, "open") != 0) {  /* rotate */
        int old = a->fd;
        fsync(old); a->unsynced = 0;
        a->index++;
        if (open_file(a, "rotate", NULL, 0, NULL) != 0) {  /* keep appending to the old file */
            a->c.write_failures++; a->index--; a->fd = old;
        } else {
            close(old);
        }
    }
    return 0;
}

/* ---------- files ---------- */
static int audit_index(const char *name, unsigned *index) {
    int i;
    if (strncmp(name, "audit-", 6) != 0 || strlen(name) != 20 || strcmp(name + 14, ".jsonl") != 0) return 0;
    for (i = 6; i < 14; i++) if (name[i] < '0' || name[i] > '9') return 0;
    *index = (unsigned)strtoul(name + 6, NULL, 10);
    return 1;
}
static int cmp_unsigned(const void *a, const void *b) {
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b; return x < y ? -1 : x > y;
}
/* the folder's audit file indices, sorted; count in *n; NULL with *n = 0 when none or no memory */
static unsigned *list_files(const char *dir, size_t *n) {
    DIR *d = opendir(dir); struct dirent *e; unsigned *v = NULL, idx; size_t cap = 0;
    *n = 0;
    if (!d) return NULL;
    while ((e = readdir(d)) != NULL) {
        if (!audit_index(e->d_name, &idx)) continue;
        if (*n == cap) {
            unsigned *p = (unsigned *)realloc(v, (cap = cap ? cap * 2 : 64) * sizeof *v);
            if (!p) break;
            v = p;
        }
        v[(*n)++] = idx;
    }
    closedir(d);
    if (*n) qsort(v, *n, sizeof *v, cmp_unsigned);
    return v;
}
static void path_of(const rkdet_audit *a, unsigned index, char *out, size_t n) {
    snprintf(out, n, "%s/audit-%08u.jsonl", a->dir, index);
}

static void prune(rkdet_audit *a) {
    size_t n, i; unsigned *v = list_files(a->dir, &n); char path[4200];
    for (i = 0; v && n > a->max_files && i < n - a->max_files; i++) {
        path_of(a, v[i], path, sizeof path);
        unlink(path);
    }
    free(v);
}

static int open_file(rkdet_audit *a, const char *reason, const char *torn_file, long torn_bytes, const char *unreadable) {
    char path[4200], name[32]; record_t r = {0};
    path_of(a, a->index, path, sizeof path);
    a->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_EXCL | O_CLOEXEC, 0644);
    if (a->fd < 0) return -1;
    a->size = 0;
    prune(a);
    snprintf(name, sizeof name, "audit-%08u.jsonl", a->index);
    rec_str(&r, "file", name); rec_str(&r, "reason", reason); rec_str(&r, "schema", SCHEMA);
    if (torn_file) {
        buf_t *b = rec_field(&r, "torn_tail");
        b_printf(b, "{\"bytes\":%ld,\"file\":", torn_bytes); b_jstr(b, torn_file); b_puts(b, "}");
    }
    if (unreadable) rec_str(&r, "unreadable_last_record", unreadable);
    append(a, "open", &r);
    return 0;
}

/* Continue the chain the last file left: its last whole line's hash and seq, and a torn tail declared. */
static int resume(rkdet_audit *a) {
    size_t n; unsigned *v = list_files(a->dir, &n); char path[4200], name[32];
    const char *torn_file = NULL, *unreadable = NULL; long torn = 0; int rc;
    if (n) {
        int fd; struct stat st; char *tail; off_t from; ssize_t got = 0;
        a->index = v[n - 1];
        path_of(a, a->index, path, sizeof path);
        snprintf(name, sizeof name, "audit-%08u.jsonl", a->index);
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        tail = (char *)malloc(2 * MAX_LINE + 1);
        if (fd >= 0 && tail && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
            from = st.st_size > 2 * MAX_LINE ? st.st_size - 2 * MAX_LINE : 0;
            got = pread(fd, tail, 2 * MAX_LINE, from);
        }
        if (got > 0) {
            char *end = tail + got, *cut, *start, *seq;
            tail[got] = 0;
            if (end[-1] != '\n') {
                for (cut = end; cut > tail && cut[-1] != '\n'; cut--) {}
                torn = (long)(end - cut); torn_file = name; a->c.chain_breaks++;
                end = cut;
            }
            if (end > tail) {  /* end[-1] is the newline of the last whole line */
                end[-1] = 0;
                for (start = end - 1; start > tail && start[-1] != '\n'; start--) {}
                seq = strstr(start, "\"seq\":");
                if (start[0] == '{' && end - 1 > start && end[-2] == '}' && seq && seq[6] >= '0' && seq[6] <= '9') {
                    sha256_of(start, strlen(start), a->prev);
                    a->seq = strtoull(seq + 6, NULL, 10) + 1;
                } else {
                    unreadable = name; a->c.chain_breaks++;
                }
            }
        } else if (fd < 0 || got < 0) {
            unreadable = name; a->c.chain_breaks++;
        }
        if (fd >= 0) close(fd);
        free(tail);
        a->index++;  /* a start always opens a new file: its first record says why */
    }
    free(v);
    rc = open_file(a, "start", torn_file, torn, unreadable);
    return rc;
}

/* ---------- the textfile (node_exporter) ---------- */
static void write_prom(rkdet_audit *a) {
    buf_t b = {0}; char path[4200], tmp[4300]; struct stat st; int fd; size_t done = 0;
    static const char *names[8][2] = {
        {"rkdet_audit_inferences_total", "Inferences served through the audited runtime."},
        {"rkdet_audit_canary_runs_total", "Canary runs of the build's golden inputs."},
        {"rkdet_audit_canary_failures_total", "Canary runs whose outputs differ bitwise from the baseline."},
        {"rkdet_audit_shadow_samples_total", "Live inputs also run on the shadow (candidate) build."},
        {"rkdet_audit_shadow_disagreements_total", "Shadow samples whose decision differs from the served one."},
        {"rkdet_audit_chain_breaks_total", "Torn or unreadable records found when the audit log was resumed."},
        {"rkdet_audit_log_write_failures_total", "Audit records the disk refused (the inference still served)."},
        {"rkdet_audit_hash_seconds_total", "CPU seconds spent hashing inputs and outputs."}};
    uint64_t values[7]; int i;
    if (!a->prom_dir) return;
    values[0] = a->c.inferences; values[1] = a->c.canary_runs; values[2] = a->c.canary_failures;
    values[3] = a->shadow_samples; values[4] = a->shadow_disagreements; values[5] = a->c.chain_breaks; values[6] = a->c.write_failures;
    for (i = 0; i < 8; i++) {
        b_printf(&b, "# HELP %s %s\n# TYPE %s counter\n%s{build=\"%.16s\"} ", names[i][0], names[i][1], names[i][0],
                 names[i][0], a->build);
        if (i < 7) b_printf(&b, "%llu", (unsigned long long)values[i]); else b_float(&b, a->c.hash_seconds);
        b_puts(&b, "\n");
    }
    snprintf(path, sizeof path, "%s/" PROM_FILE, a->prom_dir);
    snprintf(tmp, sizeof tmp, "%s/.rkdet_audit.prom.tmp-%ld-%lx", a->prom_dir, (long)getpid(), (unsigned long)(uintptr_t)a);
    if (b.oom || (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))) { free(b.s); return; }  /* never over a link/device/FIFO */
    unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) { free(b.s); return; }
    while (done < b.n) {
        ssize_t w = write(fd, b.s + done, b.n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    if (done == b.n && fsync(fd) == 0 && close(fd) == 0) {
        if (rename(tmp, path) != 0) unlink(tmp);
    } else {
        close(fd); unlink(tmp);
    }
    free(b.s);
}

/* ---------- the API ---------- */
static int is_hex64(const char *s) {
    int i;
    if (!s || strlen(s) != 64) return 0;
    for (i = 0; i < 64; i++) if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

rkdet_audit *rkdet_audit_open(const rkdet_audit_settings *s, char *err, size_t errlen) {
    rkdet_audit *a; record_t r = {0}; struct stat st;
    if (!s || !s->log_dir || !*s->log_dir || strlen(s->log_dir) > 4000 || (s->prom_dir && strlen(s->prom_dir) > 4000)) {
        snprintf(err, errlen, "rkdet audit: no log folder given (settings.log_dir)"); return NULL;
    }
    if (!is_hex64(s->build)) { snprintf(err, errlen, "rkdet audit: settings.build must be the build fingerprint, 64 lowercase hex"); return NULL; }
    if (mkdir(s->log_dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "rkdet audit: %s: cannot create the log folder (%s)", s->log_dir, strerror(errno)); return NULL;
    }
    if (lstat(s->log_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "rkdet audit: %s: not a folder (a symlink or file); name a folder for the log", s->log_dir); return NULL;
    }
    a = (rkdet_audit *)calloc(1, sizeof *a);
    if (!a || !(a->dir = strdup(s->log_dir)) || (s->prom_dir && !(a->prom_dir = strdup(s->prom_dir)))) {
        if (a) { free(a->dir); free(a); }
        snprintf(err, errlen, "rkdet audit: out of memory"); return NULL;
    }
    pthread_mutex_init(&a->lock, NULL);
    memcpy(a->build, s->build, 65);
    snprintf(a->core_mask, sizeof a->core_mask, "%s", s->core_mask ? s->core_mask : "auto");
    a->max_file_bytes = s->max_file_bytes ? s->max_file_bytes : DEFAULT_MAX_FILE_BYTES;
    if (a->max_file_bytes < 4 * MAX_LINE) a->max_file_bytes = 4 * MAX_LINE;
    a->max_files = s->max_files ? (s->max_files < 2 ? 2 : s->max_files) : DEFAULT_MAX_FILES;
    a->fsync_every = s->fsync_every; a->prom_every = s->prom_every ? s->prom_every : 100;
    if (s->shadow_build && !is_hex64(s->shadow_build)) {
        snprintf(err, errlen, "rkdet audit: settings.shadow_build must be the candidate's fingerprint, 64 lowercase hex");
        free(a->dir); free(a->prom_dir); pthread_mutex_destroy(&a->lock); free(a);
        return NULL;
    }
    if (s->shadow_build) memcpy(a->shadow_build, s->shadow_build, 65);
    a->shadow_report_every = s->shadow_report_every ? s->shadow_report_every : 1000;
    memset(a->prev, '0', 64); a->prev[64] = 0;
    a->fd = -1;
    if (a->prom_dir) mkdir(a->prom_dir, 0755);
    if (resume(a) != 0) {
        snprintf(err, errlen, "rkdet audit: %s: cannot open a new audit file (%s)", a->dir, strerror(errno));
        free(a->dir); free(a->prom_dir); pthread_mutex_destroy(&a->lock); free(a);
        return NULL;
    }
    rec_str(&r, "build", a->build); rec_str(&r, "core_mask", a->core_mask);
    rec_str(&r, "canary_baseline", "first-run"); rec_str(&r, "shadow", s->shadow_build ? s->shadow_build : NULL);
    append(a, "start", &r);
    write_prom(a);
    if (s->background_queue) {  /* no thread (or no memory): recorded on the calling thread instead */
        pthread_mutex_init(&a->qlock, NULL); pthread_cond_init(&a->qcond, NULL);
        a->qcap = s->background_queue;
        a->queue = (job_t **)calloc(a->qcap, sizeof *a->queue);
        a->threaded = a->queue && pthread_create(&a->thread, NULL, recorder, a) == 0;
        if (!a->threaded) { free(a->queue); a->queue = NULL; pthread_cond_destroy(&a->qcond); pthread_mutex_destroy(&a->qlock); }
    }
    return a;
}

/* hash (unlocked: the app's thread or the recorder's), then append under the lock */
static int record_inference(rkdet_audit *a, const rkdet_audit_tensor *inputs, size_t n_inputs,
                            const rkdet_audit_tensor *outputs, size_t n_outputs, uint64_t latency_us) {
    record_t r = {0}; double h0 = thread_cpu(); int rc;
    rec_hashes(&r, inputs, n_inputs, outputs, n_outputs);
    h0 = thread_cpu() - h0;
    rec_str(&r, "build", a->build); rec_str(&r, "core_mask", a->core_mask); rec_u64(&r, "latency_us", latency_us);
    pthread_mutex_lock(&a->lock);
    a->c.hash_seconds += h0;
    a->c.inferences++;
    rc = append(a, "inference", &r);
    if (a->c.inferences % a->prom_every == 0) write_prom(a);
    pthread_mutex_unlock(&a->lock);
    return rc;
}

static void *recorder(void *arg) {
    rkdet_audit *a = (rkdet_audit *)arg;
    for (;;) {
        job_t *job;
        pthread_mutex_lock(&a->qlock);
        while (!a->qlen && !a->stopping) pthread_cond_wait(&a->qcond, &a->qlock);
        if (!a->qlen) { pthread_mutex_unlock(&a->qlock); return NULL; }  /* stopping and drained */
        job = a->queue[a->qhead]; a->qhead = (a->qhead + 1) % a->qcap; a->qlen--;
        pthread_mutex_unlock(&a->qlock);
        record_inference(a, job->t, job->n_inputs, job->t + job->n_inputs, job->n_outputs, job->latency_us);
        pthread_mutex_lock(&a->qlock);
        if (a->nspare < SPARE_JOBS) { a->spare[a->nspare++] = job; job = NULL; }
        pthread_mutex_unlock(&a->qlock);
        free(job);
    }
}

/* one allocation holding the tensors' descriptions, dtypes, dims and bytes (the app may reuse its buffers) */
static job_t *copy_job(rkdet_audit *a, const rkdet_audit_tensor *inputs, size_t n_inputs,
                       const rkdet_audit_tensor *outputs, size_t n_outputs, uint64_t latency_us) {
    size_t n = n_inputs + n_outputs, bytes = sizeof(job_t) + n * sizeof(rkdet_audit_tensor), i;
    job_t *job = NULL; char *p;
    for (i = 0; i < n; i++) {
        const rkdet_audit_tensor *t = i < n_inputs ? &inputs[i] : &outputs[i - n_inputs];
        bytes += strlen(t->dtype) + 1 + t->ndim * sizeof(uint64_t) + t->size + 16;  /* + alignment */
    }
    pthread_mutex_lock(&a->qlock);  /* a spare large enough, else a new one */
    for (i = 0; i < a->nspare; i++)
        if (a->spare[i]->cap >= bytes) { job = a->spare[i]; a->spare[i] = a->spare[--a->nspare]; break; }
    pthread_mutex_unlock(&a->qlock);
    if (!job) {
        if (!(job = (job_t *)malloc(bytes))) return NULL;
        job->cap = bytes;
    }
    job->t = (rkdet_audit_tensor *)(job + 1); job->n_inputs = n_inputs; job->n_outputs = n_outputs;
    job->latency_us = latency_us;
    p = (char *)(job->t + n);
    for (i = 0; i < n; i++) {
        const rkdet_audit_tensor *t = i < n_inputs ? &inputs[i] : &outputs[i - n_inputs];
        rkdet_audit_tensor *c = &job->t[i];
        uint64_t *dims = (uint64_t *)(void *)p;  /* p stays 8-byte aligned: dims first, then bytes, then dtype */
        if (t->ndim) memcpy(dims, t->shape, t->ndim * sizeof(uint64_t));
        p += t->ndim * sizeof(uint64_t);
        if (t->size) memcpy(p, t->data, t->size);
        c->data = p; c->size = t->size; c->ndim = t->ndim; c->shape = dims;
        p += (t->size + 7) / 8 * 8;
        c->dtype = strcpy(p, t->dtype); p += strlen(t->dtype) + 1;
        p += (8 - ((uintptr_t)p & 7)) & 7;
    }
    return job;
}

/* a tensor list the library can read (the app's mistake is counted as a lost record, never a crash) */
static int readable(const rkdet_audit_tensor *t, size_t n) {
    size_t i;
    if (n && !t) return 0;
    for (i = 0; i < n; i++)
        if (!t[i].dtype || strlen(t[i].dtype) > 16 || (t[i].ndim && !t[i].shape) || (t[i].size && !t[i].data)) return 0;
    return 1;
}

static int refused(rkdet_audit *a) {
    pthread_mutex_lock(&a->lock);
    a->c.write_failures++; a->lost++;
    pthread_mutex_unlock(&a->lock);
    return -1;
}

int rkdet_audit_inference(rkdet_audit *a, const rkdet_audit_tensor *inputs, size_t n_inputs,
                          const rkdet_audit_tensor *outputs, size_t n_outputs, uint64_t latency_us) {
    job_t *job; int queued = 0;
    if (!a) return -1;
    if (!readable(inputs, n_inputs) || !readable(outputs, n_outputs)) return refused(a);
    if (!a->threaded) return record_inference(a, inputs, n_inputs, outputs, n_outputs, latency_us);
    job = copy_job(a, inputs, n_inputs, outputs, n_outputs, latency_us);
    pthread_mutex_lock(&a->qlock);
    if (job && a->qlen < a->qcap) {
        a->queue[(a->qhead + a->qlen) % a->qcap] = job; a->qlen++; queued = 1;
        pthread_cond_signal(&a->qcond);
    }
    pthread_mutex_unlock(&a->qlock);
    if (queued) return 0;
    free(job);  /* a full queue (or no memory): dropped and counted like a full disk */
    return refused(a);
}

/* ---------- canary ---------- */
static int same_dims(uint32_t na, const uint64_t *a, uint32_t nb, const uint64_t *b) {
    return na == nb && (!na || !memcmp(a, b, na * sizeof *a));
}
static int same_tensor(const kept_t *k, const rkdet_audit_tensor *t) {
    return strcmp(k->dtype, t->dtype) == 0 && same_dims(k->ndim, k->shape, t->ndim, t->shape)
           && k->size == t->size && (!t->size || !memcmp(k->data, t->data, t->size));
}
static void b_shape(buf_t *b, const char *dtype, uint32_t ndim, const uint64_t *shape) {
    uint32_t i; buf_t s = {0};  /* Python: "%s%s" % (dtype.str, list(shape)) */
    b_puts(&s, dtype); b_puts(&s, "[");
    for (i = 0; i < ndim; i++) b_printf(&s, i ? ", %llu" : "%llu", (unsigned long long)shape[i]);
    b_puts(&s, "]");
    b_jstr(b, s.s ? s.s : ""); free(s.s);
}
static double half_to_double(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff; double v;
    if (e == 0) v = ldexp(m, -24); else if (e == 31) v = m ? NAN : INFINITY; else v = ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}
/* one element as Python's first_difference writes it (a number; "nan"/"inf"; bool; else its bytes in hex) */
static void b_element(buf_t *b, const char *dtype, const unsigned char *p, size_t width) {
    char kind = dtype[0] ? dtype[1] : 0; double v; size_t i;
    int little = dtype[0] == '<' || dtype[0] == '|' || dtype[0] == '=';
    if (little && kind == 'f' && (width == 2 || width == 4 || width == 8)) {
        if (width == 2) { uint16_t h; memcpy(&h, p, 2); v = half_to_double(h); }
        else if (width == 4) { float f; memcpy(&f, p, 4); v = f; } else memcpy(&v, p, 8);
        if (isnan(v)) b_puts(b, "\"nan\""); else if (isinf(v)) b_puts(b, v > 0 ? "\"inf\"" : "\"-inf\""); else b_float(b, v);
    } else if (little && (kind == 'i' || kind == 'u') && (width == 1 || width == 2 || width == 4 || width == 8)) {
        uint64_t u = 0; memcpy(&u, p, width);
        if (kind == 'i' && width < 8 && (u >> (8 * width - 1)) & 1) u |= ~(uint64_t)0 << (8 * width);
        if (kind == 'i') b_printf(b, "%lld", (long long)u); else b_printf(b, "%llu", (unsigned long long)u);
    } else if (kind == 'b' && width == 1) {
        b_puts(b, p[0] ? "true" : "false");
    } else {
        b_puts(b, "\""); for (i = 0; i < width; i++) b_printf(b, "%02x", p[i]); b_puts(b, "\"");
    }
}
/* bytes per element from numpy's dtype.str ("<f4" -> 4); 0 when it says none */
static size_t dtype_width(const char *dtype) {
    int w = strlen(dtype) >= 3 ? atoi(dtype + 2) : 0;
    return w > 0 && w <= 16 ? (size_t)w : 0;
}
static void first_difference(buf_t *b, const kept_t *k, const rkdet_audit_tensor *t, size_t golden, size_t output) {
    size_t width = dtype_width(t->dtype), i;
    b_puts(b, "{");
    if (strcmp(k->dtype, t->dtype) || !same_dims(k->ndim, k->shape, t->ndim, t->shape)
        || k->size != t->size || width == 0 || t->size % width) {
        b_puts(b, "\"expected\":"); b_shape(b, k->dtype, k->ndim, k->shape);
        b_printf(b, ",\"golden\":%lu,\"got\":", (unsigned long)golden); b_shape(b, t->dtype, t->ndim, t->shape);
        b_printf(b, ",\"output\":%lu}", (unsigned long)output);
        return;
    }
    for (i = 0; i + width <= t->size && !memcmp(k->data + i, (const unsigned char *)t->data + i, width); i += width) {}
    b_puts(b, "\"expected\":"); b_element(b, k->dtype, k->data + i, width);
    b_printf(b, ",\"golden\":%lu,\"got\":", (unsigned long)golden);
    b_element(b, t->dtype, (const unsigned char *)t->data + i, width);
    b_printf(b, ",\"index\":%lu,\"output\":%lu}", (unsigned long)(i / width), (unsigned long)output);
}
static void free_baseline(rkdet_audit *a) {
    size_t i;
    for (i = 0; a->baseline && i < a->base_golden * a->base_outputs; i++) {
        free(a->baseline[i].dtype); free(a->baseline[i].shape); free(a->baseline[i].data);
    }
    free(a->baseline); a->baseline = NULL;
}
static int keep_baseline(rkdet_audit *a, const rkdet_audit_tensor *t, size_t n_golden, size_t n_outputs) {
    size_t i, n = n_golden * n_outputs;
    a->base_golden = n_golden; a->base_outputs = n_outputs;
    if (!(a->baseline = (kept_t *)calloc(n ? n : 1, sizeof *a->baseline))) return -1;
    for (i = 0; i < n; i++) {
        kept_t *k = &a->baseline[i];
        k->dtype = strdup(t[i].dtype); k->ndim = t[i].ndim; k->size = t[i].size;
        k->shape = (uint64_t *)malloc((t[i].ndim ? t[i].ndim : 1) * sizeof *k->shape);
        k->data = (unsigned char *)malloc(t[i].size ? t[i].size : 1);
        if (!k->dtype || !k->shape || !k->data) { free_baseline(a); return -1; }
        if (t[i].ndim) memcpy(k->shape, t[i].shape, t[i].ndim * sizeof *k->shape);
        if (t[i].size) memcpy(k->data, t[i].data, t[i].size);
    }
    return 0;
}

int rkdet_audit_canary(rkdet_audit *a, const rkdet_audit_tensor *t, size_t n_golden, size_t n_outputs) {
    record_t r = {0}; buf_t *outs; char h[65]; size_t g, k; int ok = 1, rc;
    if (!a) return -1;
    if ((n_golden && n_outputs > SIZE_MAX / n_golden) || !readable(t, n_golden * n_outputs)) return refused(a);
    pthread_mutex_lock(&a->lock);
    a->c.canary_runs++;
    outs = rec_field(&r, "outputs");
    b_puts(outs, "[");
    for (g = 0; g < n_golden; g++) {
        b_puts(outs, g ? ",[" : "[");
        for (k = 0; k < n_outputs; k++) { output_hash(&t[g * n_outputs + k], h); if (k) b_puts(outs, ","); b_jstr(outs, h); }
        b_puts(outs, "]");
    }
    b_puts(outs, "]");
    rec_u64(&r, "golden", n_golden);
    if (!a->baseline) {
        if (keep_baseline(a, t, n_golden, n_outputs) != 0) { rec_free(&r); a->c.write_failures++; pthread_mutex_unlock(&a->lock); return -1; }
        b_puts(rec_field(&r, "baseline"), "true");
    } else if (n_golden != a->base_golden || n_outputs != a->base_outputs) {
        kept_t none = {(char *)"?", 0, NULL, NULL, 0};  /* another count of golden inputs or outputs */
        rkdet_audit_tensor other = {"?", 0, NULL, NULL, 0};
        ok = 0; first_difference(rec_field(&r, "first_difference"), &none, n_golden && n_outputs ? &t[0] : &other, 0, 0);
    } else {
        for (g = 0; ok && g < n_golden; g++)
            for (k = 0; ok && k < n_outputs; k++)
                if (!same_tensor(&a->baseline[g * n_outputs + k], &t[g * n_outputs + k])) {
                    ok = 0;
                    first_difference(rec_field(&r, "first_difference"), &a->baseline[g * n_outputs + k], &t[g * n_outputs + k], g, k);
                }
    }
    b_puts(rec_field(&r, "ok"), ok ? "true" : "false");
    rec_str(&r, "build", a->build); rec_str(&r, "core_mask", a->core_mask);
    if (!ok && (++a->alarms <= 10 || a->alarms % 1000 == 0)) {  /* bounded: the log and the counter hold every one */
        int i;
        for (i = 0; i < r.n; i++)
            if (!strcmp(r.f[i].key, "first_difference") && r.f[i].val.s)
                fprintf(stderr, "rkdet audit: canary_failure #%u: outputs differ bitwise from the baseline: %.400s\n",
                        a->alarms, r.f[i].val.s);
    }
    rc = append(a, "canary", &r);
    if (!ok) {
        a->c.canary_failures++;
        write_prom(a);
    }
    pthread_mutex_unlock(&a->lock);
    return rc != 0 ? -1 : ok;
}

/* ---------- shadow ---------- */
/* element i of a tensor as a double (float and integer dtypes of this byte order; NAN where unknown) */
static double element(const rkdet_audit_tensor *t, size_t i, size_t width) {
    const unsigned char *p = (const unsigned char *)t->data + i * width; char kind = t->dtype[0] ? t->dtype[1] : 0;
    if (t->dtype[0] == '>') return NAN;
    if (kind == 'f' && width == 4) { float f; memcpy(&f, p, 4); return f; }
    if (kind == 'f' && width == 8) { double d; memcpy(&d, p, 8); return d; }
    if (kind == 'f' && width == 2) { uint16_t h; memcpy(&h, p, 2); return half_to_double(h); }
    if ((kind == 'i' || kind == 'u' || kind == 'b') && width <= 8) {
        uint64_t u = 0; memcpy(&u, p, width);
        if (kind == 'i' && width < 8 && (u >> (8 * width - 1)) & 1) u |= ~(uint64_t)0 << (8 * width);
        return kind == 'i' ? (double)(int64_t)u : (double)u;
    }
    return NAN;
}
static size_t width_of(const rkdet_audit_tensor *t) {
    size_t w = dtype_width(t->dtype);
    return w ? w : 1;
}
/* numpy's argmax over the flat values: the first maximum, or the first NaN */
static uint64_t decision(const rkdet_audit_tensor *t) {
    size_t w = width_of(t), n = t->size / w, i, best = 0; double top = 0;
    for (i = 0; i < n; i++) {
        double v = element(t, i, w);
        if (isnan(v)) return i;
        if (i == 0 || v > top) { top = v; best = i; }
    }
    return best;
}
static int cmp_d(const void *x, const void *y) { double a = *(const double *)x, b = *(const double *)y; return a < b ? -1 : a > b; }
/* numpy.percentile's default (linear) on sorted values */
static double percentile(const double *v, size_t n, double q) {
    double pos = q / 100.0 * (double)(n - 1); size_t lo = (size_t)pos; double frac = pos - (double)lo;
    return lo + 1 < n ? v[lo] + (v[lo + 1] - v[lo]) * frac : v[lo];
}
static void b_float_or_str(buf_t *b, double v) {
    if (isnan(v)) b_puts(b, "\"nan\""); else if (isinf(v)) b_puts(b, v > 0 ? "\"inf\"" : "\"-inf\""); else b_float(b, v);
}
/* the period's `shadow` record (then a new period); the caller holds the lock */
static void shadow_period(rkdet_audit *a) {
    record_t r = {0}; buf_t *e; size_t k;
    if (!a->period_samples) return;
    rec_u64(&r, "samples", a->period_samples); rec_u64(&r, "disagreements", a->period_disagreements);
    b_float(rec_field(&r, "agreement"), 1.0 - (double)a->period_disagreements / (double)a->period_samples);
    rec_str(&r, "candidate", a->shadow_build[0] ? a->shadow_build : "");
    e = rec_field(&r, "errors");
    b_puts(e, "[");
    for (k = 0; k < a->shadow_outputs && k < SHADOW_MAX_OUTPUTS; k++) {
        double zero = 0, *v = a->n_errors[k] ? a->errors[k] : &zero; size_t n = a->n_errors[k] ? a->n_errors[k] : 1;
        qsort(v, n, sizeof *v, cmp_d);
        b_puts(e, k ? ",{\"max\":" : "{\"max\":"); b_float_or_str(e, v[n - 1]);
        b_printf(e, ",\"output\":%lu,\"p50\":", (unsigned long)k); b_float_or_str(e, percentile(v, n, 50));
        b_puts(e, ",\"p99\":"); b_float_or_str(e, percentile(v, n, 99)); b_puts(e, "}");
        a->n_errors[k] = 0;
    }
    b_puts(e, "]");
    append(a, "shadow", &r);
    a->period_samples = a->period_disagreements = 0;
}

int rkdet_audit_shadow(rkdet_audit *a, const rkdet_audit_tensor *inputs, size_t n_inputs,
                       const rkdet_audit_tensor *served, const rkdet_audit_tensor *candidate, size_t n_outputs) {
    record_t r = {0}; size_t k, i; int agree = 1, rc = 0; buf_t *want, *got;
    if (!a) return -1;
    if (!readable(inputs, n_inputs) || !readable(served, n_outputs) || !readable(candidate, n_outputs)) return refused(a);
    want = rec_field(&r, "served_decision"); got = rec_field(&r, "shadow_decision");
    b_puts(want, "["); b_puts(got, "[");
    for (k = 0; k < n_outputs; k++) {
        uint64_t dw = decision(&served[k]), dg = decision(&candidate[k]);
        b_printf(want, k ? ",%llu" : "%llu", (unsigned long long)dw); b_printf(got, k ? ",%llu" : "%llu", (unsigned long long)dg);
        if (dw != dg) agree = 0;
    }
    b_puts(want, "]"); b_puts(got, "]");
    pthread_mutex_lock(&a->lock);
    a->shadow_samples++; a->period_samples++;
    if (n_outputs > a->shadow_outputs) a->shadow_outputs = n_outputs;
    for (k = 0; k < n_outputs && k < SHADOW_MAX_OUTPUTS; k++) {  /* |served - candidate| per element, bounded */
        const rkdet_audit_tensor *x = &served[k], *y = &candidate[k];
        size_t w = width_of(x), n = x->size / w;
        if (!same_dims(x->ndim, x->shape, y->ndim, y->shape) || width_of(y) * n != y->size) continue;
        if (!a->errors[k] && !(a->errors[k] = (double *)malloc(SHADOW_MAX_SAMPLES * sizeof(double)))) continue;
        for (i = 0; i < n && a->n_errors[k] < SHADOW_MAX_SAMPLES; i++)
            a->errors[k][a->n_errors[k]++] = fabs(element(x, i, w) - element(y, i, width_of(y)));
    }
    if (!agree) {
        a->shadow_disagreements++; a->period_disagreements++;
        rec_hashes(&r, inputs, n_inputs, candidate, n_outputs);
        rec_str(&r, "build", a->build); rec_str(&r, "candidate", a->shadow_build[0] ? a->shadow_build : "");
        if (++a->shadow_alarms <= 10 || a->shadow_alarms % 1000 == 0)
            fprintf(stderr, "rkdet audit: shadow_disagreement #%u: served %.200s, candidate %.200s\n", a->shadow_alarms,
                    want->s ? want->s : "?", got->s ? got->s : "?");
        rc = append(a, "shadow_disagreement", &r);
        write_prom(a);
    } else {
        rec_free(&r);
    }
    if (a->period_samples >= a->shadow_report_every) shadow_period(a);
    pthread_mutex_unlock(&a->lock);
    return rc != 0 ? -1 : agree;
}

const char *rkdet_audit_hash_impl(void) { return rkdet_sha256_impl(); }

void rkdet_audit_get_counters(rkdet_audit *a, rkdet_audit_counters *out) {
    if (!a || !out) return;
    pthread_mutex_lock(&a->lock); *out = a->c; pthread_mutex_unlock(&a->lock);
}

void rkdet_audit_close(rkdet_audit *a) {
    record_t r = {0};
    if (!a) return;
    if (a->threaded) {  /* drain: every queued record is written before the stop record */
        pthread_mutex_lock(&a->qlock); a->stopping = 1; pthread_cond_signal(&a->qcond); pthread_mutex_unlock(&a->qlock);
        pthread_join(a->thread, NULL);
        while (a->nspare) free(a->spare[--a->nspare]);
        free(a->queue); pthread_cond_destroy(&a->qcond); pthread_mutex_destroy(&a->qlock);
        a->threaded = 0;
    }
    pthread_mutex_lock(&a->lock);
    shadow_period(a);  /* the last period's statistics, as the Python library's release() writes them */
    rec_u64(&r, "served", a->c.inferences);
    append(a, "stop", &r);
    write_prom(a);
    if (a->fd >= 0) { fsync(a->fd); close(a->fd); }
    free_baseline(a);
    { size_t k; for (k = 0; k < SHADOW_MAX_OUTPUTS; k++) free(a->errors[k]); }
    pthread_mutex_unlock(&a->lock);
    pthread_mutex_destroy(&a->lock);
    free(a->dir); free(a->prom_dir); free(a);
}
