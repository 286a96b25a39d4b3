// Large buffers on huge pages (Linux transparent huge pages, 2 MiB), so that filling a freshly
// allocated buffer takes one page fault per 2 MiB instead of one per 4 KiB: a resuming worker
// faults in its whole state while it reads it (for the seed job 12k faults, a third of its
// start-up), and its optimizer then streams the buffers with fewer TLB misses. Under a
// hypervisor a fault costs far more (about 10 us a 4 KiB page on one measured VM, where the seed
// job's worker spent 20 ms of its set-up on them), so where a buffer starts matters too: one
// from malloc starts anywhere, and its part before the first 2 MiB boundary stays on small pages.
// allocate_large_buffer starts a buffer of a huge page or more on a boundary. Only the 2 MiB-
// aligned interior of a buffer is advised, so no huge page ever reaches past it (nothing outside
// the buffer becomes resident). The caller owns the buffer; the advice is a hint that changes no
// content. Implementations: os/posix/huge_pages_posix.cpp (madvise
// MADV_HUGEPAGE where the OS has it), os/windows/huge_pages_windows.cpp (nothing: Windows has
// large pages only for privileged, locked allocations).
#pragma once

#include <cstddef>

namespace baton::os {

// Advises huge pages for the 2 MiB-aligned pages inside [data, data + bytes), before anything
// is written there (pages already faulted in stay small until the OS merges them, if ever).
// Returns how many bytes were advised: 0 for a buffer too small to hold an aligned huge page,
// and where the OS has no such advice or refuses it (a hint: never an error).
std::size_t advise_huge_pages(void* data, std::size_t bytes);

// The opposite advice, for the pages wholly inside [data, data + bytes): small pages even where
// the OS would give huge ones unasked (THP `always`). For a measurement of small pages' cost;
// returns how many bytes were advised (0 where the OS has no such advice).
std::size_t advise_small_pages(void* data, std::size_t bytes);

// Makes the pages wholly inside [data, data + bytes) resident and writable in one call (Linux
// 5.14's MADV_POPULATE_WRITE), their contents unchanged, rather than in a page fault each on
// first write: under a hypervisor a fault can cost 10 us a 4 KiB page, and the call takes half
// of that. False where the OS has no such call or refuses it: the caller's own writes then fault
// the pages in as before (a hint: never an error).
bool populate_pages(void* data, std::size_t bytes);

// `bytes` of uninitialised memory, at an address 2 MiB divides if `bytes` is 2 MiB or more (and
// the OS has huge pages), else 64 bytes divides; null when there is no memory for it. Release
// it with free_large_buffer, never with free() (Windows' aligned allocations need their own).
void* allocate_large_buffer(std::size_t bytes) noexcept;
void free_large_buffer(void* p) noexcept;

}  // namespace baton::os
