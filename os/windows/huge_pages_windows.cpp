#include <malloc.h>

#include "os/huge_pages.h"

namespace baton::os {

// Windows backs memory with large pages only through VirtualAlloc(MEM_LARGE_PAGES), which needs
// SeLockMemoryPrivilege and locks the pages: not for a worker's ordinary buffers.
std::size_t advise_huge_pages(void* data, std::size_t bytes) {
  (void)data;
  (void)bytes;
  return 0;
}

// Nothing to undo: Windows never gives an ordinary allocation large pages.
std::size_t advise_small_pages(void* data, std::size_t bytes) {
  (void)data;
  (void)bytes;
  return 0;
}

// PrefetchVirtualMemory reads pages in from their backing store; it does not commit fresh ones.
bool populate_pages(void* data, std::size_t bytes) {
  (void)data;
  (void)bytes;
  return false;
}

void* allocate_large_buffer(std::size_t bytes) noexcept {
  return ::_aligned_malloc(bytes == 0 ? 1 : bytes, 64);
}

void free_large_buffer(void* p) noexcept { ::_aligned_free(p); }

}  // namespace baton::os
