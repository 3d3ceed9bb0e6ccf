/* gpt2_cpu.c's layers under ref_<name> (see gpt2_cpu_layers.h): the file itself is compiled here, so the kernel tests
   compare against exactly the layers the reference trainer runs. */
#include "gpt2_cpu_layers.h"
#define main gpt2_cpu_reference_main
#include "gpt2_cpu.c"
#undef main

void ref_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C) {
    encoder_forward(out, inp, wte, wpe, B, T, C);
}
void ref_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C) {
    encoder_backward(dwte, dwpe, dout, inp, B, T, C);
}
void ref_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                           int N, int C) {
    layernorm_forward(out, mean, rstd, inp, w, b, N, C);
}
void ref_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                            const float *mean, const float *rstd, int N, int C) {
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
void ref_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC) {
    matmul_forward(out, inp, weight, bias, N, C, OC);
}
void ref_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                         const float *weight, int N, int C, int OC) {
    matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
void ref_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    attention_forward(out, att, qkv, B, T, C, NH);
}
void ref_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B,
                            int T, int C, int NH) {
    attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH);
}
void ref_gelu_forward(float *out, const float *inp, size_t n) { gelu_forward(out, inp, n); }
void ref_gelu_backward(float *d, const float *inp, size_t n) { gelu_backward(d, inp, n); }
void ref_residual_forward(float *out, const float *a, const float *b, size_t n) { residual_forward(out, a, b, n); }
void ref_crossentropy_forward(float *losses, const float *logits, const int *targets, int N, int V, int Vp) {
    crossentropy_forward(losses, logits, targets, N, V, Vp);
}
void ref_crossentropy_softmax_backward(float *logits, const int *targets, float dloss, int N, int V, int Vp) {
    crossentropy_softmax_backward(logits, targets, dloss, N, V, Vp);
}
