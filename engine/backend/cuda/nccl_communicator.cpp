#include "engine/backend/cuda/nccl_communicator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <nccl.h>

#include <cstring>

#include "engine/common/error.h"
#include "engine/backend/tp_workers.h"

namespace cypris {

namespace {

void check_nccl(ncclResult_t r, const char* what) {
  CYPRIS_CHECK(r == ncclSuccess, "NCCL {} failed: {}", what, ncclGetErrorString(r));
}

void check_cuda(cudaError_t r, const char* what) {
  CYPRIS_CHECK(r == cudaSuccess, "CUDA {} failed: {}", what, cudaGetErrorString(r));
}

ncclComm_t as_comm(void* c) {
  return static_cast<ncclComm_t>(c);
}
cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

// Collectives are enqueued from the rank's own thread, whose current device must be the rank's.
struct DeviceGuard {
  explicit DeviceGuard(int device) {
    cudaGetDevice(&previous);
    if (previous != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous); }
  int previous = 0;
};

}  // namespace

NcclCommunicator::NcclCommunicator(void* comm, int rank, int world_size, int device)
    : comm_(comm), rank_(rank), world_size_(world_size), device_(device) {
  DeviceGuard guard(device_);
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(float)), "cudaMalloc");
}

NcclCommunicator::~NcclCommunicator() {
  if (scratch_) cudaFree(scratch_);
  if (comm_) ncclCommDestroy(as_comm(comm_));
}

void NcclCommunicator::all_reduce_sum(float* data, int64_t count) {
  if (world_size_ == 1 || count <= 0) return;
  DeviceGuard guard(device_);
  check_nccl(
      ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat32, ncclSum, as_comm(comm_), as_stream(stream_)),
      "all-reduce");
}

namespace {

ncclDataType_t nccl_type(DType dtype, const char* what) {
  switch (dtype) {
    case DType::F32:
      return ncclFloat32;
    case DType::F16:
      return ncclFloat16;
    case DType::BF16:
      return ncclBfloat16;
    default:
      CYPRIS_FAIL("NCCL {}: {} is not an activation type (float32, float16, bfloat16)", what, dtype_name(dtype));
  }
}

}  // namespace

void NcclCommunicator::all_reduce(void* data, DType dtype, int64_t count) {
  if (world_size_ == 1 || count <= 0) return;
  const ncclDataType_t t = nccl_type(dtype, "all-reduce");
  DeviceGuard guard(device_);
  check_nccl(ncclAllReduce(data, data, static_cast<size_t>(count), t, ncclSum, as_comm(comm_), as_stream(stream_)),
             "all-reduce");
}

void NcclCommunicator::all_gather(const float* send, float* recv, int64_t count) {
  if (count <= 0) return;
  DeviceGuard guard(device_);
  check_nccl(ncclAllGather(send, recv, static_cast<size_t>(count), ncclFloat32, as_comm(comm_), as_stream(stream_)),
             "all-gather");
}

void NcclCommunicator::barrier() {
  if (world_size_ == 1) return;
  // NCCL has no barrier: a one-element all-reduce, waited for, serves as one.
  DeviceGuard guard(device_);
  check_nccl(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, as_comm(comm_), as_stream(stream_)), "barrier");
  check_cuda(cudaStreamSynchronize(as_stream(stream_)), "cudaStreamSynchronize");
}

int64_t NcclCommunicator::start_send(const void* data, DType dtype, int64_t count, int peer) {
  CYPRIS_CHECK(peer >= 0 && peer < world_size_ && peer != rank_, "NCCL send to rank {} of {} from rank {}", peer,
               world_size_, rank_);
  if (count <= 0) return 0;
  const ncclDataType_t t = nccl_type(dtype, "send");
  DeviceGuard guard(device_);
  check_nccl(ncclSend(data, static_cast<size_t>(count), t, peer, as_comm(comm_), as_stream(stream_)), "send");
  return 0;
}

int64_t NcclCommunicator::start_recv(void* data, DType dtype, int64_t count, int peer) {
  CYPRIS_CHECK(peer >= 0 && peer < world_size_ && peer != rank_, "NCCL recv from rank {} of {} on rank {}", peer,
               world_size_, rank_);
  if (count <= 0) return 0;
  const ncclDataType_t t = nccl_type(dtype, "recv");
  DeviceGuard guard(device_);
  check_nccl(ncclRecv(data, static_cast<size_t>(count), t, peer, as_comm(comm_), as_stream(stream_)), "recv");
  return 0;
}

int visible_cuda_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(int world_size) {
  check_gpu_count(world_size, visible_cuda_devices());
  std::vector<int> devices(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) devices[r] = r;
  return make_nccl_communicators(devices);
}

std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(const std::vector<int>& devices) {
  const int world_size = static_cast<int>(devices.size());
  int highest = 0;
  for (int d : devices) highest = std::max(highest, d + 1);
  check_gpu_count(highest, visible_cuda_devices());
  std::vector<ncclComm_t> comms(static_cast<size_t>(world_size));
  check_nccl(ncclCommInitAll(comms.data(), world_size, devices.data()), "communicator init");
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (int r = 0; r < world_size; ++r) {
    out.push_back(std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comms[r], r, world_size, devices[r])));
  }
  return out;
}

NcclUniqueIdBytes make_nccl_unique_id() {
  static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueIdBytes), "ncclUniqueId is 128 bytes");
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "unique id");
  NcclUniqueIdBytes out;
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

std::unique_ptr<NcclCommunicator> make_nccl_communicator_rank(const NcclUniqueIdBytes& unique_id, int rank,
                                                              int world_size, int device) {
  const int visible = visible_cuda_devices();
  CYPRIS_CHECK(device >= 0 && device < visible,
               "MPI process {}: GPU {} is not visible here ({} visible; one process per GPU, its local rank picks "
               "it; check CUDA_VISIBLE_DEVICES)",
               rank, device, visible);
  // The process's GPU from here on: its backend, weights and cache are made on it after this.
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof(id));
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, world_size, id, rank), "communicator init (ncclCommInitRank)");
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, rank, world_size, device));
}

}  // namespace cypris
