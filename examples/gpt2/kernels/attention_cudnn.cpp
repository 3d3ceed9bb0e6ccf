/* kernels/attention_cudnn.cpp — attention_cudnn.h's implementation: cuDNN frontend graphs for the fused attention
   forward and backward, built once per shape and cached. Compiled by the host C++ compiler (C++17) with
   CUDNN_FRONTEND_SKIP_JSON_LIB (no plan serialization needed). One handle, one growing workspace, one stream at a
   time: the trainer calls it from one thread on its stream. */
#include "attention_cudnn.h"
#include <cmath>
#include <cudnn_frontend.h>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#if !defined(CUDNN_FRONTEND_VERSION) || CUDNN_FRONTEND_VERSION < 11300
#error "attention_cudnn.cpp needs the cuDNN frontend 1.13 or later (SDPA generate_stats, deterministic backward)"
#endif

namespace fe = cudnn_frontend;

namespace {
enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

struct shape_key {
    int B, T, NH, HS, backward;
    bool operator<(const shape_key &o) const {
        return std::tie(B, T, NH, HS, backward) < std::tie(o.B, o.T, o.NH, o.HS, o.backward);
    }
};

struct cudnn_state {
    cudnnHandle_t handle = nullptr;
    std::map<shape_key, std::shared_ptr<fe::graph::Graph>> graphs;
    void *ws = nullptr;
    int64_t ws_size = 0;
    std::string error;
};
cudnn_state S;

int fail(const std::string &what) {
    S.error = what;
    return -1;
}
int check(fe::error_t e, const char *stage, const shape_key &k) {
    if (e.is_good()) return 0;
    return fail(std::string(k.backward ? "backward" : "forward") + " graph (B=" + std::to_string(k.B) +
                " T=" + std::to_string(k.T) + " NH=" + std::to_string(k.NH) + " HS=" + std::to_string(k.HS) + "), " +
                stage + ": " + e.get_message());
}

int prepare(cudaStream_t st) {
    cudnnStatus_t s;
    if (!S.handle && (s = cudnnCreate(&S.handle)) != CUDNN_STATUS_SUCCESS)
        return fail(std::string("cudnnCreate: ") + cudnnGetErrorString(s));
    if ((s = cudnnSetStream(S.handle, st)) != CUDNN_STATUS_SUCCESS)
        return fail(std::string("cudnnSetStream: ") + cudnnGetErrorString(s));
    return 0;
}

/* The cached graph of a shape, built on first use. */
int graph_for(const shape_key &k, std::shared_ptr<fe::graph::Graph> &out) {
    auto it = S.graphs.find(k);
    if (it != S.graphs.end()) {
        out = it->second;
        return 0;
    }
    sdpa_layout L = sdpa_layout_of(k.B, k.T, k.NH, k.HS);
    std::vector<int64_t> dim(L.dim, L.dim + 4), qkv_stride(L.qkv_stride, L.qkv_stride + 4);
    std::vector<int64_t> o_stride(L.o_stride, L.o_stride + 4), stats_dim(L.stats_dim, L.stats_dim + 4);
    std::vector<int64_t> stats_stride(L.stats_stride, L.stats_stride + 4);
    float scale = 1.0f / std::sqrt((float)k.HS);
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto tensor = [&](const char *name, int64_t uid, const std::vector<int64_t> &d, const std::vector<int64_t> &s) {
        return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(d).set_stride(s));
    };
    auto q = tensor("Q", UID_Q, dim, qkv_stride), kt = tensor("K", UID_K, dim, qkv_stride);
    auto v = tensor("V", UID_V, dim, qkv_stride);
    if (!k.backward) {
        auto opts = fe::graph::SDPA_attributes()
                        .set_name("attention")
                        .set_generate_stats(true)
                        .set_causal_mask(true)
                        .set_attn_scale(scale);
        auto [o, stats] = g->sdpa(q, kt, v, opts);
        o->set_output(true).set_uid(UID_O).set_dim(dim).set_stride(o_stride);
        stats->set_output(true).set_uid(UID_STATS).set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dim).set_stride(
            stats_stride);
    } else {
        auto o = tensor("O", UID_O, dim, o_stride), d_o = tensor("dO", UID_DO, dim, o_stride);
        auto stats = g->tensor(fe::graph::Tensor_attributes()
                                   .set_name("Stats")
                                   .set_uid(UID_STATS)
                                   .set_dim(stats_dim)
                                   .set_stride(stats_stride)
                                   .set_data_type(fe::DataType_t::FLOAT));
        /* deterministic: without it the dq accumulation order (and so the bits) can change from run to run */
        auto opts = fe::graph::SDPA_backward_attributes()
                        .set_name("attention_backward")
                        .set_causal_mask(true)
                        .set_attn_scale(scale)
                        .set_deterministic_algorithm(true);
        auto [dq, dk, dv] = g->sdpa_backward(q, kt, v, o, d_o, stats, opts);
        dq->set_output(true).set_uid(UID_DQ).set_dim(dim).set_stride(qkv_stride);
        dk->set_output(true).set_uid(UID_DK).set_dim(dim).set_stride(qkv_stride);
        dv->set_output(true).set_uid(UID_DV).set_dim(dim).set_stride(qkv_stride);
    }
    int64_t ws = 0;
    if (check(g->validate(), "validate", k) || check(g->build_operation_graph(S.handle), "build_operation_graph", k) ||
        check(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", k) ||
        check(g->check_support(S.handle), "check_support", k) || check(g->build_plans(S.handle), "build_plans", k) ||
        check(g->get_workspace_size(ws), "get_workspace_size", k))
        return -1;
    if (ws > S.ws_size) { /* grows when a new shape needs more (the first forward and backward): the old one may
                             still be in use by queued work, so wait for the device before freeing it */
        cudaError_t e = cudaDeviceSynchronize();
        if (e == cudaSuccess && S.ws) e = cudaFree(S.ws);
        S.ws = nullptr;
        S.ws_size = 0;
        if (e == cudaSuccess) e = cudaMalloc(&S.ws, (size_t)ws);
        if (e != cudaSuccess) {
            S.ws = nullptr;
            return fail(std::string("workspace of ") + std::to_string(ws) + " bytes: " + cudaGetErrorString(e));
        }
        S.ws_size = ws;
    }
    S.graphs[k] = g;
    out = g;
    return 0;
}

int run(const shape_key &k, std::unordered_map<int64_t, void *> &pack, cudaStream_t st) {
    std::shared_ptr<fe::graph::Graph> g;
    if (prepare(st) || graph_for(k, g)) return -1;
    return check(g->execute(S.handle, pack, S.ws), "execute", k);
}
} // namespace

int attention_cudnn_prepare(int B, int T, int NH, int HS) {
    std::shared_ptr<fe::graph::Graph> g;
    return prepare(0) || graph_for(shape_key{B, T, NH, HS, 0}, g) || graph_for(shape_key{B, T, NH, HS, 1}, g) ? -1 : 0;
}

int attention_cudnn_forward(void *out, float *stats, const void *qkv, int B, int T, int NH, int HS, cudaStream_t st) {
    sdpa_layout L = sdpa_layout_of(B, T, NH, HS);
    char *q = (char *)qkv;
    std::unordered_map<int64_t, void *> pack = {{UID_Q, q},
                                                {UID_K, q + L.k_offset * 2},
                                                {UID_V, q + L.v_offset * 2},
                                                {UID_O, out},
                                                {UID_STATS, stats}};
    return run(shape_key{B, T, NH, HS, 0}, pack, st);
}

int attention_cudnn_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const float *stats,
                             int B, int T, int NH, int HS, cudaStream_t st) {
    sdpa_layout L = sdpa_layout_of(B, T, NH, HS);
    char *q = (char *)qkv, *dq = (char *)dqkv;
    std::unordered_map<int64_t, void *> pack = {
        {UID_Q, q},           {UID_K, q + L.k_offset * 2},   {UID_V, q + L.v_offset * 2},
        {UID_O, (void *)out}, {UID_DO, (void *)dout},        {UID_STATS, (void *)stats},
        {UID_DQ, dq},         {UID_DK, dq + L.k_offset * 2}, {UID_DV, dq + L.v_offset * 2}};
    return run(shape_key{B, T, NH, HS, 1}, pack, st);
}

const char *attention_cudnn_error(void) { return S.error.c_str(); }

void attention_cudnn_destroy(void) {
    S.graphs.clear();
    if (S.ws) cudaFree(S.ws);
    if (S.handle) cudnnDestroy(S.handle);
    S.ws = nullptr;
    S.ws_size = 0;
    S.handle = nullptr;
}
