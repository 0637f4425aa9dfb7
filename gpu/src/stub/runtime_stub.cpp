// The build without CUDA: every entry point of cuda.hpp reports not_built.
#include "troupe/gpu/cuda.hpp"

namespace troupe::gpu {

namespace {
error not_built(const char* what) {
  return error(gpu_errc::not_built, what);
}
}  // namespace

bool built_with_cuda() noexcept {
  return false;
}
expected<int> device_count() {
  return not_built("device_count");
}
expected<void> load_libraries() {
  return not_built("load_libraries");
}
expected<device_info> describe(int) {
  return not_built("describe");
}
expected<void> set_device(int) {
  return not_built("set_device");
}
expected<int> current_device() {
  return not_built("current_device");
}
expected<device_guard> device_guard::make(int) {
  return not_built("device_guard");
}
device_guard::~device_guard() = default;

expected<stream> stream::create() {
  return not_built("stream::create");
}
stream& stream::operator=(stream&& o) noexcept {
  s_ = std::exchange(o.s_, nullptr);
  return *this;
}
stream::~stream() = default;
expected<void> sync_stream(cuda_stream) {
  return not_built("sync_stream");
}
expected<void> stream::sync() {
  return not_built("stream::sync");
}
expected<void> stream::wait(const event&) {
  return not_built("stream::wait");
}

expected<event> event::create(bool) {
  return not_built("event::create");
}
event& event::operator=(event&& o) noexcept {
  e_ = std::exchange(o.e_, nullptr);
  return *this;
}
event::~event() = default;
expected<void> event::record(cuda_stream) {
  return not_built("event::record");
}
expected<bool> event::query() const {
  return not_built("event::query");
}
expected<void> event::sync() const {
  return not_built("event::sync");
}
expected<float> event::elapsed_ms(const event&, const event&) {
  return not_built("event::elapsed_ms");
}

namespace detail {
expected<void*> device_alloc(std::size_t) {
  return not_built("device_alloc");
}
void device_free(void*) noexcept {}
expected<void*> host_alloc(std::size_t) {
  return not_built("host_alloc");
}
void host_free(void*) noexcept {}
expected<void> copy_to_device(void*, const void*, std::size_t, cuda_stream) {
  return not_built("copy");
}
expected<void> copy_to_host(void*, const void*, std::size_t, cuda_stream) {
  return not_built("copy");
}
expected<void> copy_on_device(void*, const void*, std::size_t, cuda_stream) {
  return not_built("copy");
}
expected<void> memset_device(void*, int, std::size_t, cuda_stream) {
  return not_built("memset");
}
}  // namespace detail

}  // namespace troupe::gpu
