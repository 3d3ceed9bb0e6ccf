/* gpt2_cpu.c's layers (the float32 oracle of the CUDA trainer) for the kernel tests: gpt2_cpu_layers.c compiles
   gpt2_cpu.c itself (its main renamed) and exports each layer under ref_<name>, same arguments. */
#ifndef GPT2_CPU_LAYERS_H
#define GPT2_CPU_LAYERS_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
void ref_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C);
void ref_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C);
void ref_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                           int N, int C);
void ref_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                            const float *mean, const float *rstd, int N, int C);
void ref_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC);
void ref_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                         const float *weight, int N, int C, int OC);
void ref_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
void ref_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B,
                            int T, int C, int NH);
void ref_gelu_forward(float *out, const float *inp, size_t n);
void ref_gelu_backward(float *d, const float *inp, size_t n);
void ref_residual_forward(float *out, const float *a, const float *b, size_t n);
void ref_crossentropy_forward(float *losses, const float *logits, const int *targets, int N, int V, int Vp);
void ref_crossentropy_softmax_backward(float *logits, const int *targets, float dloss, int N, int V, int Vp);
#ifdef __cplusplus
}
#endif
#endif
