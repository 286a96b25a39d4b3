#include "os/huge_pages.h"

namespace baton::os {

// Windows backs memory with large pages only through VirtualAlloc(MEM_LARGE_PAGES), which needs
// SeLockMemoryPrivilege and locks the pages: not for a worker's ordinary buffers.
std::size_t advise_huge_pages(void* data, std::size_t bytes) {
  (void)data;
  (void)bytes;
  return 0;
}

}  // namespace baton::os
