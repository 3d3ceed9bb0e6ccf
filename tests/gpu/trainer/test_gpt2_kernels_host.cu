/* test_gpt2_kernels_host.cu — the host-side half of examples/gpt2/kernels, on the CPU (no device needed; suite unit).

   What can be checked without a GPU is checked against gpt2_cpu.c's layers (the float32 oracle, gpt2_cpu_layers.h):
     gemm layouts     every GEMM the linear layers issue (matmul_forward_call, _backward_dinp_call, _dweight_call,
                      with the BIAS / GELU_AUX / DGELU epilogues) executed by a column-major reference GEMM with
                      cuBLASLt's semantics, against matmul_forward / matmul_backward / gelu_forward / gelu_backward
     attention (own)  the pointer arrays (attention_offset) and the six batched GEMMs (attention_gemm) executed the same
                      way, with the causal softmax and its backward, against attention_forward / attention_backward
     attention (cuDNN) the tensors sdpa_layout_of describes to cuDNN (dims, strides, k/v offsets, the stats layout),
                      walked by a reference flash attention (forward with log-sum-exp, backward from out, dout and the
                      log-sum-exp), against attention_forward / attention_backward
     element math     gelu_tanh / gelu_tanh_grad against gelu_forward / gelu_backward; softmax_combine against a
                      direct (max, Σ exp) over any split, empty parts included
     partitions       colsum_rows covers the rows once; the column sums through it and fold order give
                      matmul_backward's dbias; layernorm_chunks' lanes cover the channels once; layernorm_backward's
                      (block, warp, step) rows cover the rows once; prepare_token_segments groups positions by token
                      (ascending) and the segment sums give encoder_backward's dwte
     peak FLOP/s      gpt2_peak_flops against datasheet figures
   Tolerances: float32 against float32 in another summation order: 1e-5 of the reference's largest magnitude. */
#include "gpt2_cpu_layers.h"
#include "gpt2_kernel_tests.h"
#include "kernels/attention.cuh"
#include "kernels/encoder.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static std::vector<float> randv(size_t n, float scale = 1.0f) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = frand() * scale;
    return v;
}
/* max |a - b| / max |b| */
static double rel_err(const float *a, const float *b, size_t n) {
    double e = 0.0, m = 0.0;
    for (size_t i = 0; i < n; ++i) {
        e = fmax(e, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? e / m : e;
}
static double rel_errv(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() ? rel_err(a.data(), b.data(), a.size()) : INFINITY;
}

/* ----------------------------------------------------------------------- reference GEMM (column-major) */
/* D = alpha op(A) op(B) + beta D, as cuBLAS defines it, on float arrays */
static void ref_gemm(int transa, int transb, int m, int n, int k, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *D, int ldd) {
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
            double acc = 0.0;
            for (int p = 0; p < k; ++p) {
                float a = transa ? A[p + (size_t)i * lda] : A[i + (size_t)p * lda];
                float b = transb ? B[j + (size_t)p * ldb] : B[p + (size_t)j * ldb];
                acc += (double)a * b;
            }
            float *d = &D[i + (size_t)j * ldd];
            *d = (float)(alpha * acc + (beta != 0.0f ? beta * *d : 0.0f));
        }
}
/* a gemm_call whose pointers are float arrays, with cuBLASLt's epilogue semantics */
static void run_gemm_call(const gemm_call *g) {
    float *D = (float *)g->D, *aux = (float *)g->aux;
    const float *bias = (const float *)g->bias;
    ref_gemm(g->transa, g->transb, g->m, g->n, g->k, g->alpha, (const float *)g->A, g->lda, (const float *)g->B,
             g->ldb, g->beta, D, g->ldd);
    for (int j = 0; j < g->n; ++j)
        for (int i = 0; i < g->m; ++i) {
            float *d = &D[i + (size_t)j * g->ldd];
            if (g->epilogue == GEMM_EPI_BIAS) *d += bias[i];
            if (g->epilogue == GEMM_EPI_GELU_AUX) {
                float x = *d + (bias ? bias[i] : 0.0f);
                aux[i + (size_t)j * g->ldaux] = x;
                *d = gelu_tanh(x);
            }
            if (g->epilogue == GEMM_EPI_DGELU) *d *= gelu_tanh_grad(aux[i + (size_t)j * g->ldaux]);
        }
}

static void test_matmul(int N, int C, int OC) {
    std::vector<float> inp = randv((size_t)N * C), w = randv((size_t)OC * C, 0.3f), bias = randv(OC);
    std::vector<float> ref((size_t)N * OC), got((size_t)N * OC), pre((size_t)N * OC), gel((size_t)N * OC);
    gemm_call g;
    ref_matmul_forward(ref.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    g = matmul_forward_call(got.data(), NULL, inp.data(), w.data(), bias.data(), N, C, OC);
    run_gemm_call(&g);
    check(rel_errv(got, ref) < 1e-5, "matmul_forward_call (N=%d C=%d OC=%d, bias epilogue) = matmul_forward: %.1e", N,
          C, OC, rel_errv(got, ref));
    g = matmul_forward_call(got.data(), NULL, inp.data(), w.data(), NULL, N, C, OC);
    run_gemm_call(&g);
    ref_matmul_forward(ref.data(), inp.data(), w.data(), NULL, N, C, OC);
    check(g.epilogue == GEMM_EPI_NONE && rel_errv(got, ref) < 1e-5, "matmul_forward_call without bias: %.1e",
          rel_errv(got, ref));
    /* fused GELU: aux = inp·wᵀ + b, out = gelu(aux) */
    ref_matmul_forward(ref.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    ref_gelu_forward(gel.data(), ref.data(), ref.size());
    g = matmul_forward_call(got.data(), pre.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    run_gemm_call(&g);
    check(rel_errv(pre, ref) < 1e-5 && rel_errv(got, gel) < 1e-5,
          "matmul_forward_call with pre_gelu (GELU_AUX_BIAS) = matmul_forward + gelu_forward: %.1e, %.1e",
          rel_errv(pre, ref), rel_errv(got, gel));

    /* backward: dinp, dweight (+=), and with DGELU */
    std::vector<float> dout = randv((size_t)N * OC), dinp_ref((size_t)N * C), dinp((size_t)N * C);
    std::vector<float> dw0 = randv((size_t)OC * C), dw_ref = dw0, dw = dw0, db_ref(OC, 0.5f);
    ref_matmul_backward(dinp_ref.data(), dw_ref.data(), db_ref.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    g = matmul_backward_dinp_call(dinp.data(), dout.data(), w.data(), NULL, N, C, OC);
    run_gemm_call(&g);
    check(rel_errv(dinp, dinp_ref) < 1e-5, "matmul_backward_dinp_call = matmul_backward's dinp: %.1e",
          rel_errv(dinp, dinp_ref));
    g = matmul_backward_dweight_call(dw.data(), dout.data(), inp.data(), N, C, OC);
    run_gemm_call(&g);
    check(rel_errv(dw, dw_ref) < 1e-5, "matmul_backward_dweight_call accumulates matmul_backward's dweight: %.1e",
          rel_errv(dw, dw_ref));
    { /* the bias gradient as the kernels sum it: splits of colsum_rows, then the splits in order */
        int ns = colsum_splits(N);
        std::vector<float> db(OC, 0.5f);
        for (int c = 0; c < OC; ++c) {
            float total = 0.0f;
            for (int s = 0; s < ns; ++s) {
                int r0, r1;
                float part = 0.0f;
                colsum_rows(s, ns, N, &r0, &r1);
                for (int r = r0; r < r1; ++r) part += dout[(size_t)r * OC + c];
                total += part;
            }
            db[c] += total;
        }
        check(rel_errv(db, db_ref) < 1e-5, "column sums over colsum_rows' %d splits = matmul_backward's dbias: %.1e",
              ns, rel_errv(db, db_ref));
    }
    { /* the DGELU epilogue = matmul_backward's dinp, then gelu_backward (pre_gelu of shape N x C) */
        std::vector<float> pg = randv((size_t)N * C, 2.0f);
        ref_gelu_backward(dinp_ref.data(), pg.data(), dinp_ref.size());
        g = matmul_backward_dinp_call(dinp.data(), dout.data(), w.data(), pg.data(), N, C, OC);
        run_gemm_call(&g);
        check(rel_errv(dinp, dinp_ref) < 1e-5, "matmul_backward_dinp_call with pre_gelu (DGELU) = dinp then "
                                               "gelu_backward: %.1e", rel_errv(dinp, dinp_ref));
    }
}

/* ------------------------------------------------------------------------------- attention, own path */
static void causal_softmax_rows(float *S, int rows, int T) {
    for (int r = 0; r < rows; ++r) {
        float *x = S + (size_t)r * T, mx = -INFINITY, s = 0.0f;
        int len = r % T + 1;
        for (int j = 0; j < len; ++j) mx = fmaxf(mx, x[j]);
        for (int j = 0; j < len; ++j) s += expf(x[j] - mx);
        for (int j = 0; j < T; ++j) x[j] = j < len ? expf(x[j] - mx) / s : 0.0f;
    }
}
static void causal_softmax_backward_rows(float *dS, const float *S, int rows, int T) {
    for (int r = 0; r < rows; ++r) {
        float *d = dS + (size_t)r * T, dot = 0.0f;
        const float *a = S + (size_t)r * T;
        int len = r % T + 1;
        for (int j = 0; j < len; ++j) dot += a[j] * d[j];
        for (int j = 0; j < T; ++j) d[j] = j < len ? a[j] * (d[j] - dot) : 0.0f;
    }
}
static void run_attention_gemm(int which, float *const base[ATT_NPTR], int B, int T, int C, int NH) {
    attention_gemm_desc g = attention_gemm(which, T, C, NH);
    for (int i = 0; i < B * NH; ++i)
        ref_gemm(g.transa, g.transb, g.m, g.n, g.k, g.alpha, base[g.a] + attention_offset(g.a, i, T, C, NH), g.lda,
                 base[g.b] + attention_offset(g.b, i, T, C, NH), g.ldb, 0.0f,
                 base[g.c] + attention_offset(g.c, i, T, C, NH), g.ldc);
}

static void test_attention_own(int B, int T, int C, int NH) {
    size_t n = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    std::vector<float> qkv = randv(3 * n), out(n), att(natt), ref_out(n), ref_att(natt), dout = randv(n);
    std::vector<float> dqkv(3 * n, 7.0f), datt(natt), ref_dqkv(3 * n), scratch(T);
    float *base[ATT_NPTR] = {0};
    ref_attention_forward(ref_out.data(), ref_att.data(), qkv.data(), B, T, C, NH);
    ref_attention_backward(ref_dqkv.data(), scratch.data(), dout.data(), qkv.data(), ref_att.data(), B, T, C, NH);
    base[ATT_Q] = base[ATT_K] = base[ATT_V] = qkv.data();
    base[ATT_S] = att.data();
    base[ATT_Y] = out.data();
    base[ATT_DQ] = base[ATT_DK] = base[ATT_DV] = dqkv.data();
    base[ATT_DS] = datt.data();
    base[ATT_DY] = dout.data();
    for (int i = 0; i < (int)natt; ++i) att[i] = 1e30f; /* the GEMM must write all of S */
    run_attention_gemm(ATT_GEMM_S, base, B, T, C, NH);
    causal_softmax_rows(att.data(), B * NH * T, T);
    run_attention_gemm(ATT_GEMM_Y, base, B, T, C, NH);
    check(rel_errv(att, ref_att) < 1e-5 && rel_errv(out, ref_out) < 1e-5,
          "own attention forward (B=%d T=%d C=%d NH=%d): pointer arrays + batched GEMMs = attention_forward: "
          "att %.1e, out %.1e", B, T, C, NH, rel_errv(att, ref_att), rel_errv(out, ref_out));
    run_attention_gemm(ATT_GEMM_DS, base, B, T, C, NH);
    run_attention_gemm(ATT_GEMM_DV, base, B, T, C, NH);
    causal_softmax_backward_rows(datt.data(), att.data(), B * NH * T, T);
    run_attention_gemm(ATT_GEMM_DQ, base, B, T, C, NH);
    run_attention_gemm(ATT_GEMM_DK, base, B, T, C, NH);
    check(rel_errv(dqkv, ref_dqkv) < 1e-5, "own attention backward: dq, dk, dv written in place = attention_backward: "
                                          "%.1e", rel_errv(dqkv, ref_dqkv));
}

/* -------------------------------------------------------------------------- attention, cuDNN's layout */
static size_t at4(const int64_t s[4], int64_t a, int64_t b, int64_t c, int64_t d) {
    return (size_t)(a * s[0] + b * s[1] + c * s[2] + d * s[3]);
}
/* flash attention's math over the strided tensors cuDNN is given: forward writes out and the log-sum-exp stats;
   backward uses only out, dout and stats (as cuDNN's does) */
static void sdpa_layout_forward(const sdpa_layout &L, float *out, float *stats, const float *qkv) {
    int64_t B = L.dim[0], NH = L.dim[1], T = L.dim[2], HS = L.dim[3];
    const float *q = qkv, *k = qkv + L.k_offset, *v = qkv + L.v_offset;
    float scale = 1.0f / sqrtf((float)HS);
    std::vector<float> p(T);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < NH; ++h)
            for (int64_t t = 0; t < T; ++t) {
                float mx = -INFINITY, s = 0.0f;
                for (int64_t u = 0; u <= t; ++u) {
                    float x = 0.0f;
                    for (int64_t d = 0; d < HS; ++d)
                        x += q[at4(L.qkv_stride, b, h, t, d)] * k[at4(L.qkv_stride, b, h, u, d)];
                    p[u] = x * scale;
                    mx = fmaxf(mx, p[u]);
                }
                for (int64_t u = 0; u <= t; ++u) s += expf(p[u] - mx);
                float lse = mx + logf(s);
                stats[at4(L.stats_stride, b, h, t, 0)] = lse;
                for (int64_t d = 0; d < HS; ++d) {
                    float o = 0.0f;
                    for (int64_t u = 0; u <= t; ++u) o += expf(p[u] - lse) * v[at4(L.qkv_stride, b, h, u, d)];
                    out[at4(L.o_stride, b, h, t, d)] = o;
                }
            }
}
static void sdpa_layout_backward(const sdpa_layout &L, float *dqkv, const float *dout, const float *qkv,
                                 const float *out, const float *stats) {
    int64_t B = L.dim[0], NH = L.dim[1], T = L.dim[2], HS = L.dim[3];
    const float *q = qkv, *k = qkv + L.k_offset, *v = qkv + L.v_offset;
    float *dq = dqkv, *dk = dqkv + L.k_offset, *dv = dqkv + L.v_offset, scale = 1.0f / sqrtf((float)HS);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < NH; ++h)
            for (int64_t t = 0; t < T; ++t)
                for (int64_t d = 0; d < HS; ++d) {
                    dq[at4(L.qkv_stride, b, h, t, d)] = 0.0f;
                    dk[at4(L.qkv_stride, b, h, t, d)] = 0.0f;
                    dv[at4(L.qkv_stride, b, h, t, d)] = 0.0f;
                }
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < NH; ++h)
            for (int64_t t = 0; t < T; ++t) {
                float D = 0.0f, lse = stats[at4(L.stats_stride, b, h, t, 0)];
                for (int64_t d = 0; d < HS; ++d)
                    D += dout[at4(L.o_stride, b, h, t, d)] * out[at4(L.o_stride, b, h, t, d)];
                for (int64_t u = 0; u <= t; ++u) {
                    float x = 0.0f, dp = 0.0f;
                    for (int64_t d = 0; d < HS; ++d) {
                        x += q[at4(L.qkv_stride, b, h, t, d)] * k[at4(L.qkv_stride, b, h, u, d)];
                        dp += dout[at4(L.o_stride, b, h, t, d)] * v[at4(L.qkv_stride, b, h, u, d)];
                    }
                    float P = expf(x * scale - lse), dS = P * (dp - D) * scale;
                    for (int64_t d = 0; d < HS; ++d) {
                        dv[at4(L.qkv_stride, b, h, u, d)] += P * dout[at4(L.o_stride, b, h, t, d)];
                        dq[at4(L.qkv_stride, b, h, t, d)] += dS * k[at4(L.qkv_stride, b, h, u, d)];
                        dk[at4(L.qkv_stride, b, h, u, d)] += dS * q[at4(L.qkv_stride, b, h, t, d)];
                    }
                }
            }
}
static void test_attention_cudnn_layout(int B, int T, int C, int NH) {
    size_t n = (size_t)B * T * C;
    sdpa_layout L = sdpa_layout_of(B, T, NH, C / NH);
    std::vector<float> qkv = randv(3 * n), out(n), stats((size_t)B * NH * T), ref_out(n);
    std::vector<float> ref_att((size_t)B * NH * T * T), dout = randv(n), dqkv(3 * n), ref_dqkv(3 * n), scratch(T);
    int packed = L.stats_stride[3] == 1 && L.stats_stride[2] == 1 && L.stats_stride[1] == T &&
                 L.stats_stride[0] == (int64_t)NH * T && L.stats_dim[3] == 1;
    sdpa_layout_forward(L, out.data(), stats.data(), qkv.data());
    ref_attention_forward(ref_out.data(), ref_att.data(), qkv.data(), B, T, C, NH);
    check(packed && rel_errv(out, ref_out) < 1e-5, "cuDNN layout (B=%d T=%d C=%d NH=%d): q, k, v strided in qkv, out "
          "in (B, T, C) = attention_forward: %.1e; stats packed (B, NH, T, 1)", B, T, C, NH, rel_errv(out, ref_out));
    sdpa_layout_backward(L, dqkv.data(), dout.data(), qkv.data(), out.data(), stats.data());
    ref_attention_backward(ref_dqkv.data(), scratch.data(), dout.data(), qkv.data(), ref_att.data(), B, T, C, NH);
    check(rel_errv(dqkv, ref_dqkv) < 1e-5, "cuDNN layout backward (from out, dout and the log-sum-exp): dq, dk, dv in "
          "place = attention_backward: %.1e", rel_errv(dqkv, ref_dqkv));
}

/* ------------------------------------------------------------------------------------- element math */
static void test_element_math(void) {
    size_t n = 4001;
    std::vector<float> x(n), ref(n), got(n), d(n), dref(n);
    for (size_t i = 0; i < n; ++i) x[i] = -10.0f + 20.0f * (float)i / (float)(n - 1);
    ref_gelu_forward(ref.data(), x.data(), n);
    for (size_t i = 0; i < n; ++i) got[i] = gelu_tanh(x[i]);
    check(rel_errv(got, ref) < 1e-6, "gelu_tanh = gelu_forward on [-10, 10]: %.1e", rel_errv(got, ref));
    for (size_t i = 0; i < n; ++i) dref[i] = 1.0f;
    ref_gelu_backward(dref.data(), x.data(), n);
    for (size_t i = 0; i < n; ++i) d[i] = gelu_tanh_grad(x[i]);
    check(rel_errv(d, dref) < 1e-6, "gelu_tanh_grad = gelu_backward's factor: %.1e", rel_errv(d, dref));

    /* online softmax merge: split v into parts (some empty) in several ways; each matches the direct (max, Σ exp) */
    std::vector<float> v = randv(1000, 30.0f);
    double mx = -INFINITY, sum = 0.0;
    for (float a : v) mx = fmax(mx, a);
    for (float a : v) sum += exp(a - mx);
    int ok = 1;
    for (int parts = 1; parts <= 64; parts *= 2) {
        float m = -INFINITY, s = 0.0f;
        for (int p = 0; p < parts + 3; ++p) { /* parts + 3 slices: the last three empty */
            float pm = -INFINITY, ps = 0.0f;
            for (size_t i = (size_t)p * v.size() / parts; p < parts && i < (size_t)(p + 1) * v.size() / parts; ++i)
                softmax_combine(&pm, &ps, v[i], 1.0f);
            softmax_combine(&m, &s, pm, ps);
        }
        ok &= m == (float)mx && fabs(s - sum) <= 1e-5 * sum && !isnan(s);
    }
    check(ok, "softmax_combine: any split (empty parts too) gives max %.3f and sum %.6f", mx, sum);
}

/* ------------------------------------------------------------------------------------- partitions */
static void test_partitions(void) {
    int ok = 1;
    for (int N = 1; N <= 40000; N = N < 300 ? N + 1 : N * 3 / 2) { /* colsum_rows: disjoint, in order, complete */
        int ns = colsum_splits(N), next = 0;
        for (int s = 0; s < ns; ++s) {
            int r0, r1;
            colsum_rows(s, ns, N, &r0, &r1);
            ok &= r0 == next && r1 >= r0;
            next = r1;
        }
        ok &= next == N && ns >= 1 && ns <= COLSUM_MAX_SPLITS;
    }
    check(ok, "colsum_rows: the splits cover 0..N-1 once, in order (N = 1 .. 40000)");

    ok = 1;
    for (int C = 8; C <= LN_MAX_C; C += 8) { /* lane l, chunk k: channels [8(32k + l), +8) */
        int ch = layernorm_chunks(C);
        std::vector<int> seen(C, 0);
        for (int k = 0; k < ch; ++k)
            for (int lane = 0; lane < 32; ++lane) {
                int c = (k * 32 + lane) * 8;
                for (int i = 0; c < C && i < 8; ++i) seen[c + i]++;
            }
        for (int c = 0; c < C; ++c) ok &= seen[c] == 1;
    }
    ok &= !layernorm_chunks(0) && !layernorm_chunks(12) && !layernorm_chunks(LN_MAX_C + 8);
    ok &= layernorm_chunks(768) == 3;
    check(ok, "layernorm_chunks: the lanes' 16-byte chunks cover C channels once (C = 8 .. %d); others refused",
          LN_MAX_C);

    ok = 1;
    for (int N = 1; N <= 20000; N = N < 100 ? N + 1 : N * 5 / 4) { /* layernorm_backward's rows per (block, warp) */
        unsigned grid = layernorm_backward_blocks(N);
        std::vector<int> seen(N, 0);
        const int nw = LN_THREADS / 32;
        for (unsigned b = 0; b < grid; ++b)
            for (int w = 0; w < nw; ++w)
                for (int row = (int)b * nw + w; row < N; row += (int)grid * nw) seen[row]++;
        for (int r = 0; r < N; ++r) ok &= seen[r] == 1;
        ok &= grid >= 1 && grid <= LN_BWD_MAX_BLOCKS && layernorm_scratch_floats(64) >= 2 * (size_t)grid * 64;
    }
    check(ok, "layernorm_backward: every row to exactly one (block, warp), the partials fit the scratch");

    { /* token segments: a permutation grouped by token, ascending inside; their sums = encoder_backward's dwte */
        const int B = 3, T = 17, C = 16, V = 11;
        std::vector<int32_t> buf((size_t)B * (T + 1) + 3 * (size_t)B * T + 1), count(V, 0);
        std::vector<int> inp((size_t)B * T), seen((size_t)B * T, 0);
        for (int i = 0; i < B * (T + 1); ++i) buf[i] = (int32_t)((frand() + 1.0f) * 0.5f * V) % V;
        for (int i = 0; i < B * T; ++i) inp[i] = buf[(i / T) * (T + 1) + i % T];
        int nseg = prepare_token_segments(buf.data(), B, T, count.data());
        const int32_t *sorted = buf.data() + (size_t)B * (T + 1), *start = sorted + B * T, *tok = start + B * T + 1;
        ok = nseg >= 1 && nseg <= V && start[0] == 0 && start[nseg] == B * T;
        for (int s = 0; s < nseg; ++s)
            for (int i = start[s]; i < start[s + 1]; ++i) {
                ok &= inp[sorted[i]] == tok[s] && (i == start[s] || sorted[i] > sorted[i - 1]);
                seen[sorted[i]]++;
            }
        for (int i = 0; i < B * T; ++i) ok &= seen[i] == 1;
        for (int v = 0; v < V; ++v) ok &= count[v] == 0;
        std::vector<float> dout = randv((size_t)B * T * C), dwte = randv((size_t)V * C), dwpe = randv((size_t)T * C);
        std::vector<float> got = dwte;
        ref_encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
        for (int s = 0; s < nseg; ++s)
            for (int c = 0; c < C; ++c) {
                float sum = 0.0f;
                for (int i = start[s]; i < start[s + 1]; ++i) sum += dout[(size_t)sorted[i] * C + c];
                got[(size_t)tok[s] * C + c] += sum;
            }
        check(ok && rel_errv(got, dwte) < 1e-5, "prepare_token_segments: %d segments grouping %d positions by token "
              "(ascending); their sums = encoder_backward's dwte (%.1e); the count scratch left zeroed", nseg, B * T,
              rel_errv(got, dwte));
    }
}

static void test_peak_flops(void) {
    struct { const char *name; int major, minor, sms, khz; double want, tol; } d[] = {
        {"NVIDIA H100 80GB HBM3", 9, 0, 132, 1980000, 989e12, 0.0},  /* datasheet: 989 TFLOP/s dense bf16 */
        {"NVIDIA H200", 9, 0, 132, 1980000, 989e12, 0.0},
        {"NVIDIA GH200 480GB", 9, 0, 132, 1980000, 989e12, 0.0},
        {"NVIDIA H100 PCIe", 9, 0, 114, 1755000, 756e12, 0.0},
        {"NVIDIA A100-SXM4-80GB", 8, 0, 108, 1410000, 312e12, 0.0},
        {"NVIDIA A10", 8, 6, 72, 1695000, 125e12, 0.02},            /* datasheet 125 */
        {"NVIDIA L40S", 8, 9, 142, 2520000, 362e12, 0.02},          /* datasheet 362 */
        {"NVIDIA B200", 10, 0, 148, 1965000, 2.25e15, 0.07},        /* datasheet 2.25 PFLOP/s at a lower clock */
        {"Hopper, sm_90 rule", 9, 0, 132, 1830000, 989.4e12, 0.001}, /* the H100 SXM's 989.4 is 132 SMs at 1830 MHz */
        {"Tesla V100-SXM2-16GB", 7, 0, 80, 1530000, 0.0, 0.0},     /* no bf16 tensor cores */
        {"Tesla T4", 7, 5, 40, 1590000, 0.0, 0.0},
        {"Future GPU", 13, 0, 200, 2000000, 0.0, 0.0},
        {"Broken", 9, 0, -1, 1000000, 0.0, 0.0}};
    int ok = 1;
    for (size_t i = 0; i < sizeof d / sizeof d[0]; ++i) {
        double p = gpt2_peak_flops(d[i].name, d[i].major, d[i].minor, d[i].sms, d[i].khz);
        int good = d[i].want == 0.0 ? p == 0.0 : fabs(p - d[i].want) <= d[i].tol * d[i].want + 1.0;
        if (!good) printf("  %s: %.4g, want %.4g\n", d[i].name, p, d[i].want);
        ok &= good && p >= 0.0;
    }
    check(ok, "gpt2_peak_flops: datasheet peaks (H100/H200/GH200 989, H100 PCIe 756, A100 312, A10, L40S, B200); 0, "
              "never negative, without bf16 tensor cores or for unknown parts");
}

int main(void) {
    test_matmul(5, 16, 24);
    test_matmul(37, 64, 192);
    test_matmul(1000, 16, 32); /* 7 row splits for the bias gradient */
    test_attention_own(2, 13, 32, 4); /* T not a multiple of 8 */
    test_attention_own(1, 32, 64, 2);
    test_attention_cudnn_layout(2, 13, 32, 4);
    test_attention_cudnn_layout(1, 24, 48, 3);
    test_element_math();
    test_partitions();
    test_peak_flops();
    printf("gpt2 kernels (host): %d passed, %d failed\n", checks - failures, failures);
    return failures || !checks ? 1 : 0;
}
