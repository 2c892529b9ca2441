"""The embedded model's linear layers run from the GGUF's blocks: float32, a fifth of the bytes.

The embedded checkpoint is the GGUF de-quantised once: every float32 weight of a decoder linear
layer is exactly ``d * q + m`` of its Q4_1 block (32 weights, a 4-bit ``q`` each, ``d`` and ``m``
float16), and every weight of the tied embeddings / head exactly ``q * d`` of its Q8_0 block.
A decoding step on CPU is bound by the memory bandwidth of reading those float32 weights (about
540 MB a token); the blocks hold the same weights in about 110 MB. :class:`BlockLinear` computes
a layer's product from the blocks, with the very float32 weights (made in registers, in the
order numpy made them) and float32 accumulation: only the order of the sums differs from torch's
float32 matmul, as it differs between thread counts.

The kernel is C, compiled once per machine into the cache directory (``cc``; about a second);
without a compiler, or on inputs it does not take (more than :data:`MAX_KERNEL_ROWS` rows, a
prompt's prefill for one, another dtype or device), a layer runs torch's float32 matmul on the
weights it keeps. Every block is checked bit for bit against the loaded float32 weight first.

The same library computes one token's attention over a session's cache (:meth:`Kernels.attend`),
which the batcher uses for one-token steps: a call into torch's sdpa costs more than the work;
and a llama's whole one-token step for a batch of rows (:class:`Decoder`), which the batcher
runs instead of the modules: one call, which drops the GIL once.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

__all__ = [
    "MAX_KERNEL_ROWS",
    "BlockLinear",
    "Decoder",
    "Slot",
    "GgufMatmulError",
    "KernelVariant",
    "Kernels",
    "kernel_variants",
    "use_gguf_blocks",
]

log = logging.getLogger(__name__)

#: The most rows (sessions in one batched step) the kernel takes; more run torch's matmul,
#: which reads the float32 weights once for all of them.
MAX_KERNEL_ROWS = 8

_BLOCK = 32
_Q4_1, _Q8_0 = 3, 8  # ggml's type numbers

# Weights are made exactly as numpy de-quantised them (a product, then a sum: no fused
# multiply-add, hence -ffp-contract=off); every row accumulates them with fma in 32 lanes, then
# sums the lanes. With AVX-512: two 16-lane registers a row, a copy of the loop for each row
# count (a constant count keeps the sums in registers) and a tree sum of the lanes, about twice
# as fast as the plain C below, which compilers vectorise less well and which sums in order.
# Either way a row's sums never depend on the other rows.
_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#define ROWS 8
#define MAX_DIM 256
#define Q41 4
#define Q41_KIND 3 /* ggml's type number */
#define INLINE static inline __attribute__((always_inline))

#if defined(__AVX512F__) && !defined(MASKSCOPE_PORTABLE) && !defined(MASKSCOPE_AVX2)
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

INLINE void rows_mm(int rows, int kind, const float *x, int64_t K, const void *qs,
                    const float *d, const float *mn, int64_t N, float *y) {
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

void q80_mm(const float *x, int64_t M, int64_t K, const int8_t *qs, const float *d,
            int64_t N, float *y) {
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
    for (int64_t d = 0; d < D; d += 16)
        _mm512_storeu_ps(oh + d, _mm512_mul_ps(o[d / 16], inverse));
}

#elif (defined(__AVX2__) && defined(__FMA__)) && !defined(MASKSCOPE_PORTABLE)
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
INLINE void rows_n(int rows, int kind, const float *x, int64_t K, const void *qs,
                   const float *d, const float *mn, int64_t n, int64_t N, float *y) {
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

void q80_mm(const float *x, int64_t M, int64_t K, const int8_t *qs, const float *d,
            int64_t N, float *y) {
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
    for (int64_t d = 0; d < D; d += 8)
        _mm256_storeu_ps(oh + d, _mm256_mul_ps(o[d / 8], inverse));
}

#else
const char *kernel_isa(void) { return "plain"; }

static void finish(float acc[ROWS][32], int64_t rows, int64_t r0, int64_t N, int64_t n,
                   float *y) {
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

void q80_mm(const float *x, int64_t M, int64_t K, const int8_t *qs, const float *d,
            int64_t N, float *y) {
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
static void heads(const float *q, int64_t H, const float *k, const float *v, int64_t KV,
                  int64_t L, int64_t kstride, int64_t vstride, int64_t D, float scale, float *s,
                  float *out) {
    for (int64_t h = 0; h < H; h++)
        attend_head(q + h * D, k + h / (H / KV) * kstride, v + h / (H / KV) * vstride, L, D,
                    scale, s, out + h * D);
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
typedef struct { float *keys, *values; int64_t held, kstride, vstride; } slot;

/* One row: its new keys and values (KV x D) written into its cache at c->held, then its H
   query heads' attention over the held + 1 tokens (s: room for their scores). */
static void write_and_attend(const slot *c, const float *q, const float *k, const float *v,
                             int64_t H, int64_t KV, int64_t D, float scale, float *s,
                             float *out) {
    size_t bytes = D * sizeof(float);
    for (int64_t h = 0; h < KV; h++) {
        memcpy(c->keys + h * c->kstride + c->held * D, k + h * D, bytes);
        memcpy(c->values + h * c->vstride + c->held * D, v + h * D, bytes);
    }
    heads(q, H, c->keys, c->values, KV, c->held + 1, c->kstride, c->vstride, D, scale, s, out);
}

int attend_rows(int64_t R, const float *q, const float *k, const float *v, int64_t H,
                int64_t KV, int64_t D, const slot *slots, float scale, float *out) {
    int64_t longest = 0;
    for (int64_t r = 0; r < R; r++)
        if (slots[r].held + 1 > longest) longest = slots[r].held + 1;
    float *s = malloc(longest * sizeof(float));
    if (!s) return 1;
    for (int64_t r = 0; r < R; r++)
        write_and_attend(slots + r, q + r * H * D, k + r * KV * D, v + r * KV * D, H, KV, D,
                         scale, s, out + r * H * D);
    free(s);
    return 0;
}

/* A llama decoder's one-token step for R rows in one call, from the blocks: the embedding, each
   layer (RMSNorm, q/k/v, RoPE, the rows' cache writes and attention as attend_rows() makes them,
   o, the residual, RMSNorm, silu(gate) * up, down, the residual), the final RMSNorm and the
   head, as transformers' llama computes them (the same products and sums, in float32, up to
   their order), with the GIL dropped once for the whole pass instead of at every operation.
   slots holds R rows of L layers' caches (row-major); logits is R x vocab. */
typedef struct { int64_t kind, outputs; const void *qs; const float *d, *mn; } matrix;
typedef struct {
    const float *attn_norm, *mlp_norm;
    matrix q, k, v, o, gate, up, down;
} block_layer;
typedef struct {
    int64_t hidden, heads, kv_heads, head_dim, intermediate, layers, vocab;
    float eps, scale, attention_scaling;
    const float *embed, *norm, *inv_freq;
    matrix head;
    const block_layer *layer;
} decoder;

static void matmul(const matrix *w, const float *x, int64_t M, int64_t K, float *y) {
    if (w->kind == Q41_KIND)
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
"""
_FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-shared", "-fPIC")

#: A row's cache for :meth:`Kernels.attend_rows`: the addresses of its keys' and values' buffers,
#: the tokens they hold, and each buffer's stride between heads (in floats).
Slot = tuple[int, int, int, int, int]

#: Which of the kernels' builds: this CPU's fastest, or one that other CPUs run.
KernelVariant = Literal["native", "avx2", "portable"]
_VARIANT_FLAGS: dict[str, tuple[str, ...]] = {
    "native": (),
    "avx2": ("-DMASKSCOPE_AVX2",),
    "portable": ("-DMASKSCOPE_PORTABLE",),
}


class GgufMatmulError(Exception):
    """The blocks cannot stand for the loaded weights (no compiler, a mismatch, a layout)."""


class Kernels:
    """The compiled kernels (thread-safe: they hold no state; ctypes drops the GIL in them)."""

    def __init__(self, library: ctypes.CDLL) -> None:
        pointer, size = ctypes.c_void_p, ctypes.c_int64
        self._q41 = library.q41_mm
        self._q41.argtypes = [pointer, size, size, pointer, pointer, pointer, size, pointer]
        self._q41.restype = None
        self._q80 = library.q80_mm
        self._q80.argtypes = [pointer, size, size, pointer, pointer, size, pointer]
        self._q80.restype = None
        self._attend = library.attend
        self._attend.argtypes = [pointer, size, pointer, pointer, size, size, size, size, size,
                                 ctypes.c_float, pointer]  # fmt: skip
        self._attend.restype = ctypes.c_int
        self._attend_rows = library.attend_rows
        self._attend_rows.argtypes = [size, pointer, pointer, pointer, size, size, size, pointer,
                                      ctypes.c_float, pointer]  # fmt: skip
        self._attend_rows.restype = ctypes.c_int
        self._decode_rows = library.decode_rows
        self._decode_rows.argtypes = [pointer, size, pointer, pointer, pointer]
        self._decode_rows.restype = ctypes.c_int
        isa = library.kernel_isa
        isa.restype = ctypes.c_char_p
        #: Which build this is: ``avx512``, ``avx2`` (with FMA) or ``plain`` (C, what compilers
        #: make of it for CPUs with neither).
        self.isa: str = isa().decode()

    @classmethod
    def build(cls, cache_dir: Path, *, variant: KernelVariant = "native") -> Kernels:
        """Compile the kernels once for this machine (cached in ``cache_dir``) and load them.

        Args:
            cache_dir: where the compiled library is kept.
            variant: ``native``, the fastest this CPU runs (AVX-512, else AVX2 with FMA, else
                plain C); ``avx2`` or ``portable`` (plain C), what other CPUs run, even where
                this one has more.

        Raises:
            GgufMatmulError: no C compiler, or it failed.
        """
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            raise GgufMatmulError("no C compiler (cc) to build the GGUF block kernel")
        flags = (*_FLAGS, *_VARIANT_FLAGS[variant])
        # -march=native: the library is this CPU's; a cache shared across machines keeps one each.
        key = hashlib.sha256(
            "\0".join((_SOURCE, *flags, compiler, platform.machine(), _cpu_flags())).encode()
        ).hexdigest()[:16]
        target = cache_dir / "kernels" / f"gguf-matmul-{key}.so"
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=target.parent) as work:
                source = Path(work) / "gguf_matmul.c"
                source.write_text(_SOURCE)
                built = Path(work) / target.name
                try:
                    subprocess.run(
                        [compiler, *flags, "-o", str(built), str(source)],
                        check=True,
                        capture_output=True,
                        timeout=120,
                    )
                except (OSError, subprocess.SubprocessError) as exc:
                    detail = getattr(exc, "stderr", b"") or b""
                    raise GgufMatmulError(
                        f"building the GGUF block kernel failed: {exc} {detail.decode()[-500:]}"
                    ) from exc
                os.replace(built, target)  # atomic: a racing process loads a whole library
        return cls(ctypes.CDLL(str(target)))

    def q41(self, x: torch.Tensor, layer: _Blocks, out: torch.Tensor) -> None:
        """``out = x @ W.T`` for a Q4_1 layer (x and out contiguous float32 on cpu)."""
        rows, width = x.shape
        assert layer.mins is not None
        self._q41(
            x.data_ptr(),
            rows,
            width,
            layer.quants.data_ptr(),
            layer.scales.data_ptr(),
            layer.mins.data_ptr(),
            layer.outputs,
            out.data_ptr(),
        )

    def q80(self, x: torch.Tensor, layer: _Blocks, out: torch.Tensor) -> None:
        """``out = x @ W.T`` for a Q8_0 layer (x and out contiguous float32 on cpu)."""
        rows, width = x.shape
        self._q80(
            x.data_ptr(),
            rows,
            width,
            layer.quants.data_ptr(),
            layer.scales.data_ptr(),
            layer.outputs,
            out.data_ptr(),
        )

    def attend_rows(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        slots: Sequence[Slot],
        scale: float,
    ) -> torch.Tensor | None:
        """A batch's one-token attention in one call: each row's new key and value written into
        its cache (at the slot's ``held``: the room is the caller's), then its query's attention
        over the ``held + 1`` tokens, as :meth:`attend` computes it; or None for inputs the
        kernel does not take (nothing is written then).

        Args:
            query: ``[rows, heads, 1, dim]``.
            key, value: the rows' new ones, ``[rows, kv_heads, 1, dim]``.
            slots: each row's cache, ``(keys, values, held, key head stride, value head
                stride)``: the addresses of ``[kv_heads, capacity, dim]`` float32 buffers, each
                head's rows contiguous.
            scale: the scores' factor.

        Returns:
            ``[rows, 1, heads, dim]``, the layout transformers' attention functions return.
        """
        rows, heads, tokens, dim = query.shape
        if (
            tokens != 1
            or key.shape[0] != rows
            or key.shape[2] != 1
            or len(slots) != rows
            or not _attention_takes(query, key, value)
        ):
            return None
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
        table = np.array(slots, dtype=np.int64)
        out = torch.empty(rows, 1, heads, dim)
        failed = self._attend_rows(
            rows,
            query.data_ptr(),
            key.data_ptr(),
            value.data_ptr(),
            heads,
            key.shape[1],
            dim,
            table.ctypes.data,
            scale,
            out.data_ptr(),
        )
        return None if failed else out  # failed: no memory for the scores (nothing written)

    def attend(
        self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float
    ) -> torch.Tensor | None:
        """One query token's attention over one row's keys and values, as sdpa computes it
        (within float error), or None for inputs the kernel does not take.

        Args:
            query: ``[1, heads, 1, dim]``.
            keys, values: ``[1, kv_heads, length, dim]``, each head's rows contiguous (a
                view of a longer cache is fine).
            scale: the scores' factor.

        Returns:
            ``[1, 1, heads, dim]``, the layout transformers' attention functions return.
        """
        # Checked in as few calls as may be: this runs for every layer of every row's step.
        rows, heads, tokens, dim = query.shape
        _, kv_heads, length, _ = keys.shape
        key_strides, value_strides = keys.stride(), values.stride()
        if (
            rows != 1
            or tokens != 1
            or keys.shape[0] != 1
            or not length
            or key_strides[2:] != (dim, 1)
            or value_strides[2:] != (dim, 1)
            or not _attention_takes(query, keys, values)
        ):
            return None
        if not query.is_contiguous():
            query = query.contiguous()
        out = torch.empty(1, 1, heads, dim)
        failed = self._attend(
            query.data_ptr(),
            heads,
            keys.data_ptr(),
            values.data_ptr(),
            kv_heads,
            length,
            key_strides[1],
            value_strides[1],
            dim,
            scale,
            out.data_ptr(),
        )
        return None if failed else out  # failed: no memory for the scores


class _Matrix(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int64),
        ("outputs", ctypes.c_int64),
        ("qs", ctypes.c_void_p),
        ("d", ctypes.c_void_p),
        ("mn", ctypes.c_void_p),
    ]


#: The GGUF's names of a llama layer's projections, and transformers' paths to them.
_PROJECTIONS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


class _Layer(ctypes.Structure):
    _fields_ = [
        ("attn_norm", ctypes.c_void_p),
        ("mlp_norm", ctypes.c_void_p),
        # C's q, k, v, o, gate, up, down, in _PROJECTIONS' order
        *((name, _Matrix) for name in _PROJECTIONS),
    ]


class _Decoder(ctypes.Structure):
    _fields_ = [
        *((name, ctypes.c_int64) for name in
          ("hidden", "heads", "kv_heads", "head_dim", "intermediate", "layers", "vocab")),
        ("eps", ctypes.c_float),
        ("scale", ctypes.c_float),
        ("attention_scaling", ctypes.c_float),
        ("embed", ctypes.c_void_p),
        ("norm", ctypes.c_void_p),
        ("inv_freq", ctypes.c_void_p),
        ("head", _Matrix),
        ("layer", ctypes.c_void_p),
    ]  # fmt: skip


class Decoder:
    """The embedded llama's one-token steps, a batch of rows in one call of the kernels.

    A step through transformers' modules is about a thousand calls into torch and the kernels,
    each of which drops the GIL and takes it back: while any other thread runs Python (a
    session's checks, the event loop), every one of them waits for that thread's switch
    interval, and the pass takes several times its work. Here the whole pass (see the C
    ``decode_rows``) drops the GIL once. Build it with :meth:`of`.
    """

    def __init__(self, kernels: Kernels, spec: _Decoder, layers: Any, kept: list[Any]) -> None:
        self._kernels = kernels
        self._spec = spec
        self._layers = layers  # the C array the spec points at
        self._kept = kept  # every tensor the spec points at
        #: The caches' layers it needs (one per decoder layer).
        self.layers = int(spec.layers)
        self.vocab = int(spec.vocab)
        #: One token's key (or value) in a cache layer, ``[1, kv_heads, 1, head_dim]``: the
        #: shape a layer's buffers grow by.
        self.template = torch.empty(1, int(spec.kv_heads), 1, int(spec.head_dim))

    @classmethod
    def of(cls, model: Any, kernels: Kernels) -> Decoder | None:
        """The decoder of ``model``: a llama (silu, no biases, default RoPE, full attention)
        whose linear layers and head all run from blocks (:func:`use_gguf_blocks`), float32 on
        cpu; None for any other model."""
        text = model.config.get_text_config()
        inner: Any = getattr(model, "model", None)
        rope = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}
        rotary: Any = getattr(inner, "rotary_emb", None)
        if (
            text.model_type != "llama"
            or inner is None
            or getattr(text, "hidden_act", None) != "silu"
            or getattr(text, "attention_bias", False)
            or getattr(text, "mlp_bias", False)
            or rope.get("rope_type", "default") != "default"
            or getattr(text, "sliding_window", None) is not None
            or any(kind != "full_attention" for kind in getattr(text, "layer_types", None) or ())
            or not isinstance(getattr(rotary, "inv_freq", None), torch.Tensor)
            or not isinstance(getattr(model, "lm_head", None), BlockLinear)
            or model.lm_head._blocks.kind != _Q8_0
        ):
            return None
        hidden = int(text.hidden_size)
        heads, kv_heads = int(text.num_attention_heads), int(text.num_key_value_heads)
        head_dim = int(getattr(text, "head_dim", None) or hidden // heads)
        if not 0 < head_dim <= 256 or head_dim % 16 or heads % kv_heads:
            return None  # what the attention kernel takes (as :func:`_attention_takes`)
        kept: list[Any] = []

        def floats(tensor: torch.Tensor, size: int) -> int | None:
            if tensor.dtype != torch.float32 or not tensor.is_cpu or tensor.numel() != size:
                return None
            tensor = tensor.detach().contiguous()
            kept.append(tensor)
            return int(tensor.data_ptr())

        def matrix(linear: Any, inputs: int) -> _Matrix | None:
            if not isinstance(linear, BlockLinear) or linear.in_features != inputs:
                return None
            blocks = linear._blocks
            kept.append(blocks)
            mins = 0 if blocks.mins is None else blocks.mins.data_ptr()
            return _Matrix(blocks.kind, blocks.outputs, blocks.quants.data_ptr(),
                           blocks.scales.data_ptr(), mins)  # fmt: skip

        layers = (_Layer * len(inner.layers))()
        inter = int(text.intermediate_size)
        widths = {"attn_q": hidden, "attn_k": hidden, "attn_v": hidden,
                  "attn_output": heads * head_dim, "ffn_gate": hidden, "ffn_up": hidden,
                  "ffn_down": inter}  # fmt: skip
        outputs = {"attn_q": heads * head_dim, "attn_k": kv_heads * head_dim,
                   "attn_v": kv_heads * head_dim, "attn_output": hidden, "ffn_gate": inter,
                   "ffn_up": inter, "ffn_down": hidden}  # fmt: skip
        for index, layer in enumerate(inner.layers):
            attn_norm = floats(layer.input_layernorm.weight, hidden)
            mlp_norm = floats(layer.post_attention_layernorm.weight, hidden)
            if attn_norm is None or mlp_norm is None:
                return None
            layers[index].attn_norm, layers[index].mlp_norm = attn_norm, mlp_norm
            for name, path in _PROJECTIONS.items():
                made = matrix(layer.get_submodule(path), widths[name])
                if made is None or made.outputs != outputs[name]:
                    return None
                setattr(layers[index], name, made)
        head = matrix(model.lm_head, hidden)
        vocab = int(model.lm_head.out_features)
        embed = floats(inner.embed_tokens.weight, vocab * hidden)
        norm = floats(inner.norm.weight, hidden)
        inv_freq = floats(rotary.inv_freq, head_dim // 2)
        if head is None or embed is None or norm is None or inv_freq is None:
            return None
        spec = _Decoder(
            hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
            intermediate=inter, layers=len(inner.layers), vocab=vocab,
            eps=float(text.rms_norm_eps), scale=float(inner.layers[0].self_attn.scaling),
            attention_scaling=float(getattr(rotary, "attention_scaling", 1.0)), embed=embed,
            norm=norm, inv_freq=inv_freq, head=head, layer=ctypes.addressof(layers),
        )  # fmt: skip
        return cls(kernels, spec, layers, kept)

    def decode(
        self, token_ids: Sequence[int], slots: Sequence[Sequence[Slot]]
    ) -> torch.Tensor | None:
        """One step of each row: its token fed through every layer, its keys and values
        written into its caches where the slots say, and its next token's logits.

        Args:
            token_ids: each row's token.
            slots: each row's caches, one slot a decoder layer (:meth:`GrowingLayer.slot`),
                the room for one more token the caller's.

        Returns:
            ``[rows, vocab]`` float32 logits, or None when the scores found no memory
            (nothing is counted then: the caller advances no cache).
        """
        rows = len(token_ids)
        ids = np.array(token_ids, dtype=np.int64)
        table = np.array(slots, dtype=np.int64)
        if table.shape != (rows, self.layers, 5) or ((ids < 0) | (ids >= self.vocab)).any():
            raise ValueError("a row's token or slots do not fit the decoder")
        logits = torch.empty(rows, self.vocab)
        failed = self._kernels._decode_rows(
            ctypes.byref(self._spec), rows, ids.ctypes.data, table.ctypes.data, logits.data_ptr()
        )
        return None if failed else logits


def _attention_takes(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> bool:
    """What both attention kernels need: float32 on cpu, keys and values of one shape, the
    query's width (at most 256, in 16s), and a whole number of query heads per key head."""
    heads, dim = query.shape[1], query.shape[3]
    return bool(
        keys.shape == values.shape
        and keys.shape[3] == dim
        and 0 < dim <= 256
        and not dim % 16
        and not heads % keys.shape[1]
        and query.is_cpu
        and keys.is_cpu
        and values.is_cpu
        and query.dtype == keys.dtype == values.dtype == torch.float32
    )


def kernel_variants() -> tuple[KernelVariant, ...]:
    """The builds of the kernels this CPU runs: its own, and those of other CPUs it can run."""
    flags = set(_cpu_flags().split())
    avx2 = (
        ("avx2",) if {"avx2", "fma"} <= flags and platform.machine() in ("x86_64", "AMD64") else ()
    )
    return ("native", *avx2, "portable")


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


@dataclass(frozen=True)
class _Blocks:
    """One layer's blocks: quants (packed nibbles or int8), float32 scales (and mins)."""

    kind: int
    quants: torch.Tensor
    scales: torch.Tensor
    mins: torch.Tensor | None
    outputs: int

    def dequantised(self) -> np.ndarray:
        """The float32 weights, made as the GGUF loader made them."""
        d = self.scales.numpy()[..., None]
        made: np.ndarray
        if self.kind == _Q8_0:
            made = self.quants.numpy().astype(np.float32) * d
        else:
            assert self.mins is not None
            packed = self.quants.numpy()
            q = np.concatenate([packed & 15, packed >> 4], axis=-1).astype(np.float32)
            made = d * q + self.mins.numpy()[..., None]
        return made.reshape(self.outputs, -1)

    def permuted(self, heads: int) -> _Blocks:
        """The rows in transformers' order for a llama q/k projection (its reverse permute)."""
        order = np.arange(self.outputs)
        order = order.reshape(heads, self.outputs // heads // 2, 2).swapaxes(2, 1).reshape(-1)

        def rows(tensor: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(np.take(tensor.numpy(), order, axis=0))

        mins = None if self.mins is None else rows(self.mins)
        return _Blocks(self.kind, rows(self.quants), rows(self.scales), mins, self.outputs)


class BlockLinear(torch.nn.Module):
    """A bias-free linear layer computed from its GGUF blocks (see the module's docstring).

    It keeps the layer's float32 ``weight`` (shared with the embeddings when they are tied):
    a prompt's prefill and large batches run torch's matmul on it.
    """

    def __init__(self, weight: torch.nn.Parameter, blocks: _Blocks, kernels: Kernels) -> None:
        super().__init__()
        self.weight = weight
        self.out_features, self.in_features = weight.shape
        self._blocks = blocks
        self._kernels = kernels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ weight.T``, from the blocks when the kernel takes ``x``."""
        rows = x.numel() // self.in_features if self.in_features else 0
        if (
            not 0 < rows <= MAX_KERNEL_ROWS
            or x.dtype != torch.float32
            or x.device.type != "cpu"
            or (torch.is_grad_enabled() and x.requires_grad)
        ):
            return torch.nn.functional.linear(x, self.weight)
        flat = x.reshape(rows, self.in_features).contiguous()
        out = torch.empty(rows, self.out_features, dtype=torch.float32)
        if self._blocks.kind == _Q4_1:
            self._kernels.q41(flat, self._blocks, out)
        else:
            self._kernels.q80(flat, self._blocks, out)
        return out.reshape(*x.shape[:-1], self.out_features)


@dataclass(frozen=True)
class _Tensor:
    """A tensor of a GGUF file: its name, ggml type, shape (ggml's order) and raw bytes."""

    name: str
    kind: int
    shape: tuple[int, ...]
    data: np.ndarray


_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_BLOCK_BYTES = {_Q4_1: 20, _Q8_0: 34}  # bytes of one block of 32 weights


def _gguf_tensors(path: Path) -> list[_Tensor]:
    """The Q4_1 and Q8_0 tensors of a GGUF file (version 2 or 3), memory-mapped.

    gguf's own reader turns each of the tokenizer's 100,000 strings into numpy views (seconds);
    only the tensors are needed here, so the metadata is skipped.
    """
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    at = 0

    def take(count: int) -> bytes:
        nonlocal at
        chunk = raw[at : at + count].tobytes()
        at += count
        return chunk

    def number(size: int) -> int:
        return int.from_bytes(take(size), "little")

    def skip(kind: int) -> None:
        nonlocal at
        if kind == _STRING:
            length = number(8)  # read first: ``at += number(8)`` would add to the old ``at``
            at += length
        elif kind == _ARRAY:
            inner, count = number(4), number(8)
            if inner in _SCALARS:
                at += _SCALARS[inner] * count
            else:
                for _ in range(count):
                    skip(inner)
        elif kind in _SCALARS:
            at += _SCALARS[kind]
        else:
            raise GgufMatmulError(f"{path.name}: unknown GGUF value type {kind}")

    if take(4) != b"GGUF" or number(4) not in (2, 3):
        raise GgufMatmulError(f"{path.name} is not a GGUF file of version 2 or 3")
    tensor_count, field_count = number(8), number(8)
    alignment = 32
    for _ in range(field_count):
        key = take(number(8)).decode()
        kind = number(4)
        if key == "general.alignment" and kind == 4:
            alignment = number(4)
        else:
            skip(kind)
    infos = []
    for _ in range(tensor_count):
        name = take(number(8)).decode()
        shape = tuple(number(8) for _ in range(number(4)))
        infos.append((name, number(4), shape, number(8)))
    start = -(-at // alignment) * alignment
    tensors = []
    for name, kind, shape, offset in infos:
        if kind not in _BLOCK_BYTES or len(shape) != 2 or shape[0] % _BLOCK:
            continue
        size = shape[1] * shape[0] // _BLOCK * _BLOCK_BYTES[kind]
        data = raw[start + offset : start + offset + size].reshape(shape[1], -1)
        tensors.append(_Tensor(name, kind, shape, data))
    return tensors


def _read_blocks(tensor: _Tensor) -> _Blocks:
    outputs = tensor.shape[1]
    blocks = np.asarray(tensor.data).reshape(outputs, -1, _BLOCK_BYTES[tensor.kind])
    # Q4_1: d, m (float16), 16 bytes of nibbles; Q8_0: d (float16), 32 int8.
    scales = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    if tensor.kind == _Q4_1:
        mins = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
        quants = blocks[..., 4:].copy()
    else:
        mins = None
        quants = blocks[..., 2:].copy().view(np.int8)
    return _Blocks(
        tensor.kind,
        torch.from_numpy(quants),
        torch.from_numpy(scales),
        None if mins is None else torch.from_numpy(mins),
        outputs,
    )


def _matching(blocks: _Blocks, weight: torch.Tensor, heads: tuple[int, ...]) -> _Blocks | None:
    """The blocks (rows permuted if need be) whose weights are bit for bit ``weight``'s."""
    target = weight.detach().numpy().view(np.uint32)
    # transformers permutes a llama's q/k rows: those are tried first (``heads`` empty: none).
    for permute in (*(h for h in heads if blocks.outputs % (2 * h) == 0), None):
        candidate = blocks if permute is None else blocks.permuted(permute)
        made = candidate.dequantised()
        if made.shape == target.shape and np.array_equal(made.view(np.uint32), target):
            return candidate
    return None


def use_gguf_blocks(model: Any, gguf: Path, kernels: Kernels) -> int:
    """Swap ``model``'s decoder linear layers and head for :class:`BlockLinear` on ``gguf``.

    Every layer is swapped or none is: each one's blocks must make its float32 weight exactly.

    Returns:
        How many layers were swapped.

    Raises:
        GgufMatmulError: a layer's blocks do not make its weight, or the model is not laid out
            as a llama (``model.layers``, ``lm_head``) with float32 weights on cpu.
    """
    text = model.config.get_text_config()
    heads = (int(text.num_attention_heads), int(getattr(text, "num_key_value_heads", 0) or 0))
    swaps: list[tuple[Any, str, BlockLinear]] = []
    for tensor in _gguf_tensors(gguf):
        parts = tensor.name.split(".")
        if tensor.name == "token_embd.weight":
            owner, attribute = model, "lm_head"
        elif len(parts) == 4 and parts[0] == "blk" and parts[2] in _PROJECTIONS:
            path = f"model.layers.{parts[1]}.{_PROJECTIONS[parts[2]]}"
            owner_path, attribute = path.rsplit(".", 1)
            owner = model.get_submodule(owner_path)
        else:
            continue
        linear = getattr(owner, attribute, None)
        weight = getattr(linear, "weight", None)
        if not isinstance(weight, torch.nn.Parameter) or getattr(linear, "bias", None) is not None:
            raise GgufMatmulError(f"{tensor.name}: no bias-free linear layer to stand for")
        if weight.dtype != torch.float32 or weight.device.type != "cpu":
            raise GgufMatmulError(f"{tensor.name}: the weights are not float32 on cpu")
        permutes = tuple(h for h in heads if h) if parts[-2] in ("attn_q", "attn_k") else ()
        blocks = _matching(_read_blocks(tensor), weight, permutes)
        if blocks is None:
            raise GgufMatmulError(f"{tensor.name}: the blocks do not make the loaded weight")
        swaps.append((owner, attribute, BlockLinear(weight, blocks, kernels)))
    if not swaps:
        raise GgufMatmulError(f"{gguf.name} has no Q4_1 / Q8_0 layers of this model")
    for owner, attribute, layer in swaps:
        setattr(owner, attribute, layer)
    return len(swaps)
