/* rkdet_sha256.h: sha256 (FIPS 180-4), header-only, for rkdet's C sources on the board.
 *
 * Why our own: the board's C apps must compute THE output hash and THE record hash
 * (docs/FORMATS.md, docs/AUDIT.md: both sha256) with no library the board may lack; the test
 * suite checks it against Python's hashlib. rkdet_run_c.c and rkdet_audit.c both include it. */
#ifndef RKDET_SHA256_H
#define RKDET_SHA256_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { uint32_t h[8]; uint64_t len; unsigned char buf[64]; size_t fill; } rkdet_sha256_ctx;

static const uint32_t rkdet_sha256_k[64] = {
0x428a2f98,0x71374491,0xb5c0fbcf,0xe9b5dba5,0x3956c25b,0x59f111f1,0x923f82a4,0xab1c5ed5,0xd807aa98,0x12835b01,
0x243185be,0x550c7dc3,0x72be5d74,0x80deb1fe,0x9bdc06a7,0xc19bf174,0xe49b69c1,0xefbe4786,0x0fc19dc6,0x240ca1cc,
0x2de92c6f,0x4a7484aa,0x5cb0a9dc,0x76f988da,0x983e5152,0xa831c66d,0xb00327c8,0xbf597fc7,0xc6e00bf3,0xd5a79147,
0x06ca6351,0x14292967,0x27b70a85,0x2e1b2138,0x4d2c6dfc,0x53380d13,0x650a7354,0x766a0abb,0x81c2c92e,0x92722c85,
0xa2bfe8a1,0xa81a664b,0xc24b8b70,0xc76c51a3,0xd192e819,0xd6990624,0xf40e3585,0x106aa070,0x19a4c116,0x1e376c08,
0x2748774c,0x34b0bcb5,0x391c0cb3,0x4ed8aa4a,0x5b9cca4f,0x682e6ff3,0x748f82ee,0x78a5636f,0x84c87814,0x8cc70208,
0x90befffa,0xa4506ceb,0xbef9a3f7,0xc67178f2};

#define RKDET_ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void rkdet_sha256_block(rkdet_sha256_ctx *c, const unsigned char *p) {
    uint32_t w[64], a, b, d, e, f, g, h, cc, t1, t2; int i;
    for (i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4*i] << 24 | (uint32_t)p[4*i+1] << 16 | (uint32_t)p[4*i+2] << 8 | p[4*i+3];
    for (i = 16; i < 64; i++) {
        uint32_t s0 = RKDET_ROR(w[i-15], 7) ^ RKDET_ROR(w[i-15], 18) ^ (w[i-15] >> 3);
        uint32_t s1 = RKDET_ROR(w[i-2], 17) ^ RKDET_ROR(w[i-2], 19) ^ (w[i-2] >> 10);
        w[i] = w[i-16] + s0 + w[i-7] + s1;
    }
    a = c->h[0]; b = c->h[1]; cc = c->h[2]; d = c->h[3]; e = c->h[4]; f = c->h[5]; g = c->h[6]; h = c->h[7];
    for (i = 0; i < 64; i++) {
        t1 = h + (RKDET_ROR(e, 6) ^ RKDET_ROR(e, 11) ^ RKDET_ROR(e, 25)) + ((e & f) ^ (~e & g)) + rkdet_sha256_k[i] + w[i];
        t2 = (RKDET_ROR(a, 2) ^ RKDET_ROR(a, 13) ^ RKDET_ROR(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
        h = g; g = f; f = e; e = d + t1; d = cc; cc = b; b = a; a = t1 + t2;
    }
    c->h[0] += a; c->h[1] += b; c->h[2] += cc; c->h[3] += d; c->h[4] += e; c->h[5] += f; c->h[6] += g; c->h[7] += h;
}

static void rkdet_sha256_init(rkdet_sha256_ctx *c) {
    static const uint32_t iv[8] = {0x6a09e667,0xbb67ae85,0x3c6ef372,0xa54ff53a,0x510e527f,0x9b05688c,0x1f83d9ab,0x5be0cd19};
    memcpy(c->h, iv, sizeof iv); c->len = 0; c->fill = 0;
}

/* ---- the CPU's own sha256 instructions where it has them (ARMv8 SHA2, x86 SHA-NI), chosen at run time ---- */
#if defined(__aarch64__) && defined(__GNUC__) && defined(__linux__)
#include <arm_neon.h>
#include <sys/auxv.h>
#define RKDET_SHA256_ACCEL "armv8-sha2"
__attribute__((target("+crypto")))
static void rkdet_sha256_accel(uint32_t st[8], const unsigned char *p, size_t blocks) {
    uint32x4_t s0 = vld1q_u32(&st[0]), s1 = vld1q_u32(&st[4]);
    for (; blocks; blocks--, p += 64) {
        uint32x4_t a0 = s0, a1 = s1, m[4]; int i;
        for (i = 0; i < 4; i++) m[i] = vreinterpretq_u32_u8(vrev32q_u8(vld1q_u8(p + 16 * i)));
        for (i = 0; i < 16; i++) {
            uint32x4_t wk = vaddq_u32(m[i & 3], vld1q_u32(&rkdet_sha256_k[4 * i])), abcd = s0;
            s0 = vsha256hq_u32(s0, s1, wk);
            s1 = vsha256h2q_u32(s1, abcd, wk);
            if (i < 12) m[i & 3] = vsha256su1q_u32(vsha256su0q_u32(m[i & 3], m[(i + 1) & 3]), m[(i + 2) & 3], m[(i + 3) & 3]);
        }
        s0 = vaddq_u32(s0, a0); s1 = vaddq_u32(s1, a1);
    }
    vst1q_u32(&st[0], s0); vst1q_u32(&st[4], s1);
}
static int rkdet_sha256_cpu_has(void) {
#ifndef HWCAP_SHA2
#define HWCAP_SHA2 (1 << 6)
#endif
    return (getauxval(AT_HWCAP) & HWCAP_SHA2) != 0;
}
#elif defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define RKDET_SHA256_ACCEL "x86-sha-ni"
__attribute__((target("sha,sse4.1,ssse3")))
static void rkdet_sha256_accel(uint32_t st[8], const unsigned char *p, size_t blocks) {
    const __m128i mask = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i t = _mm_loadu_si128((const __m128i *)&st[0]), s1 = _mm_loadu_si128((const __m128i *)&st[4]), s0;
    t = _mm_shuffle_epi32(t, 0xB1);         /* CDAB */
    s1 = _mm_shuffle_epi32(s1, 0x1B);       /* EFGH */
    s0 = _mm_alignr_epi8(t, s1, 8);         /* ABEF */
    s1 = _mm_blend_epi16(s1, t, 0xF0);      /* CDGH */
    for (; blocks; blocks--, p += 64) {
        __m128i a0 = s0, a1 = s1, m[4]; int i;
        for (i = 0; i < 4; i++) m[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), mask);
        for (i = 0; i < 16; i++) {
            __m128i wk = _mm_add_epi32(m[i & 3], _mm_loadu_si128((const __m128i *)&rkdet_sha256_k[4 * i]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, wk);
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(wk, 0x0E));
            if (i < 12)
                m[i & 3] = _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(m[i & 3], m[(i + 1) & 3]),
                                                              _mm_alignr_epi8(m[(i + 3) & 3], m[(i + 2) & 3], 4)),
                                                m[(i + 3) & 3]);
        }
        s0 = _mm_add_epi32(s0, a0); s1 = _mm_add_epi32(s1, a1);
    }
    t = _mm_shuffle_epi32(s0, 0x1B);        /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xB1);       /* DCHG */
    s0 = _mm_blend_epi16(t, s1, 0xF0);      /* DCBA */
    s1 = _mm_alignr_epi8(s1, t, 8);         /* HGFE */
    _mm_storeu_si128((__m128i *)&st[0], s0); _mm_storeu_si128((__m128i *)&st[4], s1);
}
static int rkdet_sha256_cpu_has(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 19)) || !(c & (1u << 9))) return 0;  /* SSE4.1, SSSE3 */
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 29) & 1;  /* SHA */
}
#endif

/* 1: the CPU's instructions, 0: portable C. RKDET_SHA256=portable in the environment forces the portable
 * code (the tests compare both with hashlib; the bench measures both). */
static int rkdet_sha256_use_accel(void) {
#ifdef RKDET_SHA256_ACCEL
    static int chosen = -1;
    if (chosen < 0) {
        const char *force = getenv("RKDET_SHA256");
        chosen = (force && !strcmp(force, "portable")) ? 0 : rkdet_sha256_cpu_has();
    }
    return chosen;
#else
    return 0;
#endif
}

static const char *rkdet_sha256_impl(void) {
#ifdef RKDET_SHA256_ACCEL
    if (rkdet_sha256_use_accel()) return RKDET_SHA256_ACCEL;
#endif
    return "portable";
}

static void rkdet_sha256_blocks(rkdet_sha256_ctx *c, const unsigned char *p, size_t blocks) {
#ifdef RKDET_SHA256_ACCEL
    if (rkdet_sha256_use_accel()) { rkdet_sha256_accel(c->h, p, blocks); return; }
#endif
    for (; blocks; blocks--, p += 64) rkdet_sha256_block(c, p);
}

static void rkdet_sha256_update(rkdet_sha256_ctx *c, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    c->len += n;
    while (n && c->fill) {  /* finish a partial block */
        size_t take = 64 - c->fill; if (take > n) take = n;
        memcpy(c->buf + c->fill, p, take); c->fill += take; p += take; n -= take;
        if (c->fill == 64) { rkdet_sha256_blocks(c, c->buf, 1); c->fill = 0; }
    }
    if (n >= 64) { rkdet_sha256_blocks(c, p, n / 64); p += n / 64 * 64; n %= 64; }  /* whole blocks from the data */
    if (n) { memcpy(c->buf, p, n); c->fill = n; }
}

/* lowercase hex into out[65] */
static void rkdet_sha256_hex(rkdet_sha256_ctx *c, char out[65]) {
    uint64_t bits = c->len * 8; unsigned char pad = 0x80, zero = 0, lenb[8]; int i;
    rkdet_sha256_update(c, &pad, 1);
    while (c->fill != 56) rkdet_sha256_update(c, &zero, 1);
    for (i = 0; i < 8; i++) lenb[i] = (unsigned char)(bits >> (56 - 8 * i));
    rkdet_sha256_update(c, lenb, 8);
    for (i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", (unsigned)c->h[i]);
    out[64] = 0;
}

#endif
