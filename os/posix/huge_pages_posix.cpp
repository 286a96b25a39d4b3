#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

#include "os/huge_pages.h"

namespace baton::os {

namespace {

constexpr std::uintptr_t huge_page = std::uintptr_t{2} << 20;
constexpr std::uintptr_t small_page = 4096;

// Gives `advice` for the whole `align`-sized blocks inside [data, data + bytes), so nothing
// outside the buffer is advised. Returns how many bytes were: 0 where there is no such block or
// the OS refuses (a kernel without THP or without the advice: every use here is a hint).
std::size_t advise_interior(void* data, std::size_t bytes, std::uintptr_t align, int advice) {
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (begin + align - 1) & ~(align - 1);
  const std::uintptr_t last = (begin + bytes) & ~(align - 1);
  if (last <= first) return 0;
  if (::madvise(reinterpret_cast<void*>(first), last - first, advice) != 0) return 0;
  return static_cast<std::size_t>(last - first);
}

}  // namespace

std::size_t advise_huge_pages(void* data, std::size_t bytes) {
#ifdef MADV_HUGEPAGE
  return advise_interior(data, bytes, huge_page, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
  return 0;
#endif
}

std::size_t advise_small_pages(void* data, std::size_t bytes) {
#ifdef MADV_NOHUGEPAGE
  return advise_interior(data, bytes, small_page, MADV_NOHUGEPAGE);
#else
  (void)data;
  (void)bytes;
  return 0;
#endif
}

bool populate_pages(void* data, std::size_t bytes) {
#if defined(__linux__)
#ifndef MADV_POPULATE_WRITE
  constexpr int populate_write = 23;  // <linux/mman.h> since 5.14; older glibc headers lack it
#else
  constexpr int populate_write = MADV_POPULATE_WRITE;
#endif
  // EINVAL before 5.14: the writes that follow fault the pages in.
  return advise_interior(data, bytes, small_page, populate_write) != 0;
#else
  (void)data;
  (void)bytes;
  return false;
#endif
}

void* allocate_large_buffer(std::size_t bytes) noexcept {
  std::size_t align = 64;
#ifdef MADV_HUGEPAGE
  // The head start costs no memory: glibc unmaps the skipped part of a large mapping, or gives
  // it back to its heap, bar the chunk header it writes just below the returned address.
  if (bytes >= huge_page) align = huge_page;
#endif
  void* p = nullptr;
  if (::posix_memalign(&p, align, bytes == 0 ? 1 : bytes) != 0) return nullptr;
  return p;
}

void free_large_buffer(void* p) noexcept { std::free(p); }

}  // namespace baton::os
