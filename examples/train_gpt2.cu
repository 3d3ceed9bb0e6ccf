/* train_gpt2.cu — an llm.c-style CUDA trainer that vendors accel: a small MLP language model (Bengio et al. 2003:
   the embeddings of the previous and the current token → a GELU hidden layer → next-token logits) trained on llm.c
   token shards. It is deliberately smaller than GPT-2 (no attention) so the whole file stays readable; what it
   shows is the accel plumbing around hand-written kernels:

     accel.h              process group, device selection (local rank), gradient-accumulation bookkeeping
     accel_data.h         llm.c token shards (mmap'd, validated) → each rank's (B, T+1) windows; pinned staging
     accel_amp.h          bf16 model weights from fp32 master weights (RNE kernel), clip_grad_norm on the device
     accel_collectives.h  the gradient reducer: NCCL all-reduce of the fp32 gradients (MPI/none when no NCCL/1 GPU)
     accel_ckpt.h         save_state/load_state: fp32 master weights + AdamW moments as safetensors, loader state
     cuBLAS               every GEMM (bf16 inputs, fp32 accumulation and output: cublasGemmEx)

     ./train_gpt2 --gen-shard /tmp/tiny.bin 200000 64          # a synthetic uint16 shard (vocab 64)
     mpirun -np 2 ./train_gpt2 --data /tmp/tiny.bin --vocab 64 --steps 100
     ./train_gpt2 --data fineweb_train_000001.bin --steps 1000 # a real llm.c GPT-2 shard (vocab 50257 → 50304)

   Exit status 77 when there is no CUDA device (the test suite's "skip"). */
#include "accel.h"
#include "accel_amp.h"
#include "accel_ckpt.h"
#include "accel_collectives.h"
#include "accel_data.h"
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_OK(x)                                                                                                   \
    do {                                                                                                            \
        cudaError_t e_ = (x);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                    \
            fprintf(stderr, "train_gpt2: %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));         \
            goto fail;                                                                                              \
        }                                                                                                           \
    } while (0)
#define CUBLAS_OK(x)                                                                                                 \
    do {                                                                                                            \
        cublasStatus_t s_ = (x);                                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                          \
            fprintf(stderr, "train_gpt2: %s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, (int)s_);          \
            goto fail;                                                                                              \
        }                                                                                                           \
    } while (0)
#define ACC_OK(x)                                                                                                    \
    do {                                                                                                            \
        if ((x) != ACCEL_OK) {                                                                                      \
            fprintf(stderr, "train_gpt2: %s:%d: %s: %s\n", __FILE__, __LINE__, #x, accel_last_error(&acc));         \
            goto fail;                                                                                              \
        }                                                                                                           \
    } while (0)
#define LAUNCH_OK() CUDA_OK(cudaGetLastError())

/* ------------------------------------------------------------------------------------------------ kernels */
/* X[r] = [E[prev token], E[current token]] (bf16), target[r] = next token; row r = (b, t) of the (B, T+1) windows. */
__global__ void embed_kernel(__nv_bfloat16 *X, int *target, const __nv_bfloat16 *E, const int32_t *tok, int B, int T,
                             int C, int V) {
    int r = blockIdx.x, b = r / T, t = r % T, c;
    const int32_t *row = tok + (size_t)b * (T + 1);
    int cur = row[t], prev = t > 0 ? row[t - 1] : 0;
    cur = cur < 0 || cur >= V ? 0 : cur;
    prev = prev < 0 || prev >= V ? 0 : prev;
    for (c = threadIdx.x; c < C; c += blockDim.x) {
        X[(size_t)r * 2 * C + c] = E[(size_t)prev * C + c];
        X[(size_t)r * 2 * C + C + c] = E[(size_t)cur * C + c];
    }
    if (threadIdx.x == 0) target[r] = row[t + 1] < 0 || row[t + 1] >= V ? 0 : row[t + 1];
}

__device__ float gelu_tanh(float x) {
    const float k = 0.7978845608f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
__device__ float gelu_tanh_grad(float x) {
    const float k = 0.7978845608f;
    float u = k * (x + 0.044715f * x * x * x), th = tanhf(u);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

/* H[r, j] += b[j]; A = bf16(gelu(H)) */
__global__ void bias_gelu_kernel(float *H, __nv_bfloat16 *A, const __nv_bfloat16 *bias, size_t n, int cols) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    H[i] += __bfloat162float(bias[i % cols]);
    A[i] = __float2bfloat16(gelu_tanh(H[i]));
}
__global__ void bias_add_kernel(float *Y, const __nv_bfloat16 *bias, size_t n, int cols) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) Y[i] += __bfloat162float(bias[i % cols]);
}

/* One block per row: loss[r] = -log softmax(logits)[target]; dlogits = (softmax - onehot) * g, as bf16. */
__global__ void softmax_ce_kernel(const float *logits, const int *target, float *loss, __nv_bfloat16 *dlogits, int V,
                                  float g) {
    __shared__ float red[256];
    const float *x = logits + (size_t)blockIdx.x * V;
    float mx = -INFINITY, sum = 0.0f;
    int i, tid = threadIdx.x;
    for (i = tid; i < V; i += blockDim.x) mx = fmaxf(mx, x[i]);
    red[tid] = mx;
    __syncthreads();
    for (i = blockDim.x / 2; i > 0; i >>= 1) {
        if (tid < i) red[tid] = fmaxf(red[tid], red[tid + i]);
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    for (i = tid; i < V; i += blockDim.x) sum += expf(x[i] - mx);
    red[tid] = sum;
    __syncthreads();
    for (i = blockDim.x / 2; i > 0; i >>= 1) {
        if (tid < i) red[tid] += red[tid + i];
        __syncthreads();
    }
    sum = red[0];
    for (i = tid; i < V; i += blockDim.x) {
        float p = expf(x[i] - mx) / sum;
        dlogits[(size_t)blockIdx.x * V + i] = __float2bfloat16((p - (i == target[blockIdx.x] ? 1.0f : 0.0f)) * g);
    }
    if (tid == 0) loss[blockIdx.x] = logf(sum) + mx - x[target[blockIdx.x]];
}

/* dbias[j] += sum_r D[r, j] */
__global__ void bias_grad_kernel(float *dbias, const __nv_bfloat16 *D, int rows, int cols) {
    int j = blockIdx.x * blockDim.x + threadIdx.x, r;
    float s = 0.0f;
    if (j >= cols) return;
    for (r = 0; r < rows; ++r) s += __bfloat162float(D[(size_t)r * cols + j]);
    dbias[j] += s;
}
/* dH = bf16(dA * gelu'(H)) */
__global__ void gelu_back_kernel(__nv_bfloat16 *dH, const float *dA, const float *H, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dH[i] = __float2bfloat16(dA[i] * gelu_tanh_grad(H[i]));
}
/* dE[prev] += dX[r, :C]; dE[cur] += dX[r, C:] */
__global__ void embed_back_kernel(float *dE, const float *dX, const int32_t *tok, int B, int T, int C, int V) {
    int r = blockIdx.x, b = r / T, t = r % T, c;
    const int32_t *row = tok + (size_t)b * (T + 1);
    int cur = row[t], prev = t > 0 ? row[t - 1] : 0;
    cur = cur < 0 || cur >= V ? 0 : cur;
    prev = prev < 0 || prev >= V ? 0 : prev;
    for (c = threadIdx.x; c < C; c += blockDim.x) {
        atomicAdd(&dE[(size_t)prev * C + c], dX[(size_t)r * 2 * C + c]);
        atomicAdd(&dE[(size_t)cur * C + c], dX[(size_t)r * 2 * C + C + c]);
    }
}
/* torch.optim.AdamW */
__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                             float eps, float wd, float bc1, float bc2) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    p[i] -= lr * wd * p[i];
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] -= lr * (m[i] / bc1) / (sqrtf(v[i] / bc2) + eps);
}

/* --------------------------------------------------------------------------------------------- GEMM helpers */
/* Row-major GEMMs on cuBLAS (column-major): bf16 inputs, fp32 output, fp32 accumulation. beta = 1 accumulates. */
static cublasStatus_t mm_nt(cublasHandle_t h, float *C, const __nv_bfloat16 *A, const __nv_bfloat16 *B, int M, int N,
                            int K, float beta) { /* C[M,N] = A[M,K] · B[N,K]^T */
    float one = 1.0f;
    return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_16BF, K, A, CUDA_R_16BF, K, &beta, C,
                        CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
static cublasStatus_t mm_nn(cublasHandle_t h, float *C, const __nv_bfloat16 *A, const __nv_bfloat16 *B, int M, int N,
                            int K, float beta) { /* C[M,N] = A[M,K] · B[K,N] */
    float one = 1.0f;
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_16BF, N, A, CUDA_R_16BF, K, &beta, C,
                        CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
static cublasStatus_t mm_tn(cublasHandle_t h, float *C, const __nv_bfloat16 *A, const __nv_bfloat16 *B, int M, int N,
                            int K, float beta) { /* C[M,N] = A[K,M]^T · B[K,N] */
    float one = 1.0f;
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, N, M, K, &one, B, CUDA_R_16BF, N, A, CUDA_R_16BF, M, &beta, C,
                        CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static unsigned grid(size_t n, unsigned block) { return (unsigned)((n + block - 1) / block); }

/* ----------------------------------------------------------------------------------------- synthetic shard */
/* A learnable uint16 llm.c shard: a first-order Markov chain where each token has 2 likely successors. */
static int gen_shard(const char *path, long ntok, int vocab) {
    int32_t header[256];
    FILE *f = fopen(path, "wb");
    uint64_t s = 12345;
    long i;
    uint16_t tok = 1;
    if (!f || vocab < 2 || vocab > 65535 || ntok < 2) {
        fprintf(stderr, "train_gpt2: --gen-shard: bad arguments or cannot write %s\n", path);
        if (f) fclose(f);
        return 1;
    }
    memset(header, 0, sizeof header);
    header[0] = ACCEL_DATA_GPT2_MAGIC;
    header[1] = ACCEL_DATA_GPT2_VERSION;
    header[2] = (int32_t)ntok;
    fwrite(header, sizeof header, 1, f);
    for (i = 0; i < ntok; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        fwrite(&tok, sizeof tok, 1, f);
        tok = (uint16_t)(((uint32_t)tok * 7u + ((s >> 33) & 1u ? 3u : 11u)) % (uint32_t)vocab);
    }
    if (fclose(f) != 0) return 1;
    printf("wrote %s: %ld tokens, vocab %d\n", path, ntok, vocab);
    return 0;
}

/* ------------------------------------------------------------------------------------------- checkpoints */
typedef struct trainer_state {
    int64_t step;
    uint8_t loader[ACCEL_DATA_SEQ_STATE_BYTES];
} trainer_state;
typedef struct ckpt_user {
    trainer_state st;
    accel_data_seq_loader *ld;
    int loaded;
} ckpt_user;
static accel_result save_trainer(void *user, void *buf, size_t cap, size_t *written) {
    ckpt_user *u = (ckpt_user *)user;
    size_t w = 0;
    accel_result r;
    if (cap < sizeof u->st) { *written = sizeof u->st; return ACCEL_OK; }
    if ((r = accel_data_seq_state_save(u->ld, u->st.loader, sizeof u->st.loader, &w)) != ACCEL_OK) return r;
    memcpy(buf, &u->st, sizeof u->st);
    *written = sizeof u->st;
    return ACCEL_OK;
}
static accel_result load_trainer(void *user, const void *buf, size_t n) {
    ckpt_user *u = (ckpt_user *)user;
    if (n != sizeof u->st) return ACCEL_ERR_FORMAT;
    memcpy(&u->st, buf, n);
    u->loaded = 1;
    return ACCEL_OK;
}

/* ----------------------------------------------------------------------------------------------------- main */
int main(int argc, char **argv) {
    const char *files[16], *ckpt_dir = NULL, *loss_file = NULL;
    int nfiles = 0, steps = 50, B = 8, T = 64, accum = 1, V = 50304, C = 64, H = 256, print_every = 10, resume = 0;
    int ckpt_every = 0, i, ndev = 0, k;
    float lr = 3e-3f, clip = 1.0f, wd = 0.0f;
    uint64_t seed = 1337;
    accel acc;
    accel_desc desc;
    accel_data_seq_loader ld;
    accel_data_seq_desc sd;
    accel_data_stager stager;
    accel_coll *coll = NULL;
    accel_coll_reducer *red = NULL;
    accel_ckpt *ck = NULL;
    ckpt_user cu;
    cublasHandle_t blas = NULL;
    accel_tensor grads[5], params[5], moms[10];
    size_t off[6], nparam, rows;
    float *master = NULL, *grad = NULL, *m = NULL, *v = NULL, *H1 = NULL, *logits = NULL, *dA = NULL, *dX = NULL;
    float *loss_d = NULL, *loss_h = NULL;
    __nv_bfloat16 *model = NULL, *X = NULL, *A1 = NULL, *dlog = NULL, *dH = NULL;
    int *target = NULL;
    int32_t *tok_host = NULL;
    FILE *lf = NULL;
    int inited = 0, have_ld = 0, have_stager = 0, rc = 1;
    double t0;

    for (i = 1; i < argc; ++i) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--gen-shard") && i + 3 < argc) return gen_shard(argv[i + 1], atol(argv[i + 2]), atoi(argv[i + 3]));
#define ARG(name) (!strcmp(a, name) && val && (++i, 1))
        if (ARG("--data")) { if (nfiles < 16) files[nfiles++] = val; }
        else if (ARG("--steps")) steps = atoi(val);
        else if (ARG("--batch")) B = atoi(val);
        else if (ARG("--seq")) T = atoi(val);
        else if (ARG("--accum")) accum = atoi(val);
        else if (ARG("--vocab")) V = atoi(val);
        else if (ARG("--emb")) C = atoi(val);
        else if (ARG("--hidden")) H = atoi(val);
        else if (ARG("--lr")) lr = (float)atof(val);
        else if (ARG("--clip")) clip = (float)atof(val);
        else if (ARG("--weight-decay")) wd = (float)atof(val);
        else if (ARG("--seed")) seed = strtoull(val, NULL, 10);
        else if (ARG("--print-every")) print_every = atoi(val);
        else if (ARG("--checkpoint-dir")) ckpt_dir = val;
        else if (ARG("--checkpoint-every")) ckpt_every = atoi(val);
        else if (ARG("--loss-file")) loss_file = val;
        else if (!strcmp(a, "--resume")) resume = 1;
        else {
            fprintf(stderr, "usage: train_gpt2 --data SHARD [--data SHARD ...] [--steps N --batch B --seq T --accum A "
                            "--vocab V --emb C --hidden H --lr X --clip X --weight-decay X --seed N --print-every N "
                            "--checkpoint-dir D --checkpoint-every N --resume --loss-file F]\n"
                            "       train_gpt2 --gen-shard PATH NTOKENS VOCAB\n");
            return 2;
        }
#undef ARG
    }
    if (nfiles == 0 || steps < 1 || B < 1 || T < 1 || accum < 1 || V < 2 || C < 1 || H < 1 || (resume && !ckpt_dir)) {
        fprintf(stderr, "train_gpt2: need --data and positive sizes (--resume needs --checkpoint-dir)\n");
        return 2;
    }
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        (void)cudaGetLastError();
        printf("train_gpt2: no CUDA device: skipping\n");
        return 77;
    }

    memset(&desc, 0, sizeof desc);
    desc.mixed_precision = ACCEL_PRECISION_BF16;
    desc.gradient_accumulation_steps = accum;
    if (accel_init(&acc, &desc) != ACCEL_OK) {
        fprintf(stderr, "train_gpt2: accel_init: %s\n", accel_last_error(&acc));
        accel_shutdown(&acc);
        return 1;
    }
    inited = 1;
    accum = acc.gradient_accumulation_steps;
    if (acc.device < 0) {
        fprintf(stderr, "train_gpt2: accel chose the CPU (ACCELERATE_USE_CPU?); this trainer needs a GPU\n");
        goto fail;
    }

    /* data: each rank's (B, T+1) windows of every global batch; staged to the device through pinned memory */
    memset(&sd, 0, sizeof sd);
    sd.files = files;
    sd.num_files = nfiles;
    sd.batch_size = B;
    sd.seq_len = T;
    sd.shuffle = 1;
    sd.seed = seed;
    ACC_OK(accel_data_seq_init(&acc, &ld, &sd));
    have_ld = 1;
    if (accel_data_seq_len(&ld) < 1) {
        fprintf(stderr, "train_gpt2: the shards hold less than one global batch\n");
        goto fail;
    }
    ACC_OK(accel_data_stager_init(&acc, &stager, (size_t)B * (T + 1) * sizeof(int32_t)));
    have_stager = 1;

    /* parameters, one flat buffer each: E [V,C], W1 [H,2C], b1 [H], W2 [V,H], b2 [V] */
    off[0] = 0;
    off[1] = off[0] + (size_t)V * C;
    off[2] = off[1] + (size_t)H * 2 * C;
    off[3] = off[2] + (size_t)H;
    off[4] = off[3] + (size_t)V * H;
    off[5] = off[4] + (size_t)V;
    nparam = off[5];
    rows = (size_t)B * T;
    CUDA_OK(cudaMalloc((void **)&master, nparam * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&grad, nparam * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&m, nparam * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&v, nparam * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&model, nparam * sizeof(__nv_bfloat16)));
    CUDA_OK(cudaMalloc((void **)&X, rows * 2 * C * sizeof(__nv_bfloat16)));
    CUDA_OK(cudaMalloc((void **)&H1, rows * H * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&A1, rows * H * sizeof(__nv_bfloat16)));
    CUDA_OK(cudaMalloc((void **)&logits, rows * V * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&dlog, rows * V * sizeof(__nv_bfloat16)));
    CUDA_OK(cudaMalloc((void **)&dA, rows * H * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&dH, rows * H * sizeof(__nv_bfloat16)));
    CUDA_OK(cudaMalloc((void **)&dX, rows * 2 * C * sizeof(float)));
    CUDA_OK(cudaMalloc((void **)&target, rows * sizeof(int)));
    CUDA_OK(cudaMalloc((void **)&loss_d, rows * sizeof(float)));
    loss_h = (float *)malloc(rows * sizeof(float));
    tok_host = (int32_t *)malloc((size_t)B * (T + 1) * sizeof(int32_t));
    if (!loss_h || !tok_host) goto fail;
    {   /* init on the host from the seed (identical on every rank): uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
        float *h = (float *)malloc(nparam * sizeof(float));
        uint64_t s = seed;
        size_t j;
        if (!h) goto fail;
        for (j = 0; j < nparam; ++j) {
            float bound = j < off[1] ? 1.0f : j < off[3] ? 1.0f / sqrtf(2.0f * C) : 1.0f / sqrtf((float)H);
            uint64_t z = (s += 0x9E3779B97F4A7C15ull);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
            h[j] = ((float)(z >> 40) / 16777216.0f * 2.0f - 1.0f) * bound;
        }
        if (cudaMemcpy(master, h, nparam * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) { free(h); goto fail; }
        free(h);
    }
    CUDA_OK(cudaMemset(grad, 0, nparam * sizeof(float)));
    CUDA_OK(cudaMemset(m, 0, nparam * sizeof(float)));
    CUDA_OK(cudaMemset(v, 0, nparam * sizeof(float)));
    {
        static const char *names[5] = {"wte", "fc.weight", "fc.bias", "lm_head.weight", "lm_head.bias"};
        static const char *mn[10] = {"wte.exp_avg", "fc.weight.exp_avg", "fc.bias.exp_avg", "lm_head.weight.exp_avg",
                                     "lm_head.bias.exp_avg", "wte.exp_avg_sq", "fc.weight.exp_avg_sq",
                                     "fc.bias.exp_avg_sq", "lm_head.weight.exp_avg_sq", "lm_head.bias.exp_avg_sq"};
        for (k = 0; k < 5; ++k) {
            memset(&grads[k], 0, sizeof grads[k]);
            grads[k].name = names[k];
            grads[k].ptr = grad + off[k];
            grads[k].dtype = ACCEL_F32;
            grads[k].ndim = 1;
            grads[k].shape[0] = (int64_t)(off[k + 1] - off[k]);
            params[k] = grads[k];
            params[k].ptr = master + off[k];
            moms[k] = grads[k];
            moms[k].name = mn[k];
            moms[k].ptr = m + off[k];
            moms[k + 5] = grads[k];
            moms[k + 5].name = mn[k + 5];
            moms[k + 5].ptr = v + off[k];
        }
    }

    /* gradient reducer: NCCL on GPUs (MPI / none otherwise), averaged, only on sync steps */
    {
        accel_coll_desc cd;
        memset(&cd, 0, sizeof cd);
        ACC_OK(accel_coll_create(&acc, &cd, &coll));
        ACC_OK(accel_coll_reducer_create(coll, NULL, &red));
        ACC_OK(accel_coll_reducer_add(red, grads, 5));
        ACC_OK(accel_coll_reducer_finalize(red));
    }

    /* checkpoints */
    memset(&cu, 0, sizeof cu);
    cu.ld = &ld;
    if (ckpt_dir) {
        accel_ckpt_desc kd;
        memset(&kd, 0, sizeof kd);
        kd.project_dir = ckpt_dir;
        kd.automatic_checkpoint_naming = 1;
        kd.total_limit = 2;
        ACC_OK(accel_ckpt_create(&acc, &kd, &ck));
        ACC_OK(accel_ckpt_register_model(ck, params, 5));
        ACC_OK(accel_ckpt_register_optimizer(ck, moms, 10));
        ACC_OK(accel_ckpt_register(ck, "trainer", save_trainer, load_trainer, &cu));
        if (resume) {
            ACC_OK(accel_ckpt_load_state(ck, NULL));
            if (!cu.loaded) goto fail;
            ACC_OK(accel_data_seq_state_load(&ld, cu.st.loader, sizeof cu.st.loader));
            accel_print(&acc, "resumed at step %lld\n", (long long)cu.st.step);
        }
    }
    ACC_OK(accel_amp_master_to_model(&acc, master, model, ACCEL_BF16, nparam, NULL));

    CUBLAS_OK(cublasCreate(&blas));
    CUBLAS_OK(cublasSetStream(blas, (cudaStream_t)acc.stream));
    if (loss_file && acc.is_main_process && !(lf = fopen(loss_file, resume ? "a" : "w"))) goto fail;
    accel_print(&acc, "train_gpt2: %d GPU(s), B=%d T=%d accum=%d, vocab %d, %zu parameters, %lld batches/epoch\n",
                acc.num_processes, B, T, accum, V, nparam, (long long)accel_data_seq_len(&ld));

    t0 = accel_now();
    {
        double loss_acc = 0.0;
        const float g = 1.0f / ((float)rows * accel_loss_divisor(&acc));
        cudaStream_t st = (cudaStream_t)acc.stream;
        while (cu.st.step < steps) {
            int got = 0;
            void *hbuf, *dbuf;
            const int32_t *tok;
            ACC_OK(accel_data_stager_host(&stager, &hbuf));
            ACC_OK(accel_data_seq_next(&ld, (int32_t *)hbuf, &got));
            if (!got) continue; /* end of epoch: the loader advanced it */
            ACC_OK(accel_data_stager_submit(&stager, &dbuf));
            tok = (const int32_t *)dbuf;
            accel_accumulate_begin(&acc);
            /* forward */
            embed_kernel<<<(unsigned)rows, 64, 0, st>>>(X, target, model + off[0], tok, B, T, C, V);
            LAUNCH_OK();
            CUBLAS_OK(mm_nt(blas, H1, X, model + off[1], (int)rows, H, 2 * C, 0.0f));
            bias_gelu_kernel<<<grid(rows * H, 256), 256, 0, st>>>(H1, A1, model + off[2], rows * H, H);
            LAUNCH_OK();
            CUBLAS_OK(mm_nt(blas, logits, A1, model + off[3], (int)rows, V, H, 0.0f));
            bias_add_kernel<<<grid(rows * V, 256), 256, 0, st>>>(logits, model + off[4], rows * V, V);
            LAUNCH_OK();
            softmax_ce_kernel<<<(unsigned)rows, 256, 0, st>>>(logits, target, loss_d, dlog, V, g);
            LAUNCH_OK();
            /* backward (gradients accumulate: beta = 1) */
            CUBLAS_OK(mm_tn(blas, grad + off[3], dlog, A1, V, H, (int)rows, 1.0f));
            bias_grad_kernel<<<grid((size_t)V, 256), 256, 0, st>>>(grad + off[4], dlog, (int)rows, V);
            LAUNCH_OK();
            CUBLAS_OK(mm_nn(blas, dA, dlog, model + off[3], (int)rows, H, V, 0.0f));
            gelu_back_kernel<<<grid(rows * H, 256), 256, 0, st>>>(dH, dA, H1, rows * H);
            LAUNCH_OK();
            CUBLAS_OK(mm_tn(blas, grad + off[1], dH, X, H, 2 * C, (int)rows, 1.0f));
            bias_grad_kernel<<<grid((size_t)H, 256), 256, 0, st>>>(grad + off[2], dH, (int)rows, H);
            LAUNCH_OK();
            CUBLAS_OK(mm_nn(blas, dX, dH, model + off[1], (int)rows, 2 * C, H, 0.0f));
            embed_back_kernel<<<(unsigned)rows, 64, 0, st>>>(grad + off[0], dX, tok, B, T, C, V);
            LAUNCH_OK();
            CUDA_OK(cudaMemcpyAsync(loss_h, loss_d, rows * sizeof(float), cudaMemcpyDeviceToHost, st));
            CUDA_OK(cudaStreamSynchronize(st));
            {
                double s = 0.0;
                size_t r;
                for (r = 0; r < rows; ++r) s += loss_h[r];
                loss_acc += s / (double)rows / accel_loss_divisor(&acc);
            }
            if (accel_should_reduce(&acc)) {
                for (k = 4; k >= 0; --k) ACC_OK(accel_coll_grad_ready(red, k)); /* backward order */
                ACC_OK(accel_coll_reducer_wait(red));
            }
            if (acc.sync_gradients) {
                double norm = 0.0, lossv = loss_acc;
                int64_t t = acc.optimizer_steps + 1;
                float cur_lr = lr * (cu.st.step < 10 ? (float)(cu.st.step + 1) / 10.0f : 1.0f);
                if (clip > 0) ACC_OK(accel_amp_clip_grad_norm(&acc, grads, 5, clip, 2.0, 0, &norm));
                adamw_kernel<<<grid(nparam, 256), 256, 0, st>>>(master, grad, m, v, nparam, cur_lr, 0.9f, 0.95f, 1e-8f,
                                                                wd, 1.0f - powf(0.9f, (float)t),
                                                                1.0f - powf(0.95f, (float)t));
                LAUNCH_OK();
                ACC_OK(accel_amp_master_to_model(&acc, master, model, ACCEL_BF16, nparam, NULL));
                CUDA_OK(cudaMemsetAsync(grad, 0, nparam * sizeof(float), st));
                accel_optimizer_step_done(&acc, 0);
                (void)accel_scheduler_steps(&acc, 0);
                ACC_OK(accel_host_allreduce_f64(&acc, &lossv, 1, ACCEL_HOST_SUM)); /* a host scalar: core MPI */
                lossv /= acc.num_processes;
                loss_acc = 0.0;
                cu.st.step++;
                if (lf) fprintf(lf, "%lld %.6f %.6g\n", (long long)cu.st.step, lossv, cur_lr);
                if (print_every > 0 && (cu.st.step % print_every == 0 || cu.st.step == steps)) {
                    double el = accel_now() - t0;
                    accel_print(&acc, "step %4lld/%d | loss %.4f | lr %.3g | norm %.3f | %.0f tok/s\n",
                                (long long)cu.st.step, steps, lossv, cur_lr, norm,
                                (double)cu.st.step * B * T * accum * acc.num_processes / (el > 0 ? el : 1e-9));
                }
                if (ck && ckpt_every > 0 && cu.st.step % ckpt_every == 0) ACC_OK(accel_ckpt_save_state(ck, NULL, NULL, 0));
            }
            accel_accumulate_end(&acc);
        }
    }
    CUDA_OK(cudaDeviceSynchronize());
    rc = 0;
fail:
    if (lf) fclose(lf);
    if (blas) cublasDestroy(blas);
    accel_ckpt_destroy(ck);
    accel_coll_reducer_destroy(red);
    accel_coll_destroy(coll);
    if (have_stager) accel_data_stager_deinit(&stager);
    if (have_ld) accel_data_seq_deinit(&ld);
    cudaFree(master); cudaFree(grad); cudaFree(m); cudaFree(v); cudaFree(model); cudaFree(X); cudaFree(H1);
    cudaFree(A1); cudaFree(logits); cudaFree(dlog); cudaFree(dA); cudaFree(dH); cudaFree(dX); cudaFree(target);
    cudaFree(loss_d);
    free(loss_h);
    free(tok_host);
    if (rc && inited && acc.num_processes > 1) exit(rc); /* peers may wait in a collective: let the launcher end it */
    if (inited) accel_shutdown(&acc);
    return rc;
}
