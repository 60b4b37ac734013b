// The few c10d calls deltarl needs, behind a C interface: a TCPStore client (or server),
// a ProcessGroupGloo on it, and four collectives. Every entry point catches C++ exceptions
// and returns them as a malloc'ed message (NULL on success) that Rust frees with
// deltarl_c10d_free_message: no exception crosses into Rust.
//
// Tensors arrive as tch's handles, which are `at::Tensor*` (torch-sys' `typedef
// torch::Tensor *tensor`).

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <ATen/DeviceAccelerator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef DELTARL_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef DELTARL_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace {

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> cpu;   // gloo: CPU tensors
  c10::intrusive_ptr<c10d::Backend> cuda;  // nccl: CUDA tensors (when built with it)
  int rank;
  int world;
  std::chrono::milliseconds timeout;
  bool aborted = false;  // deltarl_c10d_abort closed the backends
};

char* message(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) {
    std::memcpy(out, s.c_str(), s.size() + 1);
  }
  return out;
}

template <typename F>
char* guarded(F&& f) {
  try {
    f();
    return nullptr;
  } catch (const std::exception& e) {
    return message(e.what());
  } catch (...) {
    return message("unknown C++ exception");
  }
}

// The backend that moves tensors on `t`'s device.
c10d::Backend& backend_for(Group* g, const at::Tensor& t) {
  if (g->aborted) {
    throw std::runtime_error("this rank already reported a failure and closed its connections");
  }
  if (t.is_cuda()) {
    if (!g->cuda) {
      throw std::runtime_error(
          "a CUDA tensor, but this build of deltarl has no NCCL backend (build with the "
          "`nccl` feature against a CUDA torch wheel)");
    }
    return *g->cuda;
  }
  if (!g->cpu) {
    throw std::runtime_error(
        "this build of deltarl has no gloo backend (its headers were missing at build time: "
        "install Debian's libgloo-dev and rebuild)");
  }
  return *g->cpu;
}

void wait(Group* g, const c10::intrusive_ptr<c10d::Work>& w) {
  w->wait(g->timeout);
}

}  // namespace

extern "C" {

int deltarl_c10d_has_gloo() {
#ifdef DELTARL_GLOO
  return 1;
#else
  return 0;
#endif
}

int deltarl_c10d_has_nccl() {
#ifdef DELTARL_NCCL
  return 1;
#else
  return 0;
#endif
}

void deltarl_c10d_free_message(char* m) { std::free(m); }

// Connects to the store at host:port (serving it when `is_server`), keys under `prefix`,
// and builds the process group of `world` ranks. `timeout_ms` bounds every wait.
char* deltarl_c10d_new(const char* host, uint16_t port, int is_server, const char* prefix,
                       int rank, int world, int64_t timeout_ms, int with_cuda,
                       void** out) {
  return guarded([&] {
    auto g = std::make_unique<Group>();
    g->rank = rank;
    g->world = world;
    g->timeout = std::chrono::milliseconds(timeout_ms);
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = is_server != 0;
    opts.numWorkers = world;
    opts.waitWorkers = false;
    opts.timeout = g->timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(std::string(host), opts);
    g->store = c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), tcp);
#ifdef DELTARL_GLOO
    {
      auto o = c10d::ProcessGroupGloo::Options::create(g->timeout);
      o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      auto store = c10::make_intrusive<c10d::PrefixStore>("gloo", g->store);
      g->cpu = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, o);
    }
#endif
#ifdef DELTARL_NCCL
    if (with_cuda != 0) {
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = g->timeout;
      auto store = c10::make_intrusive<c10d::PrefixStore>("nccl", g->store);
      g->cuda = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, o);
    }
#else
    (void)with_cuda;
#endif
    *out = g.release();
  });
}

void deltarl_c10d_free(void* g) { delete static_cast<Group*>(g); }

// Closes this rank's collective connections while the process lives on: a peer blocked in a
// collective with it fails at once (its socket reads end), as it would if this rank had died,
// instead of waiting out the timeout. The store stays usable (failure reports travel through
// it). Later collectives of this rank fail with a message saying why.
char* deltarl_c10d_abort(void* gp) {
  return guarded([&] {
    auto* g = static_cast<Group*>(gp);
    // gloo has no abort: its destructor (no work is queued: this rank is not inside a
    // collective) closes every pair's socket.
    g->cpu.reset();
    if (g->cuda) {
      g->cuda->abort();
      g->cuda.reset();
    }
    g->aborted = true;
  });
}

char* deltarl_c10d_all_reduce_sum(void* gp, void* tensor) {
  return guarded([&] {
    auto* g = static_cast<Group*>(gp);
    std::vector<at::Tensor> ts{*static_cast<at::Tensor*>(tensor)};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = g->timeout;
    wait(g, backend_for(g, ts[0]).allreduce(ts, o));
  });
}

char* deltarl_c10d_broadcast(void* gp, void* tensor, int root) {
  return guarded([&] {
    auto* g = static_cast<Group*>(gp);
    std::vector<at::Tensor> ts{*static_cast<at::Tensor*>(tensor)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.rootTensor = 0;
    o.timeout = g->timeout;
    wait(g, backend_for(g, ts[0]).broadcast(ts, o));
  });
}

// Sums `tensor` over the ranks into rank `dst`'s copy (the others' are left undefined).
char* deltarl_c10d_reduce_sum(void* gp, void* tensor, int dst) {
  return guarded([&] {
    auto* g = static_cast<Group*>(gp);
    std::vector<at::Tensor> ts{*static_cast<at::Tensor*>(tensor)};
    c10d::ReduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.rootRank = dst;
    o.rootTensor = 0;
    o.timeout = g->timeout;
    wait(g, backend_for(g, ts[0]).reduce(ts, o));
  });
}

// Sends `tensor` to rank `dst` alone (it must post the matching receive).
char* deltarl_c10d_send(void* gp, void* tensor, int dst) {
  return guarded([&] {
    auto* g = static_cast<Group*>(gp);
    std::vector<at::Tensor> ts{*static_cast<at::Tensor*>(tensor)};
    wait(g, backend_for(g, ts[0]).send(ts, dst, 0));
  });
}

// Receives into `tensor` (of the sent shape) what rank `src` sends.
char* deltarl_c10d_recv(void* gp, void* tensor, int src) {
  return guarded([&] {
    auto* g = static_cast<Group*>(gp);
    std::vector<at::Tensor> ts{*static_cast<at::Tensor*>(tensor)};
    wait(g, backend_for(g, ts[0]).recv(ts, src, 0));
  });
}

// Gathers `input` from every rank into `outputs[0..world]` (tensors of its shape).
char* deltarl_c10d_all_gather(void* gp, void* input, void** outputs) {
  return guarded([&] {
    auto* g = static_cast<Group*>(gp);
    std::vector<at::Tensor> in{*static_cast<at::Tensor*>(input)};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < g->world; ++r) {
      out[0].push_back(*static_cast<at::Tensor*>(outputs[r]));
    }
    c10d::AllgatherOptions o;
    o.timeout = g->timeout;
    wait(g, backend_for(g, in[0]).allgather(out, in, o));
  });
}

char* deltarl_c10d_barrier(void* gp) {
  return guarded([&] {
    auto* g = static_cast<Group*>(gp);
    if (g->aborted) {
      throw std::runtime_error("this rank already reported a failure and closed its connections");
    }
    if (!g->cpu) {
      throw std::runtime_error("no gloo backend for the barrier");
    }
    c10d::BarrierOptions o;
    o.timeout = g->timeout;
    wait(g, g->cpu->barrier(o));
  });
}

// Sets `key` in the store (failure reports: they outlive a rank's sockets).
char* deltarl_c10d_store_set(void* gp, const char* key, const uint8_t* data, size_t len) {
  return guarded([&] {
    auto* g = static_cast<Group*>(gp);
    g->store->set(std::string(key), std::vector<uint8_t>(data, data + len));
  });
}

// Reads `key` if it is set (without waiting): `*found` says whether it was; the value is
// malloc'ed into `*data` (free with deltarl_c10d_free_message).
char* deltarl_c10d_store_try_get(void* gp, const char* key, int* found, uint8_t** data,
                                 size_t* len) {
  return guarded([&] {
    auto* g = static_cast<Group*>(gp);
    *found = 0;
    *len = 0;
    *data = nullptr;
    std::string k(key);
    if (!g->store->check({k})) {
      return;
    }
    auto v = g->store->get(k);
    *data = static_cast<uint8_t*>(std::malloc(v.size() + 1));
    if (*data == nullptr) {
      throw std::runtime_error("out of memory");
    }
    std::memcpy(*data, v.data(), v.size());
    *len = v.size();
    *found = 1;
  });
}

// Hands the accelerator's cached memory back to the driver. libtorch's caching allocator
// keeps the blocks a finished stage freed reserved for its own reuse; a vLLM server woken
// beside this process (its weights and KV cache reloaded at level 2) needs that memory.
// Device-generic (at::accelerator), so it links against libtorch_cpu and c10 alone and
// runs, doing nothing, where there is no accelerator. Writes whether there is one and the
// current device's reserved bytes before and after.
char* deltarl_device_empty_cache(int* has_accelerator, int64_t* before, int64_t* after) {
  return guarded([&] {
    *has_accelerator = 0;
    *before = 0;
    *after = 0;
    auto kind = at::accelerator::getAccelerator(false);
    if (!kind.has_value()) {
      return;
    }
    *has_accelerator = 1;
    auto* alloc = c10::getDeviceAllocator(*kind);
    if (!alloc->initialized()) {
      return;  // nothing was ever allocated on it, so nothing is cached
    }
    auto index = at::accelerator::getDeviceIndex();
    auto reserved = [&] {
      auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
      return alloc->getDeviceStats(index).reserved_bytes[aggregate].current;
    };
    *before = reserved();
    alloc->emptyCache();
    *after = reserved();
  });
}

// Drops a tensor's gradient (`.grad` becomes undefined and its memory is released), which
// tch's `zero_grad` cannot: it only zeroes the buffer in place.
char* deltarl_tensor_free_grad(void* tensor) {
  return guarded([&] { static_cast<at::Tensor*>(tensor)->mutable_grad().reset(); });
}

}  // extern "C"
