#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

#include "os/huge_pages.h"

namespace baton::os {

std::size_t advise_huge_pages(void* data, std::size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr std::uintptr_t huge = std::uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (begin + huge - 1) & ~(huge - 1);
  const std::uintptr_t last = (begin + bytes) & ~(huge - 1);
  if (bytes < huge || last <= first) return 0;
  // Refused (a kernel without THP, THP disabled): the buffer simply keeps small pages.
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE) != 0) return 0;
  return static_cast<std::size_t>(last - first);
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
  constexpr std::uintptr_t page = 4096;
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (begin + page - 1) & ~(page - 1);
  const std::uintptr_t last = (begin + bytes) & ~(page - 1);
  if (last <= first) return false;
  // EINVAL before 5.14: the writes that follow fault the pages in.
  return ::madvise(reinterpret_cast<void*>(first), last - first, populate_write) == 0;
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
  if (bytes >= (std::size_t{2} << 20)) align = std::size_t{2} << 20;
#endif
  void* p = nullptr;
  if (::posix_memalign(&p, align, bytes == 0 ? 1 : bytes) != 0) return nullptr;
  return p;
}

void free_large_buffer(void* p) noexcept { std::free(p); }

}  // namespace baton::os
