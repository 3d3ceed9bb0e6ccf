/* fp8_gemm.cu — an FP8 GEMM with cuBLASLt driven by accel_amp.h's delayed scaling: the Linear layer y = x·Wᵀ of
   Transformer Engine in C.

     x (M×K, activations) and W (N×K, weights), fp32 on the device
       → accel_amp_fp8_quantize: E4M3 with each tensor's scale, amax recorded (one launch for both)
       → cublasLtMatmul: E4M3 × E4M3 → BF16, fp32 accumulation, the dequantization scales (scale_inv of the two slots)
         as A/B scale pointers, the output's amax written by cuBLASLt (AMAX_D pointer) and recorded in the output slot
       → accel_amp_fp8_update: next step's scales from the amaxes.
   The first step runs with every scale at 1 (TE's start); the second with the scales the first step's amaxes gave.

   Checked against a reference GEMM in float64 on the host over the dequantized fp8 inputs (what the tensor cores
   multiply): |y - ref| <= 2^-8 |ref| + 2^-12 sum_k |x_k w_k| per element — the bf16 rounding of y, plus the
   accumulation (Hopper's FP8 tensor cores keep fewer than fp32's bits between cuBLAS's promotions to fp32) — and the
   amax against max |y| (within the bf16 rounding). The worst error as a fraction of that bound is printed. It also prints the error against the
   fp32 inputs (the fp8 quantization error, information only) and the GEMM's speed.

   cuBLASLt's FP8 GEMM needs compute capability 8.9 or newer; this example runs on Hopper (9.0+) and exits 77 (skip)
   elsewhere or without a device. usage: fp8_gemm [M N K] (multiples of 16; default 2048 2048 2048). */
#include "accel.h"
#include "accel_amp.h"
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define LT(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "%s:%d %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, (int)s_); exit(1); } } while (0)
#define AC(acc, x) do { if ((x) != ACCEL_OK) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, accel_last_error(acc)); exit(1); } } while (0)

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float nrand(void) {
    double u, v;
    rng = rng * 6364136223846793005ull + 1442695040888963407ull; u = ((rng >> 11) + 1.0) / 9007199254740993.0;
    rng = rng * 6364136223846793005ull + 1442695040888963407ull; v = (rng >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

typedef struct gemm {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo[8]; /* the heuristic's candidates, best first; gemm_pick keeps the first that runs */
    int nalgo;
    void *ws;
    size_t ws_bytes;
    int amax_d; /* cuBLASLt writes the output amax */
} gemm;

static void gemm_free(gemm *g);

/* y (M×N row-major, BF16) = x (M×K row-major) · wᵀ (w: N×K row-major). In cuBLASLt's column-major terms:
   yᵀ (N×M) = op(w) · xᵀ with op = transpose — the "TN" layout FP8 GEMMs require. */
static int gemm_plan(gemm *g, int M, int N, int K, const float *d_sinv_w, const float *d_sinv_x, float *d_amax, int amax) {
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res[8];
    int found = 0, i;
    memset(g, 0, sizeof *g);
    g->ws_bytes = (size_t)32 << 20;
    CK(cudaMalloc(&g->ws, g->ws_bytes));
    LT(cublasLtCreate(&g->lt));
    LT(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &d_sinv_w, sizeof d_sinv_w));
    LT(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &d_sinv_x, sizeof d_sinv_x));
    if (amax) LT(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &d_amax, sizeof d_amax));
    LT(cublasLtMatrixLayoutCreate(&g->la, CUDA_R_8F_E4M3, K, N, K));
    LT(cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_8F_E4M3, K, M, K));
    LT(cublasLtMatrixLayoutCreate(&g->ld, CUDA_R_16BF, N, M, N));
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g->ws_bytes, sizeof g->ws_bytes));
    if (cublasLtMatmulAlgoGetHeuristic(g->lt, g->op, g->la, g->lb, g->ld, g->ld, pref, 8, res, &found) !=
            CUBLAS_STATUS_SUCCESS || found == 0) {
        cublasLtMatmulPreferenceDestroy(pref);
        gemm_free(g);
        return 0;
    }
    for (i = 0; i < found; ++i) g->algo[i] = res[i].algo;
    g->nalgo = found;
    g->amax_d = amax;
    cublasLtMatmulPreferenceDestroy(pref);
    return 1;
}
static void gemm_free(gemm *g) {
    if (!g->lt) return;
    cublasLtMatrixLayoutDestroy(g->la); cublasLtMatrixLayoutDestroy(g->lb); cublasLtMatrixLayoutDestroy(g->ld);
    cublasLtMatmulDescDestroy(g->op);
    cublasLtDestroy(g->lt);
    cudaFree(g->ws);
    g->lt = NULL;
}
static cublasStatus_t gemm_run(gemm *g, const void *w8, const void *x8, void *y, cudaStream_t st) {
    float alpha = 1.0f, beta = 0.0f;
    return cublasLtMatmul(g->lt, g->op, &alpha, w8, g->la, x8, g->lb, &beta, y, g->ld, y, g->ld, &g->algo[0], g->ws,
                          g->ws_bytes, st);
}
/* A heuristic candidate can still be refused at run time (CUBLAS_STATUS_NOT_SUPPORTED): keep the first one that runs,
   and say how many were refused. */
static cublasStatus_t gemm_pick(gemm *g, const void *w8, const void *x8, void *y, cudaStream_t st) {
    cublasStatus_t s = CUBLAS_STATUS_NOT_SUPPORTED;
    int i;
    for (i = 0; i < g->nalgo; ++i) {
        g->algo[0] = g->algo[i];
        s = gemm_run(g, w8, x8, y, st);
        if (s != CUBLAS_STATUS_NOT_SUPPORTED) break;
    }
    if (i > 0) printf("cuBLASLt refused %d of %d heuristic candidates at run time (status %d)\n", i, g->nalgo, (int)s);
    g->nalgo = 1;
    return s;
}

int main(int argc, char **argv) {
    int M = argc > 3 ? atoi(argv[1]) : 2048, N = argc > 3 ? atoi(argv[2]) : 2048, K = argc > 3 ? atoi(argv[3]) : 2048;
    int count = 0, step, ok = 1;
    struct cudaDeviceProp prop;
    accel acc;
    accel_desc ad;
    accel_amp_fp8 f;
    accel_amp_fp8_desc fd;
    float *hx, *hw, *dx, *dw, *dsinv, *damax, *hxd, *hwd;
    unsigned char *dx8, *dw8;
    __nv_bfloat16 *dy, *hy;
    accel_tensor src[2], q[2], deq[2];
    gemm g;
    size_t i;
    if (M <= 0 || N <= 0 || K <= 0 || M % 16 || N % 16 || K % 16) { fprintf(stderr, "M N K: positive multiples of 16\n"); return 2; }
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) { printf("no CUDA device: skipped\n"); return 77; }
    CK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 9) { printf("%s is sm_%d%d: this FP8 GEMM example runs on Hopper (sm_90) or newer: skipped\n", prop.name, prop.major, prop.minor); return 77; }
    memset(&ad, 0, sizeof ad);
    ad.no_mpi = 1;
    ad.mixed_precision = ACCEL_PRECISION_FP8;
    AC(&acc, accel_init(&acc, &ad));
    memset(&fd, 0, sizeof fd);
    fd.num_forward = 3; /* slot 0 x, 1 W, 2 y (the output, cast to fp8 by the next layer) */
    fd.amax_history_len = 16;
    fd.amax_compute_algo = ACCEL_AMP_AMAX_MAX;
    AC(&acc, accel_amp_fp8_init(&acc, &f, &fd));
    hx = (float *)malloc(sizeof(float) * (size_t)M * K);
    hw = (float *)malloc(sizeof(float) * (size_t)N * K);
    hxd = (float *)malloc(sizeof(float) * (size_t)M * K);
    hwd = (float *)malloc(sizeof(float) * (size_t)N * K);
    hy = (__nv_bfloat16 *)malloc(sizeof(__nv_bfloat16) * (size_t)M * N);
    for (i = 0; i < (size_t)M * K; ++i) hx[i] = 3.0f * nrand() * (i % 97 == 0 ? 8.0f : 1.0f); /* a few outliers */
    for (i = 0; i < (size_t)N * K; ++i) hw[i] = 0.02f * nrand();
    CK(cudaMalloc(&dx, sizeof(float) * (size_t)M * K));
    CK(cudaMalloc(&dw, sizeof(float) * (size_t)N * K));
    CK(cudaMalloc(&dx8, (size_t)M * K));
    CK(cudaMalloc(&dw8, (size_t)N * K));
    CK(cudaMalloc(&dy, sizeof(__nv_bfloat16) * (size_t)M * N));
    CK(cudaMalloc(&dsinv, 8 * sizeof(float))); /* x's scale_inv at [0], W's at [4]: each 16-byte aligned */
    CK(cudaMalloc(&damax, sizeof(float)));
    CK(cudaMemcpy(dx, hx, sizeof(float) * (size_t)M * K, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw, hw, sizeof(float) * (size_t)N * K, cudaMemcpyHostToDevice));
    memset(src, 0, sizeof src);
    src[0].ptr = dx; src[0].dtype = ACCEL_F32; src[0].ndim = 2; src[0].shape[0] = M; src[0].shape[1] = K;
    src[1].ptr = dw; src[1].dtype = ACCEL_F32; src[1].ndim = 2; src[1].shape[0] = N; src[1].shape[1] = K;
    q[0] = src[0]; q[0].ptr = dx8; q[0].dtype = ACCEL_F8_E4M3;
    q[1] = src[1]; q[1].ptr = dw8; q[1].dtype = ACCEL_F8_E4M3;
    deq[0] = src[0]; deq[0].ptr = dx; /* dequantized in place of the fp32 inputs once they are no longer needed */
    deq[1] = src[1]; deq[1].ptr = dw;
    if (!gemm_plan(&g, M, N, K, dsinv + 4, dsinv, damax, 1)) {
        printf("cuBLASLt has no FP8 algorithm with the output amax for BF16 output here: computing the amax without it\n");
        if (!gemm_plan(&g, M, N, K, dsinv + 4, dsinv, damax, 0)) { printf("cuBLASLt: no FP8 algorithm: skipped\n"); return 77; }
    }
    for (step = 0; step < 2; ++step) {
        cudaStream_t st = (cudaStream_t)acc.stream;
        float sinv[8] = {f.scale_inv[0], 0, 0, 0, f.scale_inv[1], 0, 0, 0}, amax = 0, ymax = 0;
        double worst = 0, maxrel_fp32 = 0;
        int m, n, k, bad = 0;
        AC(&acc, accel_amp_fp8_quantize(&f, NULL, src, q, 2));               /* x, W → E4M3, amax recorded */
        CK(cudaMemcpyAsync(dsinv, sinv, sizeof sinv, cudaMemcpyHostToDevice, st));
        CK(cudaMemsetAsync(damax, 0, sizeof(float), st));
        LT(step == 0 ? gemm_pick(&g, dw8, dx8, dy, st) : gemm_run(&g, dw8, dx8, dy, st));
        CK(cudaMemcpyAsync(hy, dy, sizeof(__nv_bfloat16) * (size_t)M * N, cudaMemcpyDeviceToHost, st));
        CK(cudaMemcpyAsync(&amax, damax, sizeof(float), cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        for (i = 0; i < (size_t)M * N; ++i) { float v = fabsf(__bfloat162float(hy[i])); if (v > ymax) ymax = v; }
        if (!g.amax_d) amax = ymax;
        AC(&acc, accel_amp_fp8_record_amax(&f, 2, amax));                    /* the output's amax for its slot */
        /* the reference: float64 GEMM over what the tensor cores multiplied (the dequantized fp8 inputs) */
        {
            accel_tensor dq[2];
            dq[0] = deq[0]; dq[1] = deq[1];
            AC(&acc, accel_amp_fp8_dequantize(&f, NULL, q, dq, 2));
            CK(cudaMemcpy(hxd, dx, sizeof(float) * (size_t)M * K, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(hwd, dw, sizeof(float) * (size_t)N * K, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(dx, hx, sizeof(float) * (size_t)M * K, cudaMemcpyHostToDevice)); /* the fp32 inputs back */
            CK(cudaMemcpy(dw, hw, sizeof(float) * (size_t)N * K, cudaMemcpyHostToDevice));
        }
        for (m = 0; m < M; m += (m % 7 == 0 ? 1 : 13)) /* a sample of rows, every column */
            for (n = 0; n < N; ++n) {
                double r = 0, a = 0, r32 = 0, y = (double)__bfloat162float(hy[(size_t)m * N + n]), err;
                for (k = 0; k < K; ++k) {
                    double p = (double)hxd[(size_t)m * K + k] * (double)hwd[(size_t)n * K + k];
                    r += p; a += fabs(p);
                    r32 += (double)hx[(size_t)m * K + k] * (double)hw[(size_t)n * K + k];
                }
                err = fabs(y - r) / (ldexp(fabs(r), -8) + ldexp(a, -12));
                if (err > 1.0) { if (bad++ < 5) fprintf(stderr, "y[%d][%d] = %.6g, reference %.6g\n", m, n, y, r); }
                if (err > worst) worst = err;
                if (fabs(y - r32) / (fabs(r32) + 1e-3) > maxrel_fp32) maxrel_fp32 = fabs(y - r32) / (fabs(r32) + 1e-3);
            }
        printf("step %d: scales x %.5g W %.5g; %s (worst error %.3f of the bound); max relative error against the "
               "fp32 inputs %.3g\n", step, (double)f.scale[0], (double)f.scale[1],
               bad ? "MISMATCH" : "matches the reference", worst, maxrel_fp32);
        if (bad) ok = 0;
        if (g.amax_d) {
            int amax_ok = fabsf(amax - ymax) <= ldexpf(ymax, -7);
            printf("step %d: cuBLASLt amax %.6g, max |y| %.6g: %s\n", step, (double)amax, (double)ymax, amax_ok ? "ok" : "MISMATCH");
            if (!amax_ok) ok = 0;
        }
        AC(&acc, accel_amp_fp8_update(&f));                                  /* the delayed-scaling step */
    }
    { /* speed of the FP8 GEMM (information) */
        cudaEvent_t e0, e1;
        float ms = 0;
        int r;
        cudaStream_t st = (cudaStream_t)acc.stream;
        cudaEventCreate(&e0); cudaEventCreate(&e1);
        for (r = 0; r < 3; ++r) LT(gemm_run(&g, dw8, dx8, dy, st));
        CK(cudaEventRecord(e0, st));
        for (r = 0; r < 20; ++r) LT(gemm_run(&g, dw8, dx8, dy, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        printf("%s: FP8 GEMM %dx%dx%d: %.1f TFLOP/s\n", prop.name, M, N, K, 2.0 * M * N * (double)K * 20 / (ms * 1e-3) * 1e-12);
    }
    gemm_free(&g);
    accel_amp_fp8_deinit(&f);
    cudaFree(dx); cudaFree(dw); cudaFree(dx8); cudaFree(dw8); cudaFree(dy); cudaFree(dsinv); cudaFree(damax);
    free(hx); free(hw); free(hxd); free(hwd); free(hy);
    accel_shutdown(&acc);
    printf("%s\n", ok ? "fp8_gemm: OK" : "fp8_gemm: FAILED");
    return ok ? 0 : 1;
}
