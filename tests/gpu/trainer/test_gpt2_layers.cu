/* test_gpt2_layers.cu — every layer of examples/gpt2/train_gpt2.cu on the GPU against gpt2_cpu.c's (the float32
   oracle, gpt2_cpu_layers.h), one by one, so a failure names the layer and the shape. Exit 77 without a device.

   Inputs are random and rounded to bf16 first; the reference runs in float32 on the same (rounded) values, so what is
   compared is the layer's own arithmetic. Each shape has a tiny case (odd row counts, T not a multiple of 8 for the
   own softmax's scalar path, the test model's C = 64) and a GPT-2-sized one (C = 768, T = 1024, V = 50257 padded to
   50304, C = 1600 for the LayerNorm's widest register layout). Bounds, per element, with M = max |reference|:
     |got - ref| <= rtol·|ref| + atol·M
       bit-exact               encoder_forward, residual_forward, the residual of residual_layernorm_forward: one
                               float add rounded once, the same on both sides
       rtol 2^-7, atol 2^-9    bf16 outputs of one rounding after float32 math (bf16 keeps 8 bits: half an ulp is
                               2^-9 relative) — LayerNorm, GEMMs (+ bias / GELU epilogues), GELU, the classifier's
                               gradient; atol 2^-8 where a bf16 input is accumulated into (layernorm_backward's dinp)
       rtol 1e-4, atol 1e-5    fp32 results of float sums in another order (gradients of weights, biases, LayerNorm
                               parameters, embeddings; mean/rstd; the losses)
       rtol 2^-5, atol 2^-6    attention out (the probabilities are bf16 before P·V), and relative L2 <= 2^-6
       rtol 2^-3, atol 2^-5    attention dq, dk, dv (bf16 scores and score gradients in between), relative L2 <= 2^-5
   A wrong layout, offset, scale, mask or missing bias is off by O(1) of M and fails these by far. The GELU epilogues
   are also run at the trainer's MLP shape (N = 16384 rows, C = 768), against the plain GEMM + gelu kernels there:
   cuBLASLt picks its algorithm per shape.
   Determinism: every backward layer with a reduction (layernorm_backward, matmul_backward, both attentions, also at
   T = 1024, NH = 12, HS = 64 with B = 16 for cuDNN's and B = 4 for the own) runs twice on the same inputs and must give
   the same bits. */
#include "gpt2_cpu_layers.h"
#include "gpt2_kernel_tests.h"
#include "kernels/attention.cuh"
#include "kernels/classifier.cuh"
#include "kernels/encoder.cuh"
#include "kernels/gelu.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/residual.cuh"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <initializer_list>
#include <vector>

/* a CUDA failure fails the case and leaves it */
#define CU(call)                                                                                                     \
    do {                                                                                                             \
        cudaError_t e_ = (call);                                                                                     \
        if (e_ != cudaSuccess) {                                                                                     \
            check(0, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_));                            \
            return;                                                                                                  \
        }                                                                                                            \
    } while (0)

static float bf16r(float x) { return accel_bf16_to_f32(accel_f32_to_bf16(x)); }
/* random values, already bf16 */
static std::vector<float> randb(size_t n, float scale = 1.0f, float offset = 0.0f) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = bf16r(offset + frand() * scale);
    return v;
}
static std::vector<float> rounded(std::vector<float> v) {
    for (float &x : v) x = bf16r(x);
    return v;
}

/* device buffers */
struct dbuf {
    void *p = nullptr;
    size_t bytes = 0;
    dbuf() {}
    explicit dbuf(size_t n) : bytes(n) {
        if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) p = nullptr;
    }
    dbuf(const dbuf &) = delete;
    dbuf &operator=(const dbuf &) = delete;
    ~dbuf() {
        if (p) cudaFree(p);
    }
    bf16 *b() const { return (bf16 *)p; }
    float *f() const { return (float *)p; }
    template <class T> T *as() const { return (T *)p; }
};
static void put_bf16(dbuf &d, const std::vector<float> &v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = accel_f32_to_bf16(v[i]);
    cudaMemcpy(d.p, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
}
static void put_f32(dbuf &d, const std::vector<float> &v) {
    cudaMemcpy(d.p, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
}
static std::vector<float> get_bf16(const dbuf &d, size_t n) {
    std::vector<uint16_t> h(n);
    std::vector<float> v(n);
    cudaMemcpy(h.data(), d.p, n * 2, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; ++i) v[i] = accel_bf16_to_f32(h[i]);
    return v;
}
static std::vector<float> get_f32(const dbuf &d, size_t n) {
    std::vector<float> v(n);
    cudaMemcpy(v.data(), d.p, n * 4, cudaMemcpyDeviceToHost);
    return v;
}
/* the bytes of device buffers: a second run must reproduce the first's */
static std::vector<std::vector<uint8_t>> snapshot(std::initializer_list<const dbuf *> bufs) {
    std::vector<std::vector<uint8_t>> out;
    for (const dbuf *d : bufs) {
        out.emplace_back(d->bytes);
        cudaMemcpy(out.back().data(), d->p, d->bytes, cudaMemcpyDeviceToHost);
    }
    return out;
}

/* Runs `run` twice, `reset` putting its inputs back first: `judge` checks the first run's results; the second run
   must leave the same bits in `outs`. */
template <class Reset, class Run, class Judge>
static void run_twice(const char *what, std::initializer_list<const dbuf *> outs, Reset reset, Run run, Judge judge) {
    std::vector<std::vector<uint8_t>> first;
    for (int rep = 0; rep < 2; ++rep) {
        cudaError_t e;
        reset();
        if ((e = run()) == cudaSuccess) e = cudaDeviceSynchronize();
        if (e != cudaSuccess) {
            check(0, "%s: %s", what, cudaGetErrorString(e));
            return;
        }
        if (rep == 0) {
            judge();
            first = snapshot(outs);
        }
    }
    check(first == snapshot(outs), "%s: a second run gives the same bits", what);
}

/* per element |g - r| <= rtol |r| + atol max|r|; optionally relative L2 <= l2 */
static void close(const char *what, const std::vector<float> &g, const std::vector<float> &r, double rtol,
                  double atol, double l2 = 0.0) {
    double M = 0.0, worst = 0.0, num = 0.0, den = 0.0;
    size_t at = 0, nan = 0;
    for (size_t i = 0; i < r.size(); ++i) M = fmax(M, fabs((double)r[i]));
    for (size_t i = 0; i < r.size() && i < g.size(); ++i) {
        double d = fabs((double)g[i] - r[i]), bound = rtol * fabs((double)r[i]) + atol * M;
        if (isnan(g[i])) nan++;
        if (d / (bound > 0 ? bound : 1e-30) > worst) worst = d / (bound > 0 ? bound : 1e-30), at = i;
        num += d * d;
        den += (double)r[i] * r[i];
    }
    double rl2 = den > 0 ? sqrt(num / den) : sqrt(num);
    int ok = g.size() == r.size() && !nan && worst <= 1.0 && (l2 <= 0.0 || rl2 <= l2);
    check(ok, "%s: worst %.2f of the bound (rtol %.1e, atol %.1e·max|ref| = %.2e) at %zu (got %.6g, ref %.6g), "
              "relative L2 %.2e%s", what, worst, rtol, atol, atol * M, at, at < g.size() ? g[at] : 0.0,
          at < r.size() ? r[at] : 0.0, rl2, nan ? ", NaN in the output" : "");
}
static void exact(const char *what, const std::vector<float> &g, const std::vector<float> &r) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < r.size() && i < g.size(); ++i)
        if (memcmp(&g[i], &r[i], 4)) {
            if (!bad) first = i;
            bad++;
        }
    if (bad) printf("  %s: first difference at %zu: got %.8g, want %.8g\n", what, first, g[first], r[first]);
    check(g.size() == r.size() && !bad, "%s: bit-exact (%zu of %zu differ)", what, bad, r.size());
}

static const double BF_R = 1.0 / 128, BF_A = 1.0 / 512, F_R = 1e-4, F_A = 1e-5;

/* ------------------------------------------------------------------------------------------ encoder */
static void test_encoder(int B, int T, int C, int V, cudaStream_t st) {
    char what[160];
    std::vector<int32_t> win((size_t)B * (T + 1));
    std::vector<int> inp((size_t)B * T);
    for (auto &t : win) t = (int32_t)((frand() + 1.0f) * 0.5f * V) % V;
    for (int i = 0; i < B * T; ++i) inp[i] = win[(i / T) * (T + 1) + i % T];
    std::vector<float> wte = randb((size_t)V * C), wpe = randb((size_t)T * C), ref((size_t)B * T * C);
    ref_encoder_forward(ref.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    size_t stage = win.size() + 3 * (size_t)B * T + 1;
    dbuf dwin(stage * 4), dwte(wte.size() * 2), dwpe(wpe.size() * 2), dout_(ref.size() * 2);
    std::vector<int32_t> buf(stage), count(V, 0);
    std::copy(win.begin(), win.end(), buf.begin());
    int nseg = prepare_token_segments(buf.data(), B, T, count.data());
    CU(cudaMemcpy(dwin.p, buf.data(), stage * 4, cudaMemcpyHostToDevice));
    put_bf16(dwte, wte);
    put_bf16(dwpe, wpe);
    CU(encoder_forward(dout_.b(), dwin.as<int32_t>(), dwte.b(), dwpe.b(), B, T, C, st));
    CU(cudaStreamSynchronize(st));
    snprintf(what, sizeof what, "encoder_forward (B=%d T=%d C=%d V=%d) out", B, T, C, V);
    exact(what, get_bf16(dout_, ref.size()), rounded(ref));

    std::vector<float> dout = randb(ref.size()), gte = randb(wte.size()), gpe = randb(wpe.size());
    std::vector<float> rte = gte, rpe = gpe;
    dbuf ddout(dout.size() * 2), dgte(gte.size() * 4), dgpe(gpe.size() * 4);
    put_bf16(ddout, dout);
    put_f32(dgte, gte);
    put_f32(dgpe, gpe);
    const int32_t *sorted = dwin.as<int32_t>() + win.size(), *start = sorted + (size_t)B * T;
    CU(encoder_backward(dgte.f(), dgpe.f(), ddout.b(), sorted, start, start + (size_t)B * T + 1, nseg, B, T, C, st));
    CU(cudaStreamSynchronize(st));
    ref_encoder_backward(rte.data(), rpe.data(), dout.data(), inp.data(), B, T, C);
    snprintf(what, sizeof what, "encoder_backward (B=%d T=%d C=%d, %d token segments) dwte +=", B, T, C, nseg);
    close(what, get_f32(dgte, gte.size()), rte, F_R, F_A);
    snprintf(what, sizeof what, "encoder_backward (B=%d T=%d C=%d) dwpe +=", B, T, C);
    close(what, get_f32(dgpe, gpe.size()), rpe, F_R, F_A);
}

/* ---------------------------------------------------------------------------------------- layernorm */
static void test_layernorm(int N, int C, cudaStream_t st) {
    char what[160];
    std::vector<float> a = randb((size_t)N * C, 1.5f, 0.3f), b2 = randb((size_t)N * C), w = randb(C, 0.5f, 1.0f);
    std::vector<float> bias = randb(C, 0.5f), x(a.size()), out(a.size()), mean(N), rstd(N);
    for (size_t i = 0; i < a.size(); ++i) x[i] = bf16r(a[i] + b2[i]); /* the stored residual */
    dbuf da(a.size() * 2), db2(a.size() * 2), dw(C * 2), db(C * 2), dres(a.size() * 2), dout_(a.size() * 2);
    dbuf dmean(N * 4), drstd(N * 4);
    put_bf16(da, a);
    put_bf16(db2, b2);
    put_bf16(dw, w);
    put_bf16(db, bias);
    CU(layernorm_forward(dout_.b(), dmean.f(), drstd.f(), da.b(), dw.b(), db.b(), N, C, st));
    CU(cudaStreamSynchronize(st));
    ref_layernorm_forward(out.data(), mean.data(), rstd.data(), a.data(), w.data(), bias.data(), N, C);
    snprintf(what, sizeof what, "layernorm_forward (N=%d C=%d) out", N, C);
    close(what, get_bf16(dout_, out.size()), out, BF_R, BF_A);
    snprintf(what, sizeof what, "layernorm_forward (N=%d C=%d) mean", N, C);
    close(what, get_f32(dmean, N), mean, F_R, F_A);
    snprintf(what, sizeof what, "layernorm_forward (N=%d C=%d) rstd", N, C);
    close(what, get_f32(drstd, N), rstd, F_R, F_A);

    CU(residual_layernorm_forward(dres.b(), dout_.b(), dmean.f(), drstd.f(), da.b(), db2.b(), dw.b(), db.b(), N, C,
                                  st));
    CU(cudaStreamSynchronize(st));
    ref_layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, C);
    snprintf(what, sizeof what, "residual_layernorm_forward (N=%d C=%d) residual", N, C);
    exact(what, get_bf16(dres, x.size()), x);
    snprintf(what, sizeof what, "residual_layernorm_forward (N=%d C=%d) out", N, C);
    close(what, get_bf16(dout_, out.size()), out, BF_R, BF_A);

    /* backward: dinp (bf16) +=, dw, db (fp32) += */
    std::vector<float> dout = randb(a.size()), dinp = randb(a.size()), gw = randb(C), gb = randb(C);
    std::vector<float> rdinp = dinp, rgw = gw, rgb = gb;
    dbuf ddout(a.size() * 2), ddinp(a.size() * 2), dgw(C * 4), dgb(C * 4), dmean2(N * 4), drstd2(N * 4);
    dbuf scratch(layernorm_scratch_floats(C) * 4);
    ref_layernorm_forward(out.data(), mean.data(), rstd.data(), a.data(), w.data(), bias.data(), N, C);
    ref_layernorm_backward(rdinp.data(), rgw.data(), rgb.data(), dout.data(), a.data(), w.data(), mean.data(),
                           rstd.data(), N, C);
    snprintf(what, sizeof what, "layernorm_backward (N=%d C=%d)", N, C);
    run_twice(
        what, {&ddinp, &dgw, &dgb},
        [&] {
            put_bf16(ddout, dout);
            put_bf16(ddinp, dinp);
            put_f32(dgw, gw);
            put_f32(dgb, gb);
            put_f32(dmean2, mean);
            put_f32(drstd2, rstd);
        },
        [&] {
            return layernorm_backward(ddinp.b(), dgw.f(), dgb.f(), ddout.b(), da.b(), dw.b(), dmean2.f(), drstd2.f(), N,
                                      C, scratch.f(), st);
        },
        [&] {
            char w2[160];
            snprintf(w2, sizeof w2, "layernorm_backward (N=%d C=%d) dinp +=", N, C);
            close(w2, get_bf16(ddinp, a.size()), rdinp, BF_R, 2 * BF_A);
            snprintf(w2, sizeof w2, "layernorm_backward (N=%d C=%d) dweight +=", N, C);
            close(w2, get_f32(dgw, C), rgw, F_R, F_A);
            snprintf(w2, sizeof w2, "layernorm_backward (N=%d C=%d) dbias +=", N, C);
            close(w2, get_f32(dgb, C), rgb, F_R, F_A);
        });
}

/* ------------------------------------------------------------------------------------------- matmul */
static void test_matmul(matmul_ctx *mm, const char *tag, int N, int C, int OC, int with_bias, int gelu,
                        cudaStream_t st) {
    char what[200];
    std::vector<float> inp = randb((size_t)N * C), w = randb((size_t)OC * C, 1.0f / sqrtf((float)C));
    std::vector<float> bias = randb(OC, 0.5f), pre((size_t)N * OC), out((size_t)N * OC);
    dbuf dinp_(inp.size() * 2), dw(w.size() * 2), db(OC * 2), dout_(out.size() * 2), dpre(out.size() * 2);
    put_bf16(dinp_, inp);
    put_bf16(dw, w);
    put_bf16(db, bias);
    ref_matmul_forward(pre.data(), inp.data(), w.data(), with_bias ? bias.data() : NULL, N, C, OC);
    CU(matmul_forward(mm, dout_.b(), dinp_.b(), dw.b(), with_bias ? db.b() : NULL, N, C, OC, st,
                      gelu ? dpre.b() : NULL));
    CU(cudaStreamSynchronize(st));
    if (gelu) {
        ref_gelu_forward(out.data(), pre.data(), pre.size());
        snprintf(what, sizeof what, "matmul_forward %s+ gelu (N=%d C=%d OC=%d, %s) pre_gelu",
                 with_bias ? "+ bias " : "", N, C, OC, tag);
        close(what, get_bf16(dpre, pre.size()), pre, BF_R, BF_A);
        snprintf(what, sizeof what, "matmul_forward %s+ gelu (N=%d C=%d OC=%d, %s) out", with_bias ? "+ bias " : "", N,
                 C, OC, tag);
        close(what, get_bf16(dout_, out.size()), out, BF_R, BF_A);
    } else {
        snprintf(what, sizeof what, "matmul_forward%s (N=%d C=%d OC=%d, %s) out", with_bias ? " + bias" : "", N, C, OC,
                 tag);
        close(what, get_bf16(dout_, pre.size()), pre, BF_R, BF_A);
    }

    /* backward; with gelu the dinp is the input's gradient of gelu(pre2) where pre2 (N x C) is the GELU input */
    std::vector<float> dout = randb(out.size()), gw = randb(w.size()), gb = randb(OC), pre2 = randb(inp.size(), 2.0f);
    std::vector<float> rdinp(inp.size()), rgw = gw, rgb = gb;
    dbuf ddout(dout.size() * 2), ddinp(inp.size() * 2), dgw(gw.size() * 4), dgb(OC * 4), dpre2(inp.size() * 2);
    dbuf scratch(matmul_scratch_floats(OC) * 4);
    ref_matmul_backward(rdinp.data(), rgw.data(), with_bias ? rgb.data() : NULL, dout.data(), inp.data(), w.data(), N,
                        C, OC);
    if (gelu) ref_gelu_backward(rdinp.data(), pre2.data(), rdinp.size());
    snprintf(what, sizeof what, "matmul_backward%s (N=%d C=%d OC=%d, %s)", gelu ? " + gelu_backward" : "", N, C, OC,
             tag);
    run_twice(
        what, {&ddinp, &dgw, &dgb},
        [&] {
            put_bf16(ddout, dout);
            put_f32(dgw, gw);
            put_f32(dgb, gb);
            put_bf16(dpre2, pre2);
        },
        [&] {
            return matmul_backward(mm, ddinp.b(), dgw.f(), with_bias ? dgb.f() : NULL, ddout.b(), dinp_.b(), dw.b(), N,
                                   C, OC, scratch.f(), st, gelu ? dpre2.b() : NULL);
        },
        [&] {
            char w2[240];
            snprintf(w2, sizeof w2, "%s dinp", what);
            close(w2, get_bf16(ddinp, inp.size()), rdinp, BF_R, BF_A);
            snprintf(w2, sizeof w2, "%s dweight +=", what);
            close(w2, get_f32(dgw, gw.size()), rgw, F_R, F_A);
            if (with_bias) {
                snprintf(w2, sizeof w2, "%s dbias += (column sums, %d splits)", what, colsum_splits(N));
                close(w2, get_f32(dgb, OC), rgb, F_R, F_A);
            }
        });
}

/* The GELU epilogues at the trainer's own MLP shapes (N = B·T rows): cuBLASLt picks its algorithm per shape, so the
   small cases above do not vouch for the one a real step runs. Reference: the plain context's GEMM + gelu.cuh kernels
   on the same inputs (checked against gpt2_cpu.c above). pre_gelu: both round the same fp32 sum once, so they differ
   by at most one bf16 ulp (<= 2^-7 relative: BF_R). out and dinp: the fused path rounds once (<= 2^-8 relative), the
   plain one rounds the GEMM to bf16 and then the GELU (or its derivative's product) again (<= ~2.3·2^-8 through
   gelu' x / gelu <= 1.3), so the two may differ by up to ~1.6·2^-7: rtol 2^-6. A wrong aux pointer, leading
   dimension or epilogue is off by O(1). */
static void test_gelu_fusion_at_scale(matmul_ctx *fused, matmul_ctx *plain, int N, int C, cudaStream_t st) {
    char what[200];
    size_t nc = (size_t)N * C, n4 = 4 * nc;
    int before = fused->gelu_fallbacks;
    dbuf inp(nc * 2), w(8 * (size_t)C * C), b(8 * (size_t)C), w2(8 * (size_t)C * C), dout(nc * 2); /* bf16 */
    dbuf pre_f(n4 * 2), out_f(n4 * 2), pre_p(n4 * 2), out_p(n4 * 2), dinp_f(n4 * 2), dinp_p(n4 * 2);
    dbuf dw_f(16 * (size_t)C * C), dw_p(16 * (size_t)C * C), scratch(matmul_scratch_floats(4 * C) * 4);
    if (!dinp_p.p || !dw_p.p || !scratch.p) {
        check(0, "GELU epilogues at N=%d C=%d: out of device memory", N, C);
        return;
    }
    put_bf16(inp, randb(nc));
    put_bf16(w, randb(4 * (size_t)C * C, 1.0f / sqrtf((float)C)));
    put_bf16(b, randb(4 * (size_t)C, 0.5f));
    put_bf16(w2, randb(4 * (size_t)C * C, 1.0f / sqrtf(4.0f * C)));
    put_bf16(dout, randb(nc));
    CU(cudaMemset(dw_f.p, 0, dw_f.bytes));
    CU(cudaMemset(dw_p.p, 0, dw_p.bytes));
    /* fc: (N, C) -> (N, 4C), bias + GELU; fc_proj's backward: dinp (N, 4C) with gelu' of fc's pre-activation */
    CU(matmul_forward(fused, out_f.b(), inp.b(), w.b(), b.b(), N, C, 4 * C, st, pre_f.b()));
    CU(matmul_forward(plain, out_p.b(), inp.b(), w.b(), b.b(), N, C, 4 * C, st, pre_p.b()));
    CU(matmul_backward(fused, dinp_f.b(), dw_f.f(), NULL, dout.b(), out_p.b(), w2.b(), N, 4 * C, C, scratch.f(), st,
                       pre_p.b()));
    CU(matmul_backward(plain, dinp_p.b(), dw_p.f(), NULL, dout.b(), out_p.b(), w2.b(), N, 4 * C, C, scratch.f(), st,
                       pre_p.b()));
    CU(cudaStreamSynchronize(st));
    const char *how = fused->gelu_fallbacks == before ? "epilogues ran" : "no epilogue algorithm: both unfused";
    snprintf(what, sizeof what, "GELU_AUX_BIAS epilogue at the trainer's shape (N=%d C=%d OC=%d; %s) pre_gelu vs GEMM",
             N, C, 4 * C, how);
    close(what, get_bf16(pre_f, n4), get_bf16(pre_p, n4), BF_R, BF_A);
    snprintf(what, sizeof what, "GELU_AUX_BIAS epilogue (N=%d C=%d OC=%d; %s) out vs GEMM + gelu_forward", N, C, 4 * C,
             how);
    close(what, get_bf16(out_f, n4), get_bf16(out_p, n4), 2 * BF_R, BF_A);
    snprintf(what, sizeof what, "DGELU epilogue (N=%d C=%d OC=%d; %s) dinp vs GEMM + gelu_backward", N, 4 * C, C, how);
    close(what, get_bf16(dinp_f, n4), get_bf16(dinp_p, n4), 2 * BF_R, BF_A);
}

/* the bias gradient alone over many rows (several row splits): float64 column sums as the reference */
static void test_bias_backward(int N, int OC, cudaStream_t st) {
    char what[160];
    std::vector<float> dout = randb((size_t)N * OC), db = randb(OC), ref(OC);
    dbuf ddout(dout.size() * 2), ddb(OC * 4), scratch(matmul_scratch_floats(OC) * 4);
    for (int c = 0; c < OC; ++c) {
        double s = db[c];
        for (int r = 0; r < N; ++r) s += dout[(size_t)r * OC + c];
        ref[c] = (float)s;
    }
    put_bf16(ddout, dout);
    put_f32(ddb, db);
    CU(matmul_backward_bias(ddb.f(), ddout.b(), N, OC, scratch.f(), st));
    CU(cudaStreamSynchronize(st));
    snprintf(what, sizeof what, "matmul_backward_bias (N=%d OC=%d, %d row splits) dbias +=", N, OC, colsum_splits(N));
    close(what, get_f32(ddb, OC), ref, F_R, F_A);
}

/* -------------------------------------------------------------------------------------------- gelu, residual */
static void test_elementwise(size_t n, cudaStream_t st) {
    char what[120];
    std::vector<float> x = randb(n, 4.0f), y = randb(n), out(n), d = randb(n), rd = d;
    dbuf dx(n * 2), dy(n * 2), dout_(n * 2), dd(n * 2);
    put_bf16(dx, x);
    put_bf16(dy, y);
    put_bf16(dd, d);
    CU(gelu_forward(dout_.b(), dx.b(), n, st));
    CU(cudaStreamSynchronize(st));
    ref_gelu_forward(out.data(), x.data(), n);
    snprintf(what, sizeof what, "gelu_forward (n=%zu) out", n);
    close(what, get_bf16(dout_, n), out, BF_R, BF_A);
    CU(gelu_backward(dd.b(), dx.b(), n, st));
    CU(cudaStreamSynchronize(st));
    ref_gelu_backward(rd.data(), x.data(), n);
    snprintf(what, sizeof what, "gelu_backward (n=%zu) d *=", n);
    close(what, get_bf16(dd, n), rd, BF_R, BF_A);
    CU(residual_forward(dout_.b(), dx.b(), dy.b(), n, st));
    CU(cudaStreamSynchronize(st));
    ref_residual_forward(out.data(), x.data(), y.data(), n);
    snprintf(what, sizeof what, "residual_forward (n=%zu) out", n);
    exact(what, get_bf16(dout_, n), rounded(out));
}

/* --------------------------------------------------------------------------------------- classifier */
static void test_classifier(int B, int T, int V, int Vp, cudaStream_t st) {
    char what[160];
    int N = B * T;
    float dloss = 0.7f / (float)N;
    std::vector<int32_t> win((size_t)B * (T + 1));
    std::vector<int> targets(N);
    for (auto &t : win) t = (int32_t)((frand() + 1.0f) * 0.5f * V) % V;
    for (int i = 0; i < N; ++i) targets[i] = win[(i / T) * (T + 1) + i % T + 1];
    std::vector<float> logits = randb((size_t)N * Vp, 6.0f), losses(N), grad = logits;
    for (int r = 0; r < N; ++r) /* padded columns hold whatever the GEMM left: large values must be ignored */
        for (int c = V; c < Vp; ++c) logits[(size_t)r * Vp + c] = grad[(size_t)r * Vp + c] = 100.0f;
    dbuf dlog(logits.size() * 2), dlosses(N * 4), dwin(win.size() * 4), dacc(4);
    put_bf16(dlog, logits);
    CU(cudaMemcpy(dwin.p, win.data(), win.size() * 4, cudaMemcpyHostToDevice));
    CU(fused_classifier(dlog.b(), dlosses.f(), dwin.as<int32_t>(), B, T, V, Vp, dloss, st));
    CU(cudaStreamSynchronize(st));
    ref_crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
    ref_crossentropy_softmax_backward(grad.data(), targets.data(), dloss, N, V, Vp);
    snprintf(what, sizeof what, "fused_classifier (N=%d V=%d Vp=%d) losses", N, V, Vp);
    close(what, get_f32(dlosses, N), losses, F_R, F_A);
    std::vector<float> g = get_bf16(dlog, logits.size());
    snprintf(what, sizeof what, "fused_classifier (N=%d V=%d Vp=%d) dlogits in place", N, V, Vp);
    close(what, g, grad, BF_R, BF_A);
    int zero = 1;
    for (int r = 0; r < N; ++r)
        for (int c = V; c < Vp; ++c) zero &= g[(size_t)r * Vp + c] == 0.0f;
    check(zero, "fused_classifier (V=%d Vp=%d): the padded columns' gradient is exactly 0", V, Vp);

    double sum = 0.0;
    float acc0 = 0.25f, acc = 0.0f;
    for (float l : losses) sum += l;
    CU(cudaMemcpy(dlosses.p, losses.data(), N * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dacc.p, &acc0, 4, cudaMemcpyHostToDevice));
    CU(loss_mean(dacc.f(), dlosses.f(), N, st));
    CU(cudaMemcpy(&acc, dacc.p, 4, cudaMemcpyDeviceToHost));
    check(fabs(acc - (acc0 + sum / N)) <= 1e-6 * (acc0 + sum / N), "loss_mean (n=%d): acc += mean = %.7f (float64 "
          "%.7f)", N, acc, acc0 + sum / N);
}

/* ---------------------------------------------------------------------------------------- attention */
/* Forward, then the backward twice (the same bits); with a reference (small shapes) each result against
   gpt2_cpu.c's; without (GPT-2 124M's B = 16 shape, too slow for the CPU) only the repeat. */
static void test_attention(int use_cudnn, int B, int T, int C, int NH, int reference, cublasHandle_t blas,
                           cudaStream_t st) {
    char what[200];
    const char *tag = use_cudnn ? "cuDNN" : "own";
    size_t n = (size_t)B * T * C, natt = (size_t)B * NH * T * T, nst = (size_t)B * NH * T;
    std::vector<float> qkv = randb(3 * n, 1.5f), out(n), att(reference ? natt : 0), dout = randb(n), dqkv(3 * n);
    dbuf dqkv_in(3 * n * 2), dout_(n * 2), datt(use_cudnn ? 0 : natt * 2), ddatt(use_cudnn ? 0 : natt * 2);
    dbuf dstats(use_cudnn ? nst * 4 : 0), dptrs(attention_ptr_count(B, NH) * sizeof(void *)), ddout(n * 2);
    dbuf ddqkv(3 * n * 2);
    if (!dqkv_in.p || !ddqkv.p || (!use_cudnn && !ddatt.p)) {
        check(0, "attention (%s) at B=%d T=%d: out of device memory", tag, B, T);
        return;
    }
    put_bf16(dqkv_in, qkv);
    put_bf16(ddout, dout);
    if (use_cudnn)
        CU(attention_forward_cudnn(dout_.b(), dstats.f(), dqkv_in.b(), B, T, C, NH, st));
    else
        CU(attention_forward(dout_.b(), datt.b(), dqkv_in.b(), B, T, C, NH, blas, dptrs.as<const bf16 *>(), st));
    CU(cudaStreamSynchronize(st));
    if (reference) {
        ref_attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        snprintf(what, sizeof what, "attention_forward (%s; B=%d T=%d C=%d NH=%d) out", tag, B, T, C, NH);
        close(what, get_bf16(dout_, n), out, 1.0 / 32, 1.0 / 64, 1.0 / 64);
        if (!use_cudnn) {
            snprintf(what, sizeof what, "attention_forward (own; B=%d T=%d) the causal softmax's probabilities", B, T);
            close(what, get_bf16(datt, natt), att, BF_R, BF_A);
        }
        if (use_cudnn && T <= 64) { /* what cuDNN keeps: the log-sum-exp of each scaled score row (information) */
            std::vector<float> lse = get_f32(dstats, nst);
            double worst = 0.0;
            int HS = C / NH;
            for (int b = 0; b < B; ++b)
                for (int h = 0; h < NH; ++h)
                    for (int t = 0; t < T; ++t) {
                        double mx = -INFINITY, sum = 0.0;
                        std::vector<double> x(t + 1);
                        for (int u = 0; u <= t; ++u) {
                            x[u] = 0.0;
                            for (int d = 0; d < HS; ++d)
                                x[u] += (double)qkv[((size_t)b * T + t) * 3 * C + h * HS + d] *
                                        qkv[((size_t)b * T + u) * 3 * C + C + h * HS + d];
                            x[u] /= sqrt((double)HS);
                            mx = fmax(mx, x[u]);
                        }
                        for (int u = 0; u <= t; ++u) sum += exp(x[u] - mx);
                        worst = fmax(worst, fabs(lse[((size_t)b * NH + h) * T + t] - (mx + log(sum))));
                    }
            printf("info: cuDNN's stats vs the natural-log log-sum-exp of the scaled scores: max |difference| %.2e\n",
                   worst);
        }
        std::vector<float> scratch(T);
        ref_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    }
    snprintf(what, sizeof what, "attention_backward (%s; B=%d T=%d C=%d NH=%d)", tag, B, T, C, NH);
    run_twice(
        what, {&ddqkv},
        [&] { cudaMemset(ddqkv.p, 0x7f, ddqkv.bytes); /* every element must be written */ },
        [&] {
            return use_cudnn ? attention_backward_cudnn(ddqkv.b(), ddout.b(), dqkv_in.b(), dout_.b(), dstats.f(), B, T,
                                                        C, NH, st)
                             : attention_backward(ddqkv.b(), ddatt.b(), ddout.b(), dqkv_in.b(), datt.b(), B, T, C, NH,
                                                  blas, dptrs.as<const bf16 *>(), st);
        },
        [&] {
            char w2[240];
            snprintf(w2, sizeof w2, "%s dq, dk, dv", what);
            if (reference) close(w2, get_bf16(ddqkv, 3 * n), dqkv, 1.0 / 8, 1.0 / 32, 1.0 / 32);
        });
}

int main(void) {
    int ndev = 0, dev = 0, major = 0, minor = 0;
    cudaStream_t st;
    cublasHandle_t blas;
    matmul_ctx *fused = (matmul_ctx *)calloc(1, sizeof(matmul_ctx));
    matmul_ctx *plain = (matmul_ctx *)calloc(1, sizeof(matmul_ctx));
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("no CUDA device: skipping\n");
        return 77;
    }
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    /* a blocking stream: the tests' cudaMemcpy / cudaMemset (legacy default stream) stay ordered with its kernels */
    if (cudaStreamCreate(&st) != cudaSuccess || cublasCreate(&blas) ||
        matmul_create(fused, 1) != cudaSuccess || matmul_create(plain, 0) != cudaSuccess) {
        printf("FAIL: setting up the stream, cuBLAS or cuBLASLt\n");
        return 1;
    }
    printf("device: sm_%d%d; cuDNN attention %s\n", major, minor,
#ifdef GPT2_WITH_CUDNN
           "built"
#else
           "not built"
#endif
    );

    test_encoder(3, 37, 64, 100, st);
    test_encoder(2, 1024, 768, 50257, st);
    test_layernorm(37, 64, st);
    test_layernorm(4099, 768, st);
    test_layernorm(45, 200, st);  /* 25 of 32 lanes hold a chunk */
    test_layernorm(300, 1600, st); /* the widest register layout (8 chunks a lane) */
    test_elementwise((size_t)37 * 256, st);
    test_elementwise((size_t)4099 * 3072, st);
    test_matmul(plain, "GEMM + kernels", 37, 64, 192, 1, 0, st);
    test_matmul(plain, "GEMM + kernels", 37, 64, 256, 1, 1, st);
    test_matmul(plain, "GEMM + kernels", 45, 64, 136, 0, 0, st); /* no bias (the LM head's kind) */
    test_matmul(plain, "GEMM + kernels", 128, 768, 3072, 1, 0, st);
    test_matmul(plain, "GEMM + kernels", 128, 3072, 768, 1, 1, st);
    test_matmul(fused, "GELU epilogues", 37, 64, 256, 1, 1, st);
    test_matmul(fused, "GELU epilogues", 128, 768, 3072, 1, 1, st);
    test_matmul(fused, "GELU epilogues", 128, 3072, 768, 1, 1, st);
    test_bias_backward(4099, 3072, st);
    test_bias_backward(16384, 768, st);
    test_gelu_fusion_at_scale(fused, plain, 16 * 1024, 768, st); /* GPT-2 124M's MLP at B = 16, T = 1024 */
    printf("info: cuBLASLt's GELU epilogues: %d of the fused calls had no algorithm on this device and ran as GEMM + "
           "kernels\n", fused->gelu_fallbacks);
    test_classifier(2, 5, 67, 128, st);
    test_classifier(2, 32, 50257, 50304, st);
    test_attention(0, 2, 37, 64, 4, 1, blas, st); /* T not a multiple of 8: the scalar softmax */
    test_attention(0, 2, 32, 64, 4, 1, blas, st);
    test_attention(0, 4, 32, 128, 8, 1, blas, st); /* 320 pointers: attention_pointers_kernel's second block too */
    test_attention(0, 1, 1024, 768, 12, 1, blas, st);
    test_attention(0, 4, 1024, 768, 12, 0, blas, st);
#ifdef GPT2_WITH_CUDNN
    test_attention(1, 2, 37, 64, 4, 1, blas, st);
    test_attention(1, 2, 32, 64, 4, 1, blas, st);
    test_attention(1, 4, 32, 128, 8, 1, blas, st); /* the batch and head strides with B, NH > 2 */
    test_attention(1, 1, 1024, 768, 12, 1, blas, st);
    test_attention(1, 16, 1024, 768, 12, 0, blas, st);
#else
    printf("skip: the cuDNN attention (not in this build)\n");
#endif
    matmul_destroy(fused);
    matmul_destroy(plain);
    free(fused);
    free(plain);
#ifdef GPT2_WITH_CUDNN
    attention_cudnn_destroy();
#endif
    cublasDestroy(blas);
    cudaStreamDestroy(st);
    printf("gpt2 layers: %d passed, %d failed\n", checks - failures, failures);
    return failures || !checks ? 1 : 0;
}
