/* The GGUF block kernel: a llama's linear layers, attention and whole one-token step computed
 * from Q4_1 / Q8_0 blocks in float32 (see gguf.h and app/engine/kernels/gguf.py).
 *
 * Weights are made exactly as numpy de-quantised them (a product, then a sum: no fused
 * multiply-add, hence -ffp-contract=off); every row accumulates them with fma in 32 lanes, then
 * sums the lanes. With AVX-512: two 16-lane registers a row, a copy of the loop for each row
 * count (a constant count keeps the sums in registers) and a tree sum of the lanes, about twice
 * as fast as the plain C, which compilers vectorise less well and which sums in order. Either
 * way a row's sums never depend on the other rows. */
#include "gguf.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS GGUF_ROWS
#define MAX_DIM GGUF_MAX_DIM
#define Q41 4 /* the kernels' own tag for Q4_1 (0: Q8_0) */
#define INLINE static inline __attribute__((always_inline))

#if defined(__AVX512F__)
#include <immintrin.h>
const char *kernel_isa(void) { return "avx512"; }

INLINE void weights(int kind, const void *qs, int64_t i, const float *d, const float *mn,
                    __m512 w[2]) {
    __m512 dd = _mm512_set1_ps(d[i]);
    if (kind == Q41) {
        __m128i p = _mm_loadu_si128((const __m128i *)((const uint8_t *)qs + i * 16));
        __m128i low = _mm_set1_epi8(15);
        __m512 mm = _mm512_set1_ps(mn[i]);
        __m128i q[2] = {_mm_and_si128(p, low), _mm_and_si128(_mm_srli_epi16(p, 4), low)};
        for (int h = 0; h < 2; h++) {
            __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q[h]));
            w[h] = _mm512_add_ps(_mm512_mul_ps(dd, qf), mm);
        }
    } else {
        const int8_t *q = (const int8_t *)qs + i * 32;
        for (int h = 0; h < 2; h++) {
            __m128i p = _mm_loadu_si128((const __m128i *)(q + 16 * h));
            w[h] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(p)), dd);
        }
    }
}

INLINE void rows_mm(int rows, int kind, const float *x, int64_t K, const void *qs, const float *d,
                    const float *mn, int64_t N, float *y) {
    int64_t KB = K / 32;
    for (int64_t n = 0; n < N; n++) {
        __m512 acc[ROWS][2];
        for (int r = 0; r < rows; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        for (int64_t b = 0; b < KB; b++) {
            __m512 w[2];
            weights(kind, qs, n * KB + b, d, mn, w);
            for (int r = 0; r < rows; r++)
                for (int h = 0; h < 2; h++)
                    acc[r][h] = _mm512_fmadd_ps(w[h], _mm512_loadu_ps(x + r * K + b * 32 + 16 * h),
                                                acc[r][h]);
        }
        for (int r = 0; r < rows; r++)
            y[r * N + n] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
    }
}

static void mm(int kind, const float *x, int64_t M, int64_t K, const void *qs, const float *d,
               const float *mn, int64_t N, float *y) {
    for (int64_t r0 = 0; r0 < M; r0 += ROWS) {
        int rows = M - r0 < ROWS ? (int)(M - r0) : ROWS;
        const float *xr = x + r0 * K;
        float *yr = y + r0 * N;
        switch (rows) {
        case 1: rows_mm(1, kind, xr, K, qs, d, mn, N, yr); break;
        case 2: rows_mm(2, kind, xr, K, qs, d, mn, N, yr); break;
        case 3: rows_mm(3, kind, xr, K, qs, d, mn, N, yr); break;
        case 4: rows_mm(4, kind, xr, K, qs, d, mn, N, yr); break;
        case 5: rows_mm(5, kind, xr, K, qs, d, mn, N, yr); break;
        case 6: rows_mm(6, kind, xr, K, qs, d, mn, N, yr); break;
        case 7: rows_mm(7, kind, xr, K, qs, d, mn, N, yr); break;
        default: rows_mm(ROWS, kind, xr, K, qs, d, mn, N, yr); break;
        }
    }
}

void q41_mm(const float *x, int64_t M, int64_t K, const uint8_t *qs, const float *d,
            const float *mn, int64_t N, float *y) {
    mm(Q41, x, M, K, qs, d, mn, N, y);
}

void q80_mm(const float *x, int64_t M, int64_t K, const int8_t *qs, const float *d, int64_t N,
            float *y) {
    mm(0, x, M, K, qs, d, 0, N, y);
}

/* e^x for x <= 0 (a score less the largest), within 2 ulp: Cephes' expf polynomial on
   x - n ln 2, scaled by 2^n. */
static inline __m512 exp_neg(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* One query head against its key head: the scores (then their exponentials) in s. */
INLINE void head(const float *qh, const float *kh, const float *vh, int64_t L, int64_t D,
                 float scale, float *s, float *oh) {
    float top = -INFINITY;
    for (int64_t j = 0; j < L; j++) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t d = 0; d < D; d += 16)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(qh + d), _mm512_loadu_ps(kh + j * D + d), acc);
        s[j] = _mm512_reduce_add_ps(acc) * scale;
        top = s[j] > top ? s[j] : top;
    }
    __m512 total = _mm512_setzero_ps(), t = _mm512_set1_ps(top);
    for (int64_t j = 0; j < L; j += 16) {
        __mmask16 m = L - j >= 16 ? 0xFFFF : (__mmask16)((1u << (L - j)) - 1);
        __m512 e = exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), t));
        _mm512_mask_storeu_ps(s + j, m, e);
        total = _mm512_add_ps(total, _mm512_maskz_mov_ps(m, e));
    }
    __m512 o[MAX_DIM / 16];
    for (int64_t d = 0; d < D; d += 16) o[d / 16] = _mm512_setzero_ps();
    for (int64_t j = 0; j < L; j++) {
        __m512 p = _mm512_set1_ps(s[j]);
        for (int64_t d = 0; d < D; d += 16)
            o[d / 16] = _mm512_fmadd_ps(p, _mm512_loadu_ps(vh + j * D + d), o[d / 16]);
    }
    __m512 inverse = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(total));
    for (int64_t d = 0; d < D; d += 16) _mm512_storeu_ps(oh + d, _mm512_mul_ps(o[d / 16], inverse));
}

#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define GROUP 4
const char *kernel_isa(void) { return "avx2"; }

/* The 32 weights of block i in four 8-lane registers, in order. */
INLINE void weights(int kind, const void *qs, int64_t i, const float *d, const float *mn,
                    __m256 w[4]) {
    __m256 dd = _mm256_set1_ps(d[i]);
    if (kind == Q41) {
        __m128i p = _mm_loadu_si128((const __m128i *)((const uint8_t *)qs + i * 16));
        __m128i low = _mm_set1_epi8(15);
        __m128i q[2] = {_mm_and_si128(p, low), _mm_and_si128(_mm_srli_epi16(p, 4), low)};
        __m256 mm = _mm256_set1_ps(mn[i]);
        for (int h = 0; h < 2; h++) {
            __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q[h]));
            __m256 b = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q[h], 8)));
            w[2 * h] = _mm256_add_ps(_mm256_mul_ps(dd, a), mm);
            w[2 * h + 1] = _mm256_add_ps(_mm256_mul_ps(dd, b), mm);
        }
    } else {
        const int8_t *q = (const int8_t *)qs + i * 32;
        for (int h = 0; h < 4; h++) {
            __m128i p = _mm_loadl_epi64((const __m128i *)(q + 8 * h));
            w[h] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(p)), dd);
        }
    }
}

INLINE float sum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* Output n of up to GROUP rows. Sixteen registers hold no more than four rows' sums beside the
   weights; a row's sums are the same whatever its group (two accumulators, the same order). */
INLINE void rows_n(int rows, int kind, const float *x, int64_t K, const void *qs, const float *d,
                   const float *mn, int64_t n, int64_t N, float *y) {
    int64_t KB = K / 32;
    __m256 acc[GROUP][2];
    for (int r = 0; r < rows; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < KB; b++) {
        __m256 w[4];
        weights(kind, qs, n * KB + b, d, mn, w);
        for (int r = 0; r < rows; r++) {
            const float *xr = x + r * K + b * 32;
            for (int h = 0; h < 4; h++)
                acc[r][h & 1] = _mm256_fmadd_ps(w[h], _mm256_loadu_ps(xr + 8 * h), acc[r][h & 1]);
        }
    }
    for (int r = 0; r < rows; r++) y[r * N + n] = sum8(_mm256_add_ps(acc[r][0], acc[r][1]));
}

/* Every group of a batch for one output before the next output: its blocks stay in L1. */
static void mm(int kind, const float *x, int64_t M, int64_t K, const void *qs, const float *d,
               const float *mn, int64_t N, float *y) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < M; g += GROUP) {
            const float *xg = x + g * K;
            float *yg = y + g * N;
            switch (M - g < GROUP ? M - g : GROUP) {
            case 1: rows_n(1, kind, xg, K, qs, d, mn, n, N, yg); break;
            case 2: rows_n(2, kind, xg, K, qs, d, mn, n, N, yg); break;
            case 3: rows_n(3, kind, xg, K, qs, d, mn, n, N, yg); break;
            default: rows_n(GROUP, kind, xg, K, qs, d, mn, n, N, yg); break;
            }
        }
}

void q41_mm(const float *x, int64_t M, int64_t K, const uint8_t *qs, const float *d,
            const float *mn, int64_t N, float *y) {
    mm(Q41, x, M, K, qs, d, mn, N, y);
}

void q80_mm(const float *x, int64_t M, int64_t K, const int8_t *qs, const float *d, int64_t N,
            float *y) {
    mm(0, x, M, K, qs, d, 0, N, y);
}

/* e^x for x <= 0, as the AVX-512 build computes it; 2^n made in the exponent's bits. */
static inline __m256 exp_neg(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
}

/* One query head against its key head: the scores (then their exponentials) in s. */
INLINE void head(const float *qh, const float *kh, const float *vh, int64_t L, int64_t D,
                 float scale, float *s, float *oh) {
    float top = -INFINITY;
    for (int64_t j = 0; j < L; j++) {
        __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
        for (int64_t d = 0; d < D; d += 16) {
            const float *kj = kh + j * D + d;
            a = _mm256_fmadd_ps(_mm256_loadu_ps(qh + d), _mm256_loadu_ps(kj), a);
            b = _mm256_fmadd_ps(_mm256_loadu_ps(qh + d + 8), _mm256_loadu_ps(kj + 8), b);
        }
        s[j] = sum8(_mm256_add_ps(a, b)) * scale;
        top = s[j] > top ? s[j] : top;
    }
    __m256 total = _mm256_setzero_ps(), t = _mm256_set1_ps(top);
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t j = 0; j < L; j += 8) {
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(L - j < 8 ? L - j : 8)), lanes);
        __m256 e = exp_neg(_mm256_sub_ps(_mm256_maskload_ps(s + j, m), t));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(s + j, m, e);
        total = _mm256_add_ps(total, e);
    }
    __m256 o[MAX_DIM / 8];
    for (int64_t d = 0; d < D; d += 8) o[d / 8] = _mm256_setzero_ps();
    for (int64_t j = 0; j < L; j++) {
        __m256 p = _mm256_set1_ps(s[j]);
        for (int64_t d = 0; d < D; d += 8)
            o[d / 8] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vh + j * D + d), o[d / 8]);
    }
    __m256 inverse = _mm256_set1_ps(1.0f / sum8(total));
    for (int64_t d = 0; d < D; d += 8) _mm256_storeu_ps(oh + d, _mm256_mul_ps(o[d / 8], inverse));
}

#else
const char *kernel_isa(void) { return "portable"; }

static void finish(float acc[ROWS][32], int64_t rows, int64_t r0, int64_t N, int64_t n, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        float s = 0;
        for (int j = 0; j < 32; j++) s += acc[r][j];
        y[(r0 + r) * N + n] = s;
    }
}

void q41_mm(const float *x, int64_t M, int64_t K, const uint8_t *qs, const float *d,
            const float *mn, int64_t N, float *y) {
    int64_t KB = K / 32;
    for (int64_t r0 = 0; r0 < M; r0 += ROWS) {
        int64_t rows = M - r0 < ROWS ? M - r0 : ROWS;
        for (int64_t n = 0; n < N; n++) {
            float acc[ROWS][32] = {{0}};
            for (int64_t b = 0; b < KB; b++) {
                const uint8_t *q = qs + (n * KB + b) * 16;
                float dd = d[n * KB + b], mm = mn[n * KB + b], w[32];
                for (int j = 0; j < 16; j++) {
                    w[j] = dd * (float)(q[j] & 15) + mm;
                    w[j + 16] = dd * (float)(q[j] >> 4) + mm;
                }
                for (int64_t r = 0; r < rows; r++) {
                    const float *xr = x + (r0 + r) * K + b * 32;
                    for (int j = 0; j < 32; j++) acc[r][j] = fmaf(w[j], xr[j], acc[r][j]);
                }
            }
            finish(acc, rows, r0, N, n, y);
        }
    }
}

void q80_mm(const float *x, int64_t M, int64_t K, const int8_t *qs, const float *d, int64_t N,
            float *y) {
    int64_t KB = K / 32;
    for (int64_t r0 = 0; r0 < M; r0 += ROWS) {
        int64_t rows = M - r0 < ROWS ? M - r0 : ROWS;
        for (int64_t n = 0; n < N; n++) {
            float acc[ROWS][32] = {{0}};
            for (int64_t b = 0; b < KB; b++) {
                const int8_t *q = qs + (n * KB + b) * 32;
                float dd = d[n * KB + b], w[32];
                for (int j = 0; j < 32; j++) w[j] = (float)q[j] * dd;
                for (int64_t r = 0; r < rows; r++) {
                    const float *xr = x + (r0 + r) * K + b * 32;
                    for (int j = 0; j < 32; j++) acc[r][j] = fmaf(w[j], xr[j], acc[r][j]);
                }
            }
            finish(acc, rows, r0, N, n, y);
        }
    }
}

/* One query head against its key head: the scores (then their exponentials) in s. */
INLINE void head(const float *qh, const float *kh, const float *vh, int64_t L, int64_t D,
                 float scale, float *s, float *oh) {
    float top = -INFINITY, total = 0;
    for (int64_t j = 0; j < L; j++) {
        float dot = 0;
        for (int64_t d = 0; d < D; d++) dot = fmaf(qh[d], kh[j * D + d], dot);
        s[j] = dot * scale;
        top = s[j] > top ? s[j] : top;
    }
    for (int64_t j = 0; j < L; j++) total += s[j] = expf(s[j] - top);
    for (int64_t d = 0; d < D; d++) oh[d] = 0;
    for (int64_t j = 0; j < L; j++)
        for (int64_t d = 0; d < D; d++) oh[d] = fmaf(s[j], vh[j * D + d], oh[d]);
    for (int64_t d = 0; d < D; d++) oh[d] /= total;
}

#endif

/* The embedded model's heads are 64 wide: with the width known, the query stays in registers
   and the loops unroll (1.5x faster than any width, and the same sums). */
static void head_64(const float *qh, const float *kh, const float *vh, int64_t L, float scale,
                    float *s, float *oh) {
    head(qh, kh, vh, L, 64, scale, s, oh);
}

static void head_any(const float *qh, const float *kh, const float *vh, int64_t L, int64_t D,
                     float scale, float *s, float *oh) {
    head(qh, kh, vh, L, D, scale, s, oh);
}

INLINE void attend_head(const float *qh, const float *kh, const float *vh, int64_t L, int64_t D,
                        float scale, float *s, float *oh) {
    if (D == 64)
        head_64(qh, kh, vh, L, scale, s, oh);
    else
        head_any(qh, kh, vh, L, D, scale, s, oh);
}

/* H query heads over L tokens of KV key heads (each query head's key head: h / (H / KV)). */
static void heads(const float *q, int64_t H, const float *k, const float *v, int64_t KV, int64_t L,
                  int64_t kstride, int64_t vstride, int64_t D, float scale, float *s, float *out) {
    for (int64_t h = 0; h < H; h++)
        attend_head(q + h * D, k + h / (H / KV) * kstride, v + h / (H / KV) * vstride, L, D, scale,
                    s, out + h * D);
}

int attend(const float *q, int64_t H, const float *k, const float *v, int64_t KV, int64_t L,
           int64_t kstride, int64_t vstride, int64_t D, float scale, float *out) {
    float *s = malloc(L * sizeof(float));
    if (!s) return 1;
    heads(q, H, k, v, KV, L, kstride, vstride, D, scale, s, out);
    free(s);
    return 0;
}

/* A batch's one-token step, every row in one call: row r's new keys and values (k, v:
   rows x KV x D) are written into its cache at position slots[r].held (room there is the
   caller's), then its H query heads attend over held + 1 tokens, as attend() does. A slot is
   {keys, values, held, key head stride, value head stride}, its buffers [KV, capacity, D]. */

/* One row: its new keys and values (KV x D) written into its cache at c->held, then its H
   query heads' attention over the held + 1 tokens (s: room for their scores). */
static void write_and_attend(const slot *c, const float *q, const float *k, const float *v,
                             int64_t H, int64_t KV, int64_t D, float scale, float *s, float *out) {
    size_t bytes = D * sizeof(float);
    for (int64_t h = 0; h < KV; h++) {
        memcpy(c->keys + h * c->kstride + c->held * D, k + h * D, bytes);
        memcpy(c->values + h * c->vstride + c->held * D, v + h * D, bytes);
    }
    heads(q, H, c->keys, c->values, KV, c->held + 1, c->kstride, c->vstride, D, scale, s, out);
}

int attend_rows(int64_t R, const float *q, const float *k, const float *v, int64_t H, int64_t KV,
                int64_t D, const slot *slots, float scale, float *out) {
    int64_t longest = 0;
    for (int64_t r = 0; r < R; r++)
        if (slots[r].held + 1 > longest) longest = slots[r].held + 1;
    float *s = malloc(longest * sizeof(float));
    if (!s) return 1;
    for (int64_t r = 0; r < R; r++)
        write_and_attend(slots + r, q + r * H * D, k + r * KV * D, v + r * KV * D, H, KV, D, scale,
                         s, out + r * H * D);
    free(s);
    return 0;
}

/* A llama decoder's one-token step for R rows in one call, from the blocks: the embedding, each
   layer (RMSNorm, q/k/v, RoPE, the rows' cache writes and attention as attend_rows() makes them,
   o, the residual, RMSNorm, silu(gate) * up, down, the residual), the final RMSNorm and the
   head, as transformers' llama computes them (the same products and sums, in float32, up to
   their order), with the GIL dropped once for the whole pass instead of at every operation.
   slots holds R rows of L layers' caches (row-major); logits is R x vocab. */

static void matmul(const matrix *w, const float *x, int64_t M, int64_t K, float *y) {
    if (w->kind == GGUF_Q4_1)
        q41_mm(x, M, K, w->qs, w->d, w->mn, w->outputs, y);
    else
        q80_mm(x, M, K, w->qs, w->d, w->outputs, y);
}

/* transformers' LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then weight * that. */
static void rms_norm(const float *x, const float *w, int64_t R, int64_t H, float eps, float *y) {
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * H;
        float squares = 0;
        for (int64_t i = 0; i < H; i++) squares += xr[i] * xr[i];
        float inverse = 1.0f / sqrtf(squares / (float)H + eps);
        for (int64_t i = 0; i < H; i++) y[r * H + i] = w[i] * (xr[i] * inverse);
    }
}

/* x * cos + rotate_half(x) * sin over n heads of width D (rotate_half: (-x2, x1)). */
static void rope(float *x, int64_t n, int64_t D, const float *cos_, const float *sin_) {
    int64_t half = D / 2;
    for (int64_t h = 0; h < n; h++) {
        float *xh = x + h * D;
        for (int64_t i = 0; i < half; i++) {
            float a = xh[i], b = xh[i + half];
            xh[i] = a * cos_[i] + -b * sin_[i];
            xh[i + half] = b * cos_[i + half] + a * sin_[i + half];
        }
    }
}

int decode_rows(const decoder *m, int64_t R, const int64_t *tokens, const slot *slots,
                float *logits) {
    int64_t H = m->hidden, D = m->head_dim, QW = m->heads * D, KW = m->kv_heads * D;
    int64_t I = m->intermediate, L = m->layers, longest = 0;
    for (int64_t i = 0; i < R * L; i++)
        if (slots[i].held + 1 > longest) longest = slots[i].held + 1;
    size_t floats = R * (3 * H + QW + 2 * KW + QW + 2 * I + 2 * D) + longest;
    float *work = malloc(floats * sizeof(float));
    if (!work) return 1;
    float *x = work, *h = x + R * H, *t = h + R * H, *q = t + R * H, *k = q + R * QW;
    float *v = k + R * KW, *att = v + R * KW, *gate = att + R * QW, *up = gate + R * I;
    float *angles = up + R * I, *scores = angles + 2 * R * D;
    for (int64_t r = 0; r < R; r++) {
        memcpy(x + r * H, m->embed + tokens[r] * H, H * sizeof(float));
        float position = (float)slots[r * L].held, *c = angles + 2 * r * D, *s = c + D;
        for (int64_t i = 0; i < D; i++) {
            float angle = position * m->inv_freq[i % (D / 2)];
            c[i] = cosf(angle) * m->attention_scaling;
            s[i] = sinf(angle) * m->attention_scaling;
        }
    }
    for (int64_t l = 0; l < L; l++) {
        const block_layer *w = m->layer + l;
        rms_norm(x, w->attn_norm, R, H, m->eps, h);
        matmul(&w->q, h, R, H, q);
        matmul(&w->k, h, R, H, k);
        matmul(&w->v, h, R, H, v);
        for (int64_t r = 0; r < R; r++) {
            const float *c = angles + 2 * r * D;
            rope(q + r * QW, m->heads, D, c, c + D);
            rope(k + r * KW, m->kv_heads, D, c, c + D);
            write_and_attend(slots + r * L + l, q + r * QW, k + r * KW, v + r * KW, m->heads,
                             m->kv_heads, D, m->scale, scores, att + r * QW);
        }
        matmul(&w->o, att, R, QW, t);
        for (int64_t i = 0; i < R * H; i++) x[i] = x[i] + t[i];
        rms_norm(x, w->mlp_norm, R, H, m->eps, h);
        matmul(&w->gate, h, R, H, gate);
        matmul(&w->up, h, R, H, up);
        for (int64_t i = 0; i < R * I; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
        matmul(&w->down, gate, R, I, t);
        for (int64_t i = 0; i < R * H; i++) x[i] = x[i] + t[i];
    }
    rms_norm(x, m->norm, R, H, m->eps, h);
    matmul(&m->head, h, R, H, logits);
    free(work);
    return 0;
}

int kernel_cpu_level(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("x86-64-v4")) return 4;
    if (__builtin_cpu_supports("x86-64-v3")) return 3;
    if (__builtin_cpu_supports("x86-64-v2")) return 2;
    return 1;
#else
    return 0;
#endif
}

#define SIZE(type) at += snprintf(out + at, room(at, size), "%s=%zu ", #type, sizeof(type))
#define FIELD(type, field)                                                                         \
    at += snprintf(out + at, room(at, size), "%s.%s=%zu ", #type, #field, offsetof(type, field))

static size_t room(int64_t at, int64_t size) { return at < size ? (size_t)(size - at) : 0; }

int64_t kernel_layout(char *out, int64_t size) {
    int64_t at = 0;
    if (size > 0) out[0] = 0;
    SIZE(slot);
    FIELD(slot, keys);
    FIELD(slot, values);
    FIELD(slot, held);
    FIELD(slot, kstride);
    FIELD(slot, vstride);
    SIZE(matrix);
    FIELD(matrix, kind);
    FIELD(matrix, outputs);
    FIELD(matrix, qs);
    FIELD(matrix, d);
    FIELD(matrix, mn);
    SIZE(block_layer);
    FIELD(block_layer, attn_norm);
    FIELD(block_layer, mlp_norm);
    FIELD(block_layer, q);
    FIELD(block_layer, k);
    FIELD(block_layer, v);
    FIELD(block_layer, o);
    FIELD(block_layer, gate);
    FIELD(block_layer, up);
    FIELD(block_layer, down);
    SIZE(decoder);
    FIELD(decoder, hidden);
    FIELD(decoder, heads);
    FIELD(decoder, kv_heads);
    FIELD(decoder, head_dim);
    FIELD(decoder, intermediate);
    FIELD(decoder, layers);
    FIELD(decoder, vocab);
    FIELD(decoder, eps);
    FIELD(decoder, scale);
    FIELD(decoder, attention_scaling);
    FIELD(decoder, embed);
    FIELD(decoder, norm);
    FIELD(decoder, inv_freq);
    FIELD(decoder, head);
    FIELD(decoder, layer);
    return at;
}
