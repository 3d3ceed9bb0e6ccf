/* kernels/matmul.cuh — the linear layers: cuBLASLt GEMMs (bf16 in, fp32 accumulation) with fused epilogues, and the
   bias gradients (column sums).

     matmul_forward(mc, out, inp, weight, bias, N, C, OC, st, pre_gelu = NULL)
         gpt2_cpu.c's matmul_forward: out (N, OC) = inp (N, C) · weightᵀ + bias (the bias added in the epilogue);
         with pre_gelu it is matmul_forward(pre_gelu, ...) followed by gelu_forward(out, pre_gelu): one GEMM whose
         epilogue adds the bias, stores pre_gelu and writes out = gelu(pre_gelu) (cuBLASLt GELU_AUX_BIAS)
     matmul_backward(mc, dinp, dweight, dbias, dout, inp, weight, N, C, OC, scratch, st, pre_gelu = NULL)
         gpt2_cpu.c's matmul_backward: dinp = dout · weight (overwritten), dweight (fp32) += doutᵀ · inp, dbias (fp32,
         NULL: none) += column sums of dout; with pre_gelu, then gelu_backward(dinp, pre_gelu) — fused as the dinp
         GEMM's DGELU epilogue
     matmul_backward_bias(dbias, dout, N, OC, scratch, st)       the column sums, in two deterministic stages
     matmul_create(mc, fuse_gelu) / matmul_destroy(mc)           the cuBLASLt handle, workspace and plan cache

   A GEMM is first written down as a gemm_call (cuBLAS's column-major terms: a row-major X is the column-major Xᵀ), a
   plain struct the CPU test executes with a reference GEMM against gpt2_cpu.c's layers, then run by gemm_run: the
   cuBLASLt descriptors and the heuristic's algorithm are made once per shape (plan cache) and reused. cuBLAS is
   deterministic on one stream, so the step's bits depend only on the inputs. When the GELU epilogues are off
   (fuse_gelu 0: before Hopper they are slower than the separate kernels) or the heuristic finds no algorithm for
   a call's plan, that call runs as the unfused GEMM + gelu.cuh kernel. The choice is per plan, never a switch
   flipped mid-run: a plan's support is a function of its key, so a resumed run takes the same path for every call
   as the uninterrupted one (the epilogue's GELU and gelu.cuh's differ in the last bits). scratch:
   matmul_scratch_floats(OC) floats. */
#ifndef GPT2_KERNELS_MATMUL_CUH
#define GPT2_KERNELS_MATMUL_CUH
#include "common.cuh"
#include "gelu.cuh"
#include <cublasLt.h>
#include <string.h>

/* ------------------------------------------------------------------------------------- the GEMM, as data */
enum { GEMM_EPI_NONE, GEMM_EPI_BIAS, GEMM_EPI_GELU_AUX, GEMM_EPI_DGELU };

/* D[m, n] = epilogue(alpha · op(A)[m, k] · op(B)[k, n] + beta · D), column-major, op = transpose when trans*.
   A and B are bf16; D is bf16, or fp32 when d_f32 (weight gradients, beta = 1 accumulates). Epilogues:
   BIAS: + bias[row];  GELU_AUX: aux = acc (+ bias[row] when bias), D = gelu(aux);  DGELU: D = acc · gelu'(aux). */
typedef struct gemm_call {
    int transa, transb, m, n, k;
    const void *A;
    int lda;
    const void *B;
    int ldb;
    void *D;
    int ldd, d_f32;
    float alpha, beta;
    int epilogue;
    const void *bias; /* bf16 [m] */
    void *aux;        /* bf16, m x n, leading dimension ldaux */
    int ldaux;
} gemm_call;

/* D = op(A) · op(B), alpha 1, beta 0, no epilogue, bf16 D */
static ACCEL_INLINE gemm_call gemm_plain(int transa, int transb, int m, int n, int k, const void *A, int lda,
                                         const void *B, int ldb, void *D, int ldd) {
    gemm_call g;
    memset(&g, 0, sizeof g);
    g.transa = transa, g.transb = transb, g.m = m, g.n = n, g.k = k;
    g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.D = D, g.ldd = ldd;
    g.alpha = 1.0f;
    return g;
}
/* out (N, OC) = inp (N, C) · weightᵀ (+ bias); with pre_gelu: pre_gelu = that, out = gelu(pre_gelu). Row-major out
   is the column-major outᵀ (OC x N) = weight (viewed C x OC, transposed) · inpᵀ (viewed C x N). */
static ACCEL_INLINE gemm_call matmul_forward_call(void *out, void *pre_gelu, const void *inp, const void *weight,
                                                  const void *bias, int N, int C, int OC) {
    gemm_call g = gemm_plain(1, 0, OC, N, C, weight, C, inp, C, out, OC);
    g.bias = bias;
    g.epilogue = pre_gelu ? GEMM_EPI_GELU_AUX : bias ? GEMM_EPI_BIAS : GEMM_EPI_NONE;
    g.aux = pre_gelu;
    g.ldaux = pre_gelu ? OC : 0;
    return g;
}
/* dinp (N, C) = dout (N, OC) · weight (OC, C); with pre_gelu: dinp *= gelu'(pre_gelu). dinpᵀ (C x N) = weight (viewed
   C x OC) · doutᵀ (viewed OC x N). */
static ACCEL_INLINE gemm_call matmul_backward_dinp_call(void *dinp, const void *dout, const void *weight,
                                                        const void *pre_gelu, int N, int C, int OC) {
    gemm_call g = gemm_plain(0, 0, C, N, OC, weight, C, dout, OC, dinp, C);
    g.epilogue = pre_gelu ? GEMM_EPI_DGELU : GEMM_EPI_NONE;
    g.aux = (void *)pre_gelu;
    g.ldaux = pre_gelu ? C : 0;
    return g;
}
/* dweight (OC, C) += doutᵀ · inp: dweightᵀ (C x OC) += inpᵀ (viewed C x N) · dout (viewed OC x N, transposed). */
static ACCEL_INLINE gemm_call matmul_backward_dweight_call(float *dweight, const void *dout, const void *inp, int N,
                                                           int C, int OC) {
    gemm_call g = gemm_plain(0, 1, C, OC, N, inp, C, dout, OC, dweight, C);
    g.d_f32 = 1;
    g.beta = 1.0f;
    return g;
}

/* ----------------------------------------------------------------------------------------- cuBLASLt */
#define MATMUL_MAX_PLANS 64
#define MATMUL_WORKSPACE (32u << 20) /* what cuBLASLt asks for on Hopper */

typedef struct matmul_plan {
    int key[16];
    int supported;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} matmul_plan;

typedef struct matmul_ctx {
    cublasLtHandle_t lt;
    void *ws;
    size_t ws_size;
    int fuse_gelu;      /* the GELU epilogues are tried (a plan cuBLASLt has no algorithm for runs unfused) */
    int gelu_fallbacks; /* calls that asked for a GELU epilogue and ran unfused (cuBLASLt had no algorithm) */
    int nplans;
    matmul_plan plans[MATMUL_MAX_PLANS];
} matmul_ctx;

static const char *gemm_status(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
    }
}

static cudaError_t matmul_create(matmul_ctx *mc, int fuse_gelu) {
    cublasStatus_t s;
    cudaError_t e;
    memset(mc, 0, sizeof *mc);
    if ((s = cublasLtCreate(&mc->lt)) != CUBLAS_STATUS_SUCCESS)
        return gpt2_kernel_error(cudaErrorUnknown, "cublasLtCreate: %s", gemm_status(s));
    if ((e = cudaMalloc(&mc->ws, MATMUL_WORKSPACE)) != cudaSuccess) return e;
    mc->ws_size = MATMUL_WORKSPACE;
    mc->fuse_gelu = fuse_gelu;
    return cudaSuccess;
}

static void matmul_destroy(matmul_ctx *mc) {
    for (int i = 0; i < mc->nplans; ++i) {
        cublasLtMatrixLayoutDestroy(mc->plans[i].a);
        cublasLtMatrixLayoutDestroy(mc->plans[i].b);
        cublasLtMatrixLayoutDestroy(mc->plans[i].d);
        cublasLtMatmulDescDestroy(mc->plans[i].desc);
    }
    if (mc->ws) cudaFree(mc->ws);
    if (mc->lt) cublasLtDestroy(mc->lt);
    memset(mc, 0, sizeof *mc);
}

/* The largest power of two (at most 256) dividing the address: what the heuristic may assume. */
static int gemm_alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && a % (uintptr_t)al) al /= 2;
    return al;
}

static cublasLtEpilogue_t gemm_epilogue(const gemm_call *g) {
    switch (g->epilogue) {
    case GEMM_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case GEMM_EPI_GELU_AUX: return g->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case GEMM_EPI_DGELU: return CUBLASLT_EPILOGUE_DGELU;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
    }
}

/* The per-call pointers of the epilogue live in the descriptor. */
static cublasStatus_t gemm_set_pointers(cublasLtMatmulDesc_t desc, const gemm_call *g) {
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    if (g->bias && (g->epilogue == GEMM_EPI_BIAS || g->epilogue == GEMM_EPI_GELU_AUX))
        s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias);
    if (s == CUBLAS_STATUS_SUCCESS && g->aux)
        s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux, sizeof g->aux);
    return s;
}

/* Makes (or finds) the plan of g's shape; NULL after a library error (printed), plan->supported 0 when the
   heuristic has no algorithm. */
static matmul_plan *gemm_plan(matmul_ctx *mc, const gemm_call *g) {
    int key[16] = {g->transa, g->transb, g->m, g->n, g->k, g->lda, g->ldb, g->ldd, g->d_f32, g->beta != 0.0f,
                   g->epilogue, g->bias != NULL, g->ldaux, gemm_alignment(g->A), gemm_alignment(g->B),
                   gemm_alignment(g->D)};
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    cublasStatus_t s;
    matmul_plan *p;
    cudaDataType dt = g->d_f32 ? CUDA_R_32F : CUDA_R_16BF;
    int32_t ta = g->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->transb ? CUBLAS_OP_T : CUBLAS_OP_N, nres = 0;
    cublasLtEpilogue_t epi = gemm_epilogue(g);
    uint64_t ws = mc->ws_size;
    uint32_t al[3] = {(uint32_t)key[13], (uint32_t)key[14], (uint32_t)key[15]};
    for (int i = 0; i < mc->nplans; ++i)
        if (!memcmp(mc->plans[i].key, key, sizeof key)) return &mc->plans[i];
    if (mc->nplans == MATMUL_MAX_PLANS) {
        gpt2_kernel_error(cudaErrorUnknown, "matmul: more than %d GEMM shapes", MATMUL_MAX_PLANS);
        return NULL;
    }
    p = &mc->plans[mc->nplans];
    memset(p, 0, sizeof *p);
    memcpy(p->key, key, sizeof key);
#define GEMM_LT(call)                                                                                                \
    do {                                                                                                             \
        if ((s = (call)) != CUBLAS_STATUS_SUCCESS) goto fail;                                                        \
    } while (0)
    GEMM_LT(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    GEMM_LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    GEMM_LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    GEMM_LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g->aux) {
        int64_t ld = g->ldaux;
        GEMM_LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    GEMM_LT(gemm_set_pointers(p->desc, g));
    GEMM_LT(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, g->transa ? g->k : g->m, g->transa ? g->m : g->k, g->lda));
    GEMM_LT(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, g->transb ? g->n : g->k, g->transb ? g->k : g->n, g->ldb));
    GEMM_LT(cublasLtMatrixLayoutCreate(&p->d, dt, g->m, g->n, g->ldd));
    GEMM_LT(cublasLtMatmulPreferenceCreate(&pref));
    GEMM_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    GEMM_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4));
    GEMM_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4));
    GEMM_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4));
    GEMM_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], 4));
    s = cublasLtMatmulAlgoGetHeuristic(mc->lt, p->desc, p->a, p->b, p->d, p->d, pref, 1, &res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    pref = NULL;
    if (s == CUBLAS_STATUS_SUCCESS && nres > 0) {
        p->algo = res.algo;
        p->supported = 1;
    } else if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED) {
        goto fail;
    }
    mc->nplans++;
    return p;
#undef GEMM_LT
fail:
    gpt2_kernel_error(cudaErrorUnknown, "cuBLASLt plan for a %dx%dx%d GEMM (op %c%c, epilogue %d, %s out): %s", g->m,
                      g->n, g->k, g->transa ? 'T' : 'N', g->transb ? 'T' : 'N', g->epilogue,
                      g->d_f32 ? "fp32" : "bf16", gemm_status(s));
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    memset(p, 0, sizeof *p);
    return NULL;
}

/* Runs g on st; cudaErrorNotSupported (nothing printed) when cuBLASLt has no algorithm for it. */
static cudaError_t gemm_run(matmul_ctx *mc, const gemm_call *g, cudaStream_t st) {
    matmul_plan *p = gemm_plan(mc, g);
    cublasStatus_t s;
    if (!p) return cudaErrorUnknown;
    if (!p->supported) return cudaErrorNotSupported;
    if ((s = gemm_set_pointers(p->desc, g)) == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmul(mc->lt, p->desc, &g->alpha, g->A, p->a, g->B, p->b, &g->beta, g->D, p->d, g->D, p->d,
                           &p->algo, mc->ws, mc->ws_size, st);
    if (s != CUBLAS_STATUS_SUCCESS)
        return gpt2_kernel_error(cudaErrorUnknown, "cublasLtMatmul %dx%dx%d (op %c%c, epilogue %d): %s", g->m, g->n,
                                 g->k, g->transa ? 'T' : 'N', g->transb ? 'T' : 'N', g->epilogue, gemm_status(s));
    return cudaSuccess;
}
/* A GEMM that must run (no fallback). */
static cudaError_t gemm_must(matmul_ctx *mc, const gemm_call *g, cudaStream_t st) {
    cudaError_t e = gemm_run(mc, g, st);
    if (e == cudaErrorNotSupported)
        return gpt2_kernel_error(e, "cuBLASLt has no algorithm for a %dx%dx%d bf16 GEMM (op %c%c, epilogue %d)", g->m,
                                 g->n, g->k, g->transa ? 'T' : 'N', g->transb ? 'T' : 'N', g->epilogue);
    return e;
}

/* ------------------------------------------------------------------------------------- bias gradients */
#define COLSUM_MAX_SPLITS 128
/* Split s of nsplit over N rows: [r0, r1) (the last ones may be empty). */
static ACCEL_INLINE ACCEL_HD void colsum_rows(int s, int nsplit, int N, int *r0, int *r1) {
    int per = (N + nsplit - 1) / nsplit, a = s * per;
    *r0 = a < N ? a : N;
    *r1 = a + per < N ? a + per : N;
}
/* Row splits for N rows: about 128 rows per block, at most COLSUM_MAX_SPLITS (a function of N only: the summation
   order must not depend on the device). */
static ACCEL_INLINE int colsum_splits(int N) {
    int s = N / 128;
    return s < 1 ? 1 : s > COLSUM_MAX_SPLITS ? COLSUM_MAX_SPLITS : s;
}
static ACCEL_INLINE size_t matmul_scratch_floats(int OC) { return (size_t)COLSUM_MAX_SPLITS * OC; }

/* Stage 1: block (column group of 256, split): 32 lanes x 8 columns each, 8 row lanes; the row lanes fold in order
   through shared memory; partial[split][c] = the split's sum. */
__global__ void __launch_bounds__(256) colsum_partial_kernel(float *partial, const bf16 *d, int N, int OC, int nsplit) {
    __shared__ float sh[8][8][33];
    int tx = threadIdx.x, ty = threadIdx.y, c = (blockIdx.x * 32 + tx) * 8, r0, r1;
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    colsum_rows(blockIdx.y, nsplit, N, &r0, &r1);
    if (c < OC) {
#pragma unroll 4
        for (int r = r0 + ty; r < r1; r += 8) {
            x128 v = load128(d + (size_t)r * OC + c);
#pragma unroll
            for (int i = 0; i < 8; ++i) s[i] += f32(v[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) sh[ty][i][tx] = s[i];
    __syncthreads();
    if (ty == 0 && c < OC) {
        f128 lo, hi;
        for (int y = 1; y < 8; ++y)
#pragma unroll
            for (int i = 0; i < 8; ++i) s[i] += sh[y][i][tx];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            lo[i] = s[i];
            hi[i] = s[4 + i];
        }
        store128(partial + (size_t)blockIdx.y * OC + c, lo);
        store128(partial + (size_t)blockIdx.y * OC + c + 4, hi);
    }
}

/* dbias (OC) += column sums of dout (N, OC); OC a multiple of 8 */
static cudaError_t matmul_backward_bias(float *dbias, const bf16 *dout, int N, int OC, float *scratch,
                                       cudaStream_t st) {
    int ns = colsum_splits(N);
    if (OC % 8) return gpt2_kernel_error(cudaErrorInvalidValue, "bias gradient: %d columns (a multiple of 8)", OC);
    colsum_partial_kernel<<<dim3(ceil_div((size_t)OC, 256), ns), dim3(32, 8), 0, st>>>(scratch, dout, N, OC, ns);
    GPT2_LAUNCH_CHECK();
    return fold_partials(dbias, NULL, scratch, ns, OC, st);
}

/* ------------------------------------------------------------------------------------------ the layers */
static cudaError_t matmul_forward(matmul_ctx *mc, bf16 *out, const bf16 *inp, const bf16 *weight, const bf16 *bias,
                                  int N, int C, int OC, cudaStream_t st, bf16 *pre_gelu = NULL) {
    gemm_call g;
    if (pre_gelu && mc->fuse_gelu) {
        cudaError_t e;
        g = matmul_forward_call(out, pre_gelu, inp, weight, bias, N, C, OC);
        if ((e = gemm_run(mc, &g, st)) != cudaErrorNotSupported) return e;
        mc->gelu_fallbacks++; /* no GELU epilogue for this plan: this call unfused (not a global switch: resume) */
    }
    g = matmul_forward_call(pre_gelu ? pre_gelu : out, NULL, inp, weight, bias, N, C, OC);
    GPT2_TRY(gemm_must(mc, &g, st));
    return pre_gelu ? gelu_forward(out, pre_gelu, (size_t)N * OC, st) : cudaSuccess;
}

static cudaError_t matmul_backward(matmul_ctx *mc, bf16 *dinp, float *dweight, float *dbias, const bf16 *dout,
                                   const bf16 *inp, const bf16 *weight, int N, int C, int OC, float *scratch,
                                   cudaStream_t st, const bf16 *pre_gelu = NULL) {
    gemm_call g;
    if (dbias) GPT2_TRY(matmul_backward_bias(dbias, dout, N, OC, scratch, st));
    g = matmul_backward_dweight_call(dweight, dout, inp, N, C, OC);
    GPT2_TRY(gemm_must(mc, &g, st));
    if (pre_gelu && mc->fuse_gelu) {
        cudaError_t e;
        g = matmul_backward_dinp_call(dinp, dout, weight, pre_gelu, N, C, OC);
        if ((e = gemm_run(mc, &g, st)) != cudaErrorNotSupported) return e;
        mc->gelu_fallbacks++;
    }
    g = matmul_backward_dinp_call(dinp, dout, weight, NULL, N, C, OC);
    GPT2_TRY(gemm_must(mc, &g, st));
    return pre_gelu ? gelu_backward(dinp, pre_gelu, (size_t)N * C, st) : cudaSuccess;
}

#endif /* GPT2_KERNELS_MATMUL_CUH */
