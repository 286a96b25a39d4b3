// The one translation unit that compiles Boost.Process v2's out-of-line code (the library is
// used with BOOST_PROCESS_V2_SEPARATE_COMPILATION: header-only mode fails to link in 1.81, see
// shared/notes/toolchain.md). Kept alone so it is compiled once and never rebuilt.
#include <boost/process/v2/src.hpp>
