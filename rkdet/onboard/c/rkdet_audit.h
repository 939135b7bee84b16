/* rkdet_audit.h: the serving audit for apps on the RKNN C runtime (docs/AUDIT.md, "The C library").
 *
 * Per inference the app calls rkdet_audit_inference() with its inputs and the runtime's outputs; the
 * library appends one record to the same hash-chained log the Python library (rkdet.onboard.audit_chain)
 * writes: audit-NNNNNNNN.jsonl, one canonical JSON line per record, `prev` = sha256 of the previous
 * line's bytes, files rotated at a size bound and pruned beyond a count, so `rkdet audit verify` reads
 * logs of both unchanged. Nothing here blocks or fails the inference: a refused write (full disk) is
 * dropped, counted (rkdet_audit_counters, the textfile) and declared by the next record written
 * (`lost_before`); every call returns a status the app may ignore. Calls on one handle are serialized
 * by its own mutex; with settings.background_queue a recorder thread does the hashing and the append. */
#ifndef RKDET_AUDIT_H
#define RKDET_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor as the app holds it: numpy's dtype.str ("<f4", "|u1", "|i1", "<f2", "<i4", ...), the
 * dims, and the C-order bytes. Hashed as THE output hash: sha256(dtype "|" dims joined by "," "|" bytes). */
typedef struct {
    const char *dtype;
    uint32_t ndim;
    const uint64_t *shape;
    const void *data;
    size_t size;
} rkdet_audit_tensor;

typedef struct {
    const char *log_dir;      /* created if missing (one level) */
    const char *prom_dir;     /* NULL: no textfile; else <prom_dir>/rkdet_audit.prom, node_exporter's convention */
    const char *build;        /* the build fingerprint, 64 lowercase hex */
    const char *core_mask;    /* as run.json names it: "auto", "0", "0_1_2", ...; NULL: "auto" */
    size_t max_file_bytes;    /* rotate at this size; 0: 8 MiB; at least 256 KiB */
    unsigned max_files;       /* keep at most this many files; 0: 64; at least 2 */
    unsigned fsync_every;     /* fsync after this many records; 0: the kernel's own writeback */
    unsigned prom_every;      /* rewrite the textfile every this many inferences; 0: 100 */
    unsigned background_queue; /* 0: hash and append on the calling thread; N: the calling thread copies the
                                  tensors onto a queue of N inferences and a recorder thread hashes and appends
                                  (a full queue drops the record and counts it, like a full disk) */
    const char *shadow_build; /* the candidate's fingerprint (64 lowercase hex) when the app runs a shadow; else NULL */
    unsigned shadow_report_every; /* a `shadow` record of the period's statistics every this many samples; 0: 1000 */
} rkdet_audit_settings;

typedef struct {
    uint64_t inferences, canary_runs, canary_failures, chain_breaks, write_failures, records_written;
    double hash_seconds;      /* thread CPU spent hashing inputs and outputs */
} rkdet_audit_counters;

typedef struct rkdet_audit rkdet_audit;

/* Opens the log (a start always opens a new file continuing the chain of the last one; a torn tail or an
 * unreadable last record is declared in its first record) and writes the `start` record. NULL, with one
 * line in err, when the folder cannot be used or the settings are wrong: the app decides whether to
 * serve unaudited. */
rkdet_audit *rkdet_audit_open(const rkdet_audit_settings *settings, char *err, size_t errlen);

/* One `inference` record. 0: written (or queued); -1: dropped and counted (never raised; also for a tensor
 * list the library cannot read: a NULL dtype, shape or data where one is needed). */
int rkdet_audit_inference(rkdet_audit *a, const rkdet_audit_tensor *inputs, size_t n_inputs,
                          const rkdet_audit_tensor *outputs, size_t n_outputs, uint64_t latency_us);

/* One `canary` record for the outputs of the build's golden inputs (n_golden x n_outputs tensors, golden
 * input by golden input). The first call is the baseline (kept in memory); later calls compare bitwise
 * and name the first differing element. 1: equal (or the baseline); 0: a difference (counted, one line on
 * stderr, the textfile rewritten); -1: not recorded (a write refused, or no memory for the baseline). */
int rkdet_audit_canary(rkdet_audit *a, const rkdet_audit_tensor *outputs, size_t n_golden, size_t n_outputs);

/* One shadow sample: the app ran the candidate build on a sampled live input (`inputs`) after serving it;
 * `served` are the outputs it returned, `candidate` the candidate's (never returned to anyone). The decisions
 * (numpy's argmax of each output) are compared, |served - candidate| per element is accumulated (at most
 * 20 000 values per output and period) and every shadow_report_every samples a `shadow` record gives
 * P50/P99/max per output. 1: same decisions; 0: a `shadow_disagreement` record (counted, a line on stderr);
 * -1: not recorded. */
int rkdet_audit_shadow(rkdet_audit *a, const rkdet_audit_tensor *inputs, size_t n_inputs,
                       const rkdet_audit_tensor *served, const rkdet_audit_tensor *candidate, size_t n_outputs);

void rkdet_audit_get_counters(rkdet_audit *a, rkdet_audit_counters *out);

/* Which sha256 code hashes: "armv8-sha2" or "x86-sha-ni" (the CPU's instructions, found at run time), or
 * "portable"; RKDET_SHA256=portable in the environment forces the portable code. Same hashes either way. */
const char *rkdet_audit_hash_impl(void);

/* The `stop` record, the textfile, fsync, close; frees the handle (NULL is accepted). */
void rkdet_audit_close(rkdet_audit *a);

#ifdef __cplusplus
}
#endif
#endif
