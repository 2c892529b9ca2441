/* The GGUF block kernel's interface: what app/engine/kernels/gguf.py loads through ctypes.
 *
 * One source, gguf.c, is built once per instruction set (setup.py, flags in variants.py): the
 * vector paths follow the compiler's target (__AVX512F__, __AVX2__ with __FMA__), everything
 * else is plain C. Every build exports the same functions and lays out the same structs;
 * kernel_layout() says how, so the loader can check its ctypes mirrors against the C. */
#ifndef MASKSCOPE_GGUF_H
#define MASKSCOPE_GGUF_H

#include <stdint.h>

/* The most rows one call of q41_mm / q80_mm keeps in registers at once. */
#define GGUF_ROWS 8
/* The widest attention head the kernels take (in 16s). */
#define GGUF_MAX_DIM 256
/* ggml's type numbers of the two block kinds. */
#define GGUF_Q4_1 3
#define GGUF_Q8_0 8

/* A row's cache of one layer: its key and value buffers ([KV, capacity, D] float32, each head's
   rows contiguous), the tokens they hold, and each buffer's stride between heads (floats). */
typedef struct {
    float *keys, *values;
    int64_t held, kstride, vstride;
} slot;

/* One linear layer's blocks: its ggml kind, outputs, quants, scales (and Q4_1's mins). */
typedef struct {
    int64_t kind, outputs;
    const void *qs;
    const float *d, *mn;
} matrix;

/* A llama decoder layer: its two RMSNorm weights and seven projections. */
typedef struct {
    const float *attn_norm, *mlp_norm;
    matrix q, k, v, o, gate, up, down;
} block_layer;

/* A llama decoder's shape, its float32 tensors and its layers' blocks. */
typedef struct {
    int64_t hidden, heads, kv_heads, head_dim, intermediate, layers, vocab;
    float eps, scale, attention_scaling;
    const float *embed, *norm, *inv_freq;
    matrix head;
    const block_layer *layer;
} decoder;

/* Which build this is: "avx512", "avx2" or "portable". */
const char *kernel_isa(void);

/* The x86-64 level this CPU runs (1 to 4: x86-64, -v2, -v3, -v4), 0 on any other machine. */
int kernel_cpu_level(void);

/* "name=value" pairs, space-separated: the size of each struct above and the offset of each of
   its fields ("slot=40 slot.keys=0 ..."), written into out (at most size bytes, terminated);
   returns the length the whole text needs. */
int64_t kernel_layout(char *out, int64_t size);

/* y = x @ W.T for M rows of K floats against N outputs of Q4_1 (qs: 16 bytes a block, d and mn
   one float a block) or Q8_0 (qs: 32 int8 a block) blocks; y is M x N. */
void q41_mm(const float *x, int64_t M, int64_t K, const uint8_t *qs, const float *d,
            const float *mn, int64_t N, float *y);
void q80_mm(const float *x, int64_t M, int64_t K, const int8_t *qs, const float *d, int64_t N,
            float *y);

/* One query token's H heads over L tokens of KV key heads; 1 when out of memory. */
int attend(const float *q, int64_t H, const float *k, const float *v, int64_t KV, int64_t L,
           int64_t kstride, int64_t vstride, int64_t D, float scale, float *out);

/* R rows' one-token attention, each row's new keys and values written into its slot first. */
int attend_rows(int64_t R, const float *q, const float *k, const float *v, int64_t H, int64_t KV,
                int64_t D, const slot *slots, float scale, float *out);

/* A llama's one-token step for R rows (slots: R x layers, row-major); logits is R x vocab. */
int decode_rows(const decoder *m, int64_t R, const int64_t *tokens, const slot *slots,
                float *logits);

#endif
