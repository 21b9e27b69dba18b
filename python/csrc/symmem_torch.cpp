// The symmem PyTorch op library (libsymmem_torch.so): torch.ops.symmem.* over libsymmem's C API.
//
// Built on torch's stable ABI (TORCH_TARGET_VERSION 2.10): only the C shim (aoti_torch_*, torch_*) and
// header-only C++ cross into libtorch, so one binary built against any torch >= 2.10 loads into later
// releases (2.11 on the GPU machine, 2.14 for SGLang and vLLM, 2.15).
//
// The hot path (one eager call) is: the dispatcher's boxed call -> one registry lookup (a per-thread cache of
// the last group, checked against a generation counter) -> argument checks through the shim -> the C call on
// the current CUDA stream. Nothing is allocated but the out-of-place result, and no Python runs.
//
// The schemas are one list, python/symmem/torch/schemas.def, included below and read by the Python package
// too; the fake kernels that make the ops traceable are registered from Python (symmem/torch/_ops.py),
// because fakes are Python by design in torch.
#include <symmem/symmem.h>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#define SYMMEM_TORCH_EXPORT extern "C" __attribute__((visibility("default")))

using torch::stable::Tensor;
using torch::headeronly::ScalarType;

namespace {

// ---------------------------------------------------------------------------------------------------------
// Group registry: a communicator registers its symmem_comm_t under its torch group's name (Dynamo cannot pass
// objects into a graph, so ops name their group, as SGLang's and vLLM's ops do).
// ---------------------------------------------------------------------------------------------------------
struct Group {
    symmem_comm_t comm = nullptr;
    int rank = 0, size = 0, device = -1;
    size_t max_bytes = 0;
};

std::shared_mutex g_mu;
std::unordered_map<std::string, Group> g_groups;
std::atomic<uint64_t> g_generation{1}; // bumped on every change; invalidates the per-thread caches

struct CachedGroup {
    uint64_t generation = 0;
    std::string name;
    Group group;
};
thread_local CachedGroup t_cache;

[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    throw std::runtime_error(buf);
}

const Group &lookup(const char *op, const std::string &name)
{
    const uint64_t gen = g_generation.load(std::memory_order_acquire);
    if (t_cache.generation == gen && t_cache.name == name) return t_cache.group;
    std::shared_lock<std::shared_mutex> lk(g_mu);
    auto it = g_groups.find(name);
    if (it == g_groups.end())
        fail("symmem::%s: group '%s' is not registered in this process: create "
             "symmem.torch.SymmemCommunicator(group, device) first and pass its group_name (%zu groups registered)",
             op, name.c_str(), g_groups.size());
    t_cache.generation = gen;
    t_cache.name = name;
    t_cache.group = it->second;
    return t_cache.group;
}

// ---------------------------------------------------------------------------------------------------------
// Argument checks: every failure names the op, the group, the rank and what to pass instead.
// ---------------------------------------------------------------------------------------------------------
const char *scalar_name(ScalarType t)
{
    switch (t) {
    case ScalarType::Float: return "float32";
    case ScalarType::Half: return "float16";
    case ScalarType::BFloat16: return "bfloat16";
    case ScalarType::Double: return "float64";
    case ScalarType::Long: return "int64";
    case ScalarType::Int: return "int32";
    case ScalarType::Short: return "int16";
    case ScalarType::Char: return "int8";
    case ScalarType::Byte: return "uint8";
    case ScalarType::Bool: return "bool";
    default: return "an unsupported dtype";
    }
}

struct Ctx {
    const char *op;
    const std::string &name;
    const Group &g;
};

[[noreturn]] void fail_arg(const Ctx &c, const char *what)
{
    fail("symmem::%s (group '%s', rank %d of %d): %s", c.op, c.name.c_str(), c.g.rank, c.g.size, what);
}

symmem_dtype_t check_tensor(const Ctx &c, const char *which, const Tensor &t)
{
    char msg[512];
    if (!t.is_cuda()) {
        if (c.g.device >= 0)
            snprintf(msg, sizeof msg, "%s is not a CUDA tensor: move it to cuda:%d", which, c.g.device);
        else
            snprintf(msg, sizeof msg, "%s is not a CUDA tensor, and the group's communicator has no GPU (host backend)",
                     which);
        fail_arg(c, msg);
    }
    if (t.get_device_index() != c.g.device) {
        snprintf(msg, sizeof msg, "%s is on cuda:%d but the group's communicator is on cuda:%d", which,
                 (int)t.get_device_index(), c.g.device);
        fail_arg(c, msg);
    }
    if (!t.is_contiguous()) {
        snprintf(msg, sizeof msg, "%s is not contiguous: call .contiguous() first", which);
        fail_arg(c, msg);
    }
    const ScalarType st = t.scalar_type();
    switch (st) {
    case ScalarType::Float: return SYMMEM_FLOAT32;
    case ScalarType::Half: return SYMMEM_FLOAT16;
    case ScalarType::BFloat16: return SYMMEM_BFLOAT16;
    default:
        snprintf(msg, sizeof msg, "%s has dtype %s: use bfloat16, float16 or float32", which, scalar_name(st));
        fail_arg(c, msg);
    }
}

symmem_redop_t parse_op(const Ctx &c, const std::string &op)
{
    if (op == "sum") return SYMMEM_OP_SUM;
    if (op == "max") return SYMMEM_OP_MAX;
    if (op == "min") return SYMMEM_OP_MIN;
    char msg[256];
    snprintf(msg, sizeof msg, "reduce_op '%.64s' is not known: use \"sum\", \"max\" or \"min\"", op.c_str());
    fail_arg(c, msg);
}

// The all-reduce's wire format: "none" (exact: the library's choice), or "int8" (the compressed wire,
// SYMMEM_ALGO_WIRE_INT8: lossy, the error bound of docs/collectives.md; below SYMMEM_WIRE_MIN_BYTES the exact
// path runs).
symmem_algo_t parse_wire(const Ctx &c, const std::string &wire)
{
    if (wire == "none") return SYMMEM_ALGO_AUTO;
    if (wire == "int8") return SYMMEM_ALGO_WIRE_INT8;
    char msg[256];
    snprintf(msg, sizeof msg, "wire '%.64s' is not known: use \"none\" (exact) or \"int8\" (compressed, lossy)",
             wire.c_str());
    fail_arg(c, msg);
}

void check_bytes(const Ctx &c, size_t bytes)
{
    if (bytes <= c.g.max_bytes) return;
    char msg[256];
    snprintf(msg, sizeof msg,
             "the message is %zu bytes, larger than the communicator's limit of %zu bytes "
             "(SYMMEM_WORKSPACE_BYTES raises it; SymmemCommunicator.max_size tells callers)",
             bytes, c.g.max_bytes);
    fail_arg(c, msg);
}

void check_same_dtype(const Ctx &c, const Tensor &in, const Tensor &out)
{
    if (in.scalar_type() == out.scalar_type()) return;
    char msg[256];
    snprintf(msg, sizeof msg, "out has dtype %s but input has dtype %s", scalar_name(out.scalar_type()),
             scalar_name(in.scalar_type()));
    fail_arg(c, msg);
}

std::string shape_str(const Tensor &t)
{
    std::string s = "[";
    for (int64_t d = 0; d < t.dim(); d++) s += (d ? ", " : "") + std::to_string(t.size(d));
    return s + "]";
}

void check_same_shape(const Ctx &c, const Tensor &in, const Tensor &out)
{
    bool ok = out.dim() == in.dim();
    for (int64_t d = 0; ok && d < in.dim(); d++) ok = out.size(d) == in.size(d);
    if (ok) return;
    char msg[512];
    snprintf(msg, sizeof msg, "out has shape %s but input has shape %s: they must match", shape_str(out).c_str(),
             shape_str(in).c_str());
    fail_arg(c, msg);
}

// out's shape must be input's with dim 0 scaled by `num / den` (the torch.distributed *_tensor convention).
void check_dim0_shape(const Ctx &c, const Tensor &in, const Tensor &out, int64_t num, int64_t den, const char *rule)
{
    bool ok = in.dim() >= 1 && out.dim() == in.dim() && in.size(0) * num % den == 0 &&
              out.size(0) == in.size(0) * num / den;
    for (int64_t d = 1; ok && d < in.dim(); d++) ok = out.size(d) == in.size(d);
    if (ok) return;
    char msg[512];
    snprintf(msg, sizeof msg, "out has shape %s for an input of shape %s: %s", shape_str(out).c_str(),
             shape_str(in).c_str(), rule);
    fail_arg(c, msg);
}

void *current_stream(const Ctx &c)
{
    void *stream = nullptr;
    if (aoti_torch_get_current_cuda_stream(c.g.device, &stream) != AOTI_TORCH_SUCCESS)
        fail_arg(c, "could not get the current CUDA stream from torch");
    return stream;
}

void check_status(const Ctx &c, symmem_status_t st)
{
    if (st == SYMMEM_OK) return;
    fail("symmem::%s (group '%s', rank %d of %d): %s: %s", c.op, c.name.c_str(), c.g.rank, c.g.size,
         symmem_status_name(st), symmem_last_error());
}

Tensor empty_like_contiguous(const Ctx &c, const Tensor &t)
{
    int64_t sizes[64], strides[64];
    const int64_t nd = t.dim();
    if (nd > 64) fail_arg(c, "input has more than 64 dimensions");
    int64_t stride = 1;
    for (int64_t d = nd - 1; d >= 0; d--) {
        sizes[d] = t.size(d);
        strides[d] = stride;
        stride *= sizes[d] > 1 ? sizes[d] : 1;
    }
    int32_t dtype = 0;
    AtenTensorHandle h = nullptr;
    if (aoti_torch_get_dtype(t.get(), &dtype) != AOTI_TORCH_SUCCESS ||
        aoti_torch_empty_strided(nd, sizes, strides, dtype, aoti_torch_device_type_cuda(), c.g.device, &h) !=
            AOTI_TORCH_SUCCESS)
        fail_arg(c, "could not allocate the output tensor (see the CUDA error above)");
    return Tensor(h);
}

// ---------------------------------------------------------------------------------------------------------
// The ops.
// ---------------------------------------------------------------------------------------------------------
void all_reduce_into(const Ctx &c, symmem_dtype_t dt, const Tensor &input, const std::string &reduce_op,
                     const Tensor &out, const std::string &wire)
{
    const symmem_redop_t op = parse_op(c, reduce_op);
    const symmem_algo_t algo = parse_wire(c, wire);
    const size_t n = (size_t)input.numel();
    check_bytes(c, n * symmem_dtype_size(dt));
    void *stream = current_stream(c);
    check_status(c, symmem_all_reduce(c.g.comm, input.data_ptr(), out.data_ptr(), n, dt, op, algo,
                                      (symmem_stream_t)stream));
}

Tensor all_reduce(Tensor input, std::string reduce_op, std::string group_name, std::string wire)
{
    const Ctx c{"all_reduce", group_name, lookup("all_reduce", group_name)};
    const symmem_dtype_t dt = check_tensor(c, "input", input);
    Tensor out = empty_like_contiguous(c, input);
    all_reduce_into(c, dt, input, reduce_op, out, wire);
    return out;
}

void all_reduce_(Tensor input, std::string reduce_op, std::string group_name, std::string wire)
{
    const Ctx c{"all_reduce_", group_name, lookup("all_reduce_", group_name)};
    const symmem_dtype_t dt = check_tensor(c, "input", input);
    all_reduce_into(c, dt, input, reduce_op, input, wire);
}

void all_reduce_out(Tensor input, std::string reduce_op, std::string group_name, Tensor out, std::string wire)
{
    const Ctx c{"all_reduce_out", group_name, lookup("all_reduce_out", group_name)};
    const symmem_dtype_t dt = check_tensor(c, "input", input);
    check_tensor(c, "out", out);
    check_same_dtype(c, input, out);
    check_same_shape(c, input, out);
    all_reduce_into(c, dt, input, reduce_op, out, wire);
}

void reduce_scatter_out(Tensor input, std::string reduce_op, std::string group_name, Tensor out)
{
    const Ctx c{"reduce_scatter_out", group_name, lookup("reduce_scatter_out", group_name)};
    const symmem_dtype_t dt = check_tensor(c, "input", input);
    check_tensor(c, "out", out);
    check_same_dtype(c, input, out);
    check_dim0_shape(c, input, out, 1, c.g.size, "out.shape[0] * world_size must equal input.shape[0], other dims equal");
    const symmem_redop_t op = parse_op(c, reduce_op);
    check_bytes(c, (size_t)input.numel() * symmem_dtype_size(dt));
    void *stream = current_stream(c);
    check_status(c, symmem_reduce_scatter(c.g.comm, input.data_ptr(), out.data_ptr(), (size_t)out.numel(), dt, op,
                                          SYMMEM_ALGO_AUTO, (symmem_stream_t)stream));
}

void all_gather_out(Tensor input, std::string group_name, Tensor out)
{
    const Ctx c{"all_gather_out", group_name, lookup("all_gather_out", group_name)};
    const symmem_dtype_t dt = check_tensor(c, "input", input);
    check_tensor(c, "out", out);
    check_same_dtype(c, input, out);
    check_dim0_shape(c, input, out, c.g.size, 1, "out.shape[0] must equal input.shape[0] * world_size, other dims equal");
    check_bytes(c, (size_t)out.numel() * symmem_dtype_size(dt));
    void *stream = current_stream(c);
    check_status(c, symmem_all_gather(c.g.comm, input.data_ptr(), out.data_ptr(), (size_t)input.numel(), dt,
                                      SYMMEM_ALGO_AUTO, (symmem_stream_t)stream));
}

// ---------------------------------------------------------------------------------------------------------
// Fused all-reduce + residual add + RMSNorm (symmem_all_reduce_add_rmsnorm): per row of the last dimension,
// residual += sum over ranks of input; out = residual * weight / sqrt(mean(residual^2) + eps). The rules for
// tensors (shapes, dtypes, the row width, eps, overlaps) are the library's, symmem_all_reduce_add_rmsnorm_check,
// which the Python fake kernels check with too; here only what every op checks (device, contiguity, dtype).
// ---------------------------------------------------------------------------------------------------------
struct Rows {
    symmem_dtype_t dt;
    size_t tokens, hidden;
    float eps;
};

// The library's view of a tensor: its bytes from its data pointer, in the one address space of the device.
struct Desc {
    int64_t shape[64];
    symmem_tensor_desc_t d;
    Desc(const Ctx &c, const Tensor &t, symmem_dtype_t dt)
    {
        if (t.dim() > 64) fail_arg(c, "a tensor has more than 64 dimensions");
        for (int64_t i = 0; i < t.dim(); i++) shape[i] = t.size(i);
        d = {dt, scalar_name(t.scalar_type()), (int)t.dim(), shape, 0, (uint64_t)(uintptr_t)t.data_ptr()};
    }
};

// `out`: the caller's output tensor, or null when the op writes a tensor of its own: a new one, or input
// itself when `writes_input` (the in-place form).
Rows check_rmsnorm(const Ctx &c, const Tensor &input, const Tensor &residual, const Tensor &weight, double eps,
                   const Tensor *out, bool writes_input)
{
    Rows r;
    r.dt = check_tensor(c, "input", input);
    const Desc di(c, input, r.dt), dr(c, residual, check_tensor(c, "residual", residual)),
        dw(c, weight, check_tensor(c, "weight", weight));
    const symmem_dtype_t out_dt = out ? check_tensor(c, "out", *out) : r.dt;
    const Desc dout(c, out ? *out : input, out_dt);
    char msg[512];
    if (symmem_all_reduce_add_rmsnorm_check(&di.d, &dr.d, &dw.d, out ? &dout.d : nullptr, writes_input, eps,
                                            &r.tokens, &r.hidden, msg, sizeof msg) != SYMMEM_OK)
        fail_arg(c, msg);
    r.eps = (float)eps;
    return r;
}

void rmsnorm_into(const Ctx &c, const Rows &r, const Tensor &input, const Tensor &residual, const Tensor &weight,
                  const Tensor &out)
{
    if (r.tokens == 0) return;
    void *stream = current_stream(c);
    check_status(c, symmem_all_reduce_add_rmsnorm(c.g.comm, input.data_ptr(), residual.data_ptr(), weight.data_ptr(),
                                                  out.data_ptr(), r.tokens, r.hidden, r.eps, r.dt, SYMMEM_ALGO_AUTO,
                                                  (symmem_stream_t)stream));
}

Tensor all_reduce_add_rmsnorm(Tensor input, Tensor residual, Tensor weight, double eps, std::string group_name)
{
    const Ctx c{"all_reduce_add_rmsnorm", group_name, lookup("all_reduce_add_rmsnorm", group_name)};
    const Rows r = check_rmsnorm(c, input, residual, weight, eps, nullptr, false);
    Tensor out = empty_like_contiguous(c, input);
    rmsnorm_into(c, r, input, residual, weight, out);
    return out;
}

void all_reduce_add_rmsnorm_out(Tensor input, Tensor residual, Tensor weight, double eps, std::string group_name,
                                Tensor out)
{
    const Ctx c{"all_reduce_add_rmsnorm_out", group_name, lookup("all_reduce_add_rmsnorm_out", group_name)};
    const Rows r = check_rmsnorm(c, input, residual, weight, eps, &out, false);
    rmsnorm_into(c, r, input, residual, weight, out);
}

void all_reduce_add_rmsnorm_(Tensor input, Tensor residual, Tensor weight, double eps, std::string group_name)
{
    const Ctx c{"all_reduce_add_rmsnorm_", group_name, lookup("all_reduce_add_rmsnorm_", group_name)};
    const Rows r = check_rmsnorm(c, input, residual, weight, eps, nullptr, true);
    rmsnorm_into(c, r, input, residual, weight, input);
}

void barrier(std::string group_name)
{
    const Ctx c{"barrier", group_name, lookup("barrier", group_name)};
    void *stream = current_stream(c);
    check_status(c, symmem_barrier(c.g.comm, (symmem_stream_t)stream));
}

// ---------------------------------------------------------------------------------------------------------
// Pluggable-allocator entry points for torch.cuda.MemPool (symmem.torch.get_mem_pool). torch's
// CUDAPluggableAllocator takes function names and no context pointer, so each pool binds one of a fixed set
// of slots to its communicator. alloc is collective (symmem_alloc): every rank's caching allocator must ask
// for the same sizes in the same order, which holds when the ranks run the same program.
// ---------------------------------------------------------------------------------------------------------
constexpr int kPoolSlots = 16;
std::atomic<symmem_comm_t> g_pool_comm[kPoolSlots];

void *pool_alloc(int slot, size_t size, int device)
{
    symmem_comm_t comm = g_pool_comm[slot].load(std::memory_order_acquire);
    if (!comm) {
        fprintf(stderr, "symmem: memory pool slot %d has no communicator (was it closed?)\n", slot);
        return nullptr;
    }
    if (device != symmem_comm_device(comm)) {
        fprintf(stderr, "symmem: memory pool of cuda:%d asked for memory on cuda:%d\n", symmem_comm_device(comm),
                device);
        return nullptr;
    }
    symmem_buffer_t buf = nullptr;
    if (symmem_alloc(comm, size, &buf) != SYMMEM_OK) {
        fprintf(stderr, "symmem: memory pool allocation of %zu bytes failed: %s\n", size, symmem_last_error());
        return nullptr;
    }
    return symmem_buffer_ptr(buf);
}

void pool_free(int slot, void *ptr)
{
    symmem_comm_t comm = g_pool_comm[slot].load(std::memory_order_acquire);
    symmem_buffer_t buf = comm ? symmem_buffer_lookup(comm, ptr) : nullptr;
    if (!buf) {
        fprintf(stderr, "symmem: memory pool slot %d: %p is not a live symmetric buffer\n", slot, ptr);
        return;
    }
    if (symmem_free(buf) != SYMMEM_OK) fprintf(stderr, "symmem: memory pool free failed: %s\n", symmem_last_error());
}

} // namespace

#define SYMMEM_POOL_SLOT(i)                                                                                    \
    SYMMEM_TORCH_EXPORT void *symmem_torch_pool_alloc_##i(size_t size, int device, void *)                    \
    {                                                                                                          \
        return pool_alloc(i, size, device);                                                                   \
    }                                                                                                          \
    SYMMEM_TORCH_EXPORT void symmem_torch_pool_free_##i(void *ptr, size_t, int, void *) { pool_free(i, ptr); }
SYMMEM_POOL_SLOT(0)
SYMMEM_POOL_SLOT(1)
SYMMEM_POOL_SLOT(2)
SYMMEM_POOL_SLOT(3)
SYMMEM_POOL_SLOT(4)
SYMMEM_POOL_SLOT(5)
SYMMEM_POOL_SLOT(6)
SYMMEM_POOL_SLOT(7)
SYMMEM_POOL_SLOT(8)
SYMMEM_POOL_SLOT(9)
SYMMEM_POOL_SLOT(10)
SYMMEM_POOL_SLOT(11)
SYMMEM_POOL_SLOT(12)
SYMMEM_POOL_SLOT(13)
SYMMEM_POOL_SLOT(14)
SYMMEM_POOL_SLOT(15)

// Binds a free pool slot to `comm`; returns the slot, or -1 when all are taken.
SYMMEM_TORCH_EXPORT int symmem_torch_pool_bind(symmem_comm_t comm)
{
    for (int i = 0; i < kPoolSlots; i++) {
        symmem_comm_t expected = nullptr;
        if (g_pool_comm[i].compare_exchange_strong(expected, comm)) return i;
    }
    return -1;
}

SYMMEM_TORCH_EXPORT void symmem_torch_pool_unbind(int slot)
{
    if (slot >= 0 && slot < kPoolSlots) g_pool_comm[slot].store(nullptr, std::memory_order_release);
}

SYMMEM_TORCH_EXPORT int symmem_torch_pool_slots(void) { return kPoolSlots; }

// Registers `comm` under `name`. Returns 0, or -1 if the name is taken (the caller picks another) or the
// communicator is not valid.
SYMMEM_TORCH_EXPORT int symmem_torch_register_group(const char *name, symmem_comm_t comm)
{
    if (!name || !comm || symmem_comm_size(comm) <= 0) return -1;
    Group g;
    g.comm = comm;
    g.rank = symmem_comm_rank(comm);
    g.size = symmem_comm_size(comm);
    g.device = symmem_comm_device(comm);
    g.max_bytes = symmem_comm_max_message_bytes(comm);
    std::unique_lock<std::shared_mutex> lk(g_mu);
    if (!g_groups.emplace(name, g).second) return -1;
    g_generation.fetch_add(1, std::memory_order_acq_rel);
    return 0;
}

// Removes `name`; returns 0, or -1 if it was not registered.
SYMMEM_TORCH_EXPORT int symmem_torch_unregister_group(const char *name)
{
    std::unique_lock<std::shared_mutex> lk(g_mu);
    const bool erased = name && g_groups.erase(name) == 1;
    g_generation.fetch_add(1, std::memory_order_acq_rel);
    return erased ? 0 : -1;
}

// The schemas, from the one list (schemas.def says why the mutating forms return nothing). barrier has no
// tensor argument, so its kernel sits at CompositeExplicitAutograd.
constexpr const char *kSchemas[] = {
#include "../symmem/torch/schemas.def"
};

STABLE_TORCH_LIBRARY(symmem, m)
{
    for (const char *schema : kSchemas) m.def(schema);
}

// Every op's kernel, registered for each backend below from this one list (an op added here reaches both).
#define SYMMEM_TORCH_IMPLS(m)                                                                              \
    do {                                                                                                   \
        (m).impl("all_reduce", TORCH_BOX(&all_reduce));                                                    \
        (m).impl("all_reduce_", TORCH_BOX(&all_reduce_));                                                  \
        (m).impl("all_reduce_out", TORCH_BOX(&all_reduce_out));                                            \
        (m).impl("reduce_scatter_out", TORCH_BOX(&reduce_scatter_out));                                    \
        (m).impl("all_gather_out", TORCH_BOX(&all_gather_out));                                            \
        (m).impl("all_reduce_add_rmsnorm", TORCH_BOX(&all_reduce_add_rmsnorm));                            \
        (m).impl("all_reduce_add_rmsnorm_out", TORCH_BOX(&all_reduce_add_rmsnorm_out));                    \
        (m).impl("all_reduce_add_rmsnorm_", TORCH_BOX(&all_reduce_add_rmsnorm_));                          \
    } while (0)

STABLE_TORCH_LIBRARY_IMPL(symmem, CUDA, m)
{
    SYMMEM_TORCH_IMPLS(m);
}

// CPU tensors reach the same kernels, whose first check names the op, the group and the device to use (a
// RuntimeError, as the fakes give for meta tensors), instead of the dispatcher's NotImplementedError listing
// every backend.
STABLE_TORCH_LIBRARY_IMPL(symmem, CPU, m)
{
    SYMMEM_TORCH_IMPLS(m);
}

STABLE_TORCH_LIBRARY_IMPL(symmem, CompositeExplicitAutograd, m) { m.impl("barrier", TORCH_BOX(&barrier)); }
