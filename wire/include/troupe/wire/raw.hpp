// Bulk access to Cap'n Proto lists of numbers: their elements as stored in the message (a list's
// content is little-endian, word-aligned and contiguous), so that rows are copied with one memcpy
// instead of element by element. Little-endian hosts only, as all this project builds for.
#pragma once

#include <bit>
#include <cstring>
#include <span>
#include <stdexcept>

#include <capnp/any.h>
#include <capnp/list.h>

namespace troupe::wire {

static_assert(std::endian::native == std::endian::little, "wire_raw.hpp reads lists in place");

// The elements of a List(Float32/UInt64/...) in the message itself (valid while the message is).
template <class T>
std::span<const T> raw(typename capnp::List<T>::Reader list) {
  auto bytes = capnp::AnyList::Reader(list).getRawBytes();
  if (list.size() == 0) return {};
  if (bytes.size() != list.size() * sizeof(T))
    throw std::length_error("a list of numbers of the wrong width");
  return {reinterpret_cast<const T*>(bytes.begin()), list.size()};
}

// The writable elements of a list just built with initX(n).
template <class T>
std::span<T> raw(typename capnp::List<T>::Builder list) {
  auto r = raw<T>(list.asReader());
  return {const_cast<T*>(r.data()), r.size()};
}

}  // namespace troupe::wire
