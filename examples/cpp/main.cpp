// Using accel from C++: the headers are plain C with extern "C" declarations, so a C++ program includes them
// directly and links the implementation (built as C, or as CUDA by nvcc). A small RAII layer keeps it idiomatic.
// Run: mpirun -np 2 ./accel_cpp_example  (or without mpirun)
#include "accel.h"
#include "accel_amp.h"
#include "accel_collectives.h"
#include "accel_data.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

[[noreturn]] void fail(const accel *acc, const char *what) {
    throw std::runtime_error(std::string(what) + ": " + accel_last_error(acc));
}

// The Accelerator, owned: accel_shutdown runs in the destructor.
class Accelerator {
  public:
    explicit Accelerator(const accel_desc &d) {
        if (accel_init(&acc_, &d) != ACCEL_OK) {
            std::string msg = accel_last_error(&acc_);
            accel_shutdown(&acc_);
            throw std::runtime_error("accel_init: " + msg);
        }
    }
    ~Accelerator() { accel_shutdown(&acc_); }
    Accelerator(const Accelerator &) = delete;
    Accelerator &operator=(const Accelerator &) = delete;
    accel *get() { return &acc_; }
    accel *operator->() { return &acc_; }

  private:
    accel acc_{};
};

// A communicator context, owned.
class Collectives {
  public:
    explicit Collectives(Accelerator &a) {
        accel_coll_desc d{};
        if (accel_coll_create(a.get(), &d, &c_) != ACCEL_OK) fail(a.get(), "accel_coll_create");
    }
    ~Collectives() { accel_coll_destroy(c_); }
    Collectives(const Collectives &) = delete;
    Collectives &operator=(const Collectives &) = delete;
    accel_coll *get() { return c_; }

  private:
    accel_coll *c_ = nullptr;
};

// An accel_tensor view of a std::vector<float>.
accel_tensor view(std::vector<float> &v, const char *name) {
    accel_tensor t{};
    t.name = name;
    t.ptr = v.data();
    t.dtype = ACCEL_F32;
    t.ndim = 1;
    t.shape[0] = static_cast<int64_t>(v.size());
    return t;
}

}  // namespace

int main() try {
    accel_desc d{};
    d.gradient_accumulation_steps = 2;
    Accelerator acc(d);
    Collectives coll(acc);

    // This process's batches of a shuffled 20-sample dataset (batch 4), as Accelerate's prepared DataLoader.
    accel_data_shard sh{};
    accel_data_shard_desc sd{};
    sd.dataset_len = 20;
    sd.batch_size = 4;
    sd.shuffle = 1;
    sd.seed = 7;
    if (accel_data_shard_init(acc.get(), &sh, &sd) != ACCEL_OK) fail(acc.get(), "accel_data_shard_init");
    std::vector<int64_t> idx(static_cast<size_t>(accel_data_shard_batch_size(&sh)));

    std::vector<float> grad(8, 0.0f);
    accel_tensor g = view(grad, "w");
    int syncs = 0;
    int64_t n = 0;
    while (accel_data_shard_next(&sh, idx.data(), &n) == ACCEL_OK && n > 0) {
        accel_accumulate_begin(acc.get());
        for (int64_t i = 0; i < n; ++i)  // a stand-in "backward": the gradient is the mean sample index
            for (auto &x : grad) x += static_cast<float>(idx[static_cast<size_t>(i)]) / n / accel_loss_divisor(acc.get());
        if (accel_should_reduce(acc.get())) {
            if (accel_coll_all_reduce(coll.get(), grad.data(), grad.data(), grad.size(), ACCEL_F32, ACCEL_COLL_AVG) != ACCEL_OK)
                fail(acc.get(), "all_reduce");
        }
        if (acc->sync_gradients) {
            double norm = 0.0;
            if (accel_amp_clip_grad_norm(acc.get(), &g, 1, 1.0, 2.0, 0, &norm) != ACCEL_OK) fail(acc.get(), "clip");
            accel_print(acc.get(), "sync %d: grad norm before clipping %.4f\n", syncs, norm);
            std::fill(grad.begin(), grad.end(), 0.0f);
            ++syncs;
        }
        accel_accumulate_end(acc.get());
    }
    accel_print(acc.get(), "C++: %d process(es), %d optimizer steps per epoch\n", acc->num_processes, syncs);
    return 0;
} catch (const std::exception &e) {
    std::fprintf(stderr, "accel_cpp_example: %s\n", e.what());
    return 1;
}
