// Host-backed PrivateUse1 tensors for torch releases without torch._C._acc
// (2.6 - 2.9). A device tensor's storage aliases host memory; the DataPtr's
// context holds a reference to the storage it aliases, so memory lives as long
// as any tensor on either side.
#include <torch/extension.h>

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <limits>

namespace {

// Devices 0..count-1 that all live in host memory, one stream, events that are
// always complete: kernels run synchronously on the host. The guard's current
// device stays 0 (as torch._C._acc's does from 2.10): the Python device module
// keeps the current card, and a tensor made without an index (index 0) is
// placed there. (Overrides are noexcept where any release in the window
// declares them so; that is compatible with the releases that do not.)
c10::DeviceIndex device_count_ = 1;

struct HostGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType D = c10::DeviceType::PrivateUse1;
  c10::DeviceType type() const override { return D; }
  c10::Device exchangeDevice(c10::Device) const override { return c10::Device(D, 0); }
  c10::Device getDevice() const override { return c10::Device(D, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count_; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, HostGuardImpl);

// isAvailable / isBuilt are asked by torch.distributed's backend selection
// (torch._C._get_accelerator) from 2.9 on; declared without `override`
// because the accelerator hooks interface of the oldest releases lacks them.
struct HostHooks final : public at::PrivateUse1HooksInterface {
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  bool isAvailable() const { return true; }
  bool isBuilt() const { return true; }
};

void delete_storage_ref(void* ctx) { delete static_cast<c10::Storage*>(ctx); }

// A storage on `device` over the memory of `src`, keeping `src` alive.
c10::Storage alias_storage(const c10::Storage& src, c10::Device device) {
  auto* keep = new c10::Storage(src);
  c10::DataPtr ptr(const_cast<void*>(src.data()), keep, &delete_storage_ref, device);
  return c10::Storage(c10::Storage::use_byte_size_t(), src.nbytes(), std::move(ptr), nullptr, false);
}

at::Tensor with_storage(c10::Storage storage, c10::DispatchKey key, caffe2::TypeMeta dtype, at::IntArrayRef sizes,
                        at::IntArrayRef strides, int64_t offset) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key), dtype);
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  return t;
}

}  // namespace

// Device tensor on device `index` with `host`'s metadata; shares `like`'s device storage when given.
at::Tensor wrap(const at::Tensor& host, const c10::optional<at::Tensor>& like, int64_t index) {
  TORCH_CHECK(index >= 0 && index < device_count_, "device index ", index, " is not one of the ", device_count_,
              " host-backed devices");
  c10::Device device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index));
  c10::Storage st = like.has_value() ? like->storage() : alias_storage(host.storage(), device);
  return with_storage(std::move(st), c10::DispatchKey::PrivateUse1, host.dtype(), host.sizes(), host.strides(),
                      host.storage_offset());
}

// CPU tensor over the memory of device tensor `dev`, same metadata.
at::Tensor host_view(const at::Tensor& dev) {
  return with_storage(alias_storage(dev.storage(), c10::Device(c10::DeviceType::CPU)), c10::DispatchKey::CPU,
                      dev.dtype(), dev.sizes(), dev.strides(), dev.storage_offset());
}

// Point device tensor `dev` at `host`'s memory and metadata, in place.
void repoint(const at::Tensor& dev, const at::Tensor& host) {
  auto* impl = dev.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(alias_storage(host.storage(), dev.device()));
  impl->set_sizes_and_strides(host.sizes(), host.strides(), host.storage_offset());
}

// How many devices the guard reports (the card count of the machine spec).
void set_device_count(int64_t n) {
  TORCH_CHECK(n >= 1 && n <= std::numeric_limits<c10::DeviceIndex>::max(), "device count ", n, " out of range");
  device_count_ = static_cast<c10::DeviceIndex>(n);
}

void register_hooks() {
  static bool done = false;
  if (!done) {
    at::RegisterPrivateUse1HooksInterface(new HostHooks());
    done = true;
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("wrap", &wrap);
  m.def("set_device_count", &set_device_count);
  m.def("host_view", &host_view);
  m.def("repoint", &repoint);
  m.def("register_hooks", &register_hooks);
}
